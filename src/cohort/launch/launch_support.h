// Files and messages both launchers (launcher.h, cluster_launcher.h) write:
// the log directory, private files (the job token), the root-cause summary
// of a failed attempt, and what a failure tells the gang's barriers.
#ifndef COHORT_LAUNCH_LAUNCH_SUPPORT_H_
#define COHORT_LAUNCH_LAUNCH_SUPPORT_H_

#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cohort/barrier/barrier_coordinator.h"
#include "cohort/base/env.h"
#include "cohort/coord/coordination_server.h"
#include "cohort/coord/elastic_membership.h"
#include "cohort/launch/attempt_ledger.h"
#include "cohort/launch/attempt_supervisor.h"
#include "cohort/launch/job_plan.h"
#include "cohort/rpc/transport.h"

namespace cohort::launch {

// `log_dir` created (with its parents) when given; otherwise a fresh
// directory under $TMPDIR or /tmp. FailedPrecondition naming the path and
// --log-dir.
absl::StatusOr<std::string> PrepareLogDir(const std::string& log_dir);

// Writes `contents` to a new file at `path` readable by the owner only; an
// existing file (or link) at `path` is replaced, never written through.
absl::Status WritePrivateFile(const std::string& path,
                              const std::string& contents);

// A line sink writing each line and a newline to `file` (stdout, stderr),
// flushed: the launchers' default output and message sinks.
std::function<void(const std::string&)> LineWriter(FILE* file);

// "2026-11-24 14:03:07.123 UTC".
std::string FormatWallTime(absl::Time t);

// The root-cause summary of a failed attempt: first "attempt A failed:
// task T (WHERE) REASON at TIME, D after it started", then `barrier` (the
// gang's barrier failure) when not empty, the failure's log lines, last
// "stopped N other task(s) of attempt A".
std::vector<std::string> FailureSummaryLines(int attempt,
                                             const FailureRecord& failure,
                                             const std::string& barrier,
                                             int stopped_others);

// The job's one control plane: a coordination service for `tasks` at
// `address` ("host:0": any port) with `coordinator`'s barriers served on the
// same server (barrier/barrier_control_plane.h), every call checked against
// `security`. With `tasks_restart_alone` (--restart task) every job is
// recoverable: a task's failure is not propagated to the others, and its
// restarted process registers with a new incarnation. Errors as
// CoordinationServer::Start.
absl::StatusOr<std::unique_ptr<coord::CoordinationServer>> StartJobControlPlane(
    Env* env, const std::string& address,
    const rpc::TransportSecurity& security, absl::Duration heartbeat_timeout,
    const std::vector<TaskSpec>& tasks,
    std::shared_ptr<barrier::BarrierCoordinator> coordinator,
    bool tasks_restart_alone);

// The attempt supervisor's on_failure hook for a launcher that serves the
// job's barriers: keeps the gang's own barrier failure, if any, for the
// summary ("barrier: ..." into `*barrier_failure`), then clears the
// attempt's stage so tasks waiting at a barrier learn why the attempt ended.
// `coordinator` and `barrier_failure` must outlive the hook.
std::function<void(const FailureRecord&)> GangFailureHook(
    barrier::BarrierCoordinator* coordinator, int attempt,
    std::string* barrier_failure);

// For `--elastic MIN:MAX`, before any task starts: generation 0 of the
// membership on `store` (the programs' coordination service), every task of
// the job.
absl::Status WriteFirstGeneration(const coord::ElasticStore& store,
                                  const std::vector<TaskSpec>& tasks);

// For `--elastic MIN:MAX`: the tasks' COHORT_ELASTIC and
// COHORT_ELASTIC_WAIT (added to `extra_env`) and the attempt's elastic plan
// on `store` (the programs' coordination service): a lost task leaves the
// membership, and one removed while running is stopped; with
// `enforce_minimum` (one launcher of the job: task 0's, knowing the job's
// `tasks`) the attempt also fails once the members stay below MIN for
// `wait`.
void PlanElastic(coord::ElasticRange range, absl::Duration wait,
                 coord::ElasticStore store, bool enforce_minimum,
                 const std::vector<TaskSpec>& tasks,
                 std::vector<std::string>& extra_env, AttemptPlan& plan);

}  // namespace cohort::launch

#endif  // COHORT_LAUNCH_LAUNCH_SUPPORT_H_
