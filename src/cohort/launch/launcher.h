// The gang launcher behind `cohort launch -n N`: starts every task of a job
// on this machine, all or nothing, hosts the job's control plane, and
// retries the whole gang when any task fails (Spark's barrier-stage rules),
// or, under RestartMode::kTask, the failed task alone.
//
//   LaunchOptions options;
//   options.num_workers = 4;
//   options.command = {"python3", "train.py"};
//   Launcher launcher(Env::Default(), options);
//   absl::StatusOr<LaunchResult> result = launcher.Run();   // blocks
//
// What a task gets: TF_CONFIG (cluster of 127.0.0.1 addresses on free ports,
// and its own task), COHORT_TASK_NAME ("worker:1"), the job token
// (COHORT_JOB_TOKEN, required by every server of the job), the address of the
// job's coordination service (kEnvCoordinationAddress), and for gang members
// (chief and workers) the BarrierTaskContext variables
// (barrier_task_context.h), whose barrier addresses are the same server's:
// the job has one control plane (one server, one token, one timer engine:
// the coordination service with the barriers on it,
// barrier/barrier_control_plane.h), kept for the whole job and reset
// between attempts (the next attempt's tasks register afresh).
// Partition ids: the chief is partition 0 when present, then the workers in
// index order. ps and evaluator tasks are not in the barrier gang.
//
// Output: each output line of a task is written to `output` as
// "[worker:1] line" and to <log_dir>/worker-1.attempt-<A>.log. Launcher
// messages (progress, root-cause summary) go to `messages`.
//
// Failure handling under --restart task (LaunchOptions::restart kTask): a
// task that fails is restarted alone, with the same TF_CONFIG and a new
// process (a new incarnation at the coordination service, whose jobs are
// then all recoverable: one task's failure is not propagated to the
// others), up to max_restarts times per task; the failure after that is
// handled as below, and never restarts the gang.
//
// Failure handling: when a task of the current attempt exits non-zero or by
// a signal, or the coordination service puts it in ERROR (its heartbeats
// stopped for heartbeat_timeout, or it reported an error), the launcher stops
// every task of that attempt (SIGTERM to each task's process group, SIGKILL
// after `stop_grace`), clears the attempt's barrier state, prints one
// root-cause summary (task, exit code or signal, when, last lines of its log)
// and, while restarts remain, starts the whole gang again with the next attempt
// number. Failures reported for an older attempt, and further failures of an
// attempt that is already failing, never cause another retry. The job succeeds
// when every chief, worker and evaluator task exits 0 (ps tasks are then
// stopped). Each attempt runs through the attempt supervisor the cluster
// launcher runs too (attempt_supervisor.h), with an in-memory ledger.
//
// Thread safety: Run() is called once, from one thread; Stop() may be called
// from any thread (e.g. a signal-watching thread) at any time.
#ifndef COHORT_LAUNCH_LAUNCHER_H_
#define COHORT_LAUNCH_LAUNCHER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "cohort/base/env.h"
#include "cohort/base/json.h"
#include "cohort/coord/elastic_membership.h"
#include "cohort/launch/attempt_supervisor.h"
#include "cohort/launch/job_plan.h"

namespace cohort::launch {

// The job shape (JobShape's fields): either num_workers alone (`-n N`), or
// chief/workers/ps/evaluator like a TensorFlow cluster.
struct LaunchOptions : JobShape {
  // Slots on this machine; a job with more tasks fails before starting
  // anything. -1: no limit.
  int slots = -1;
  // What a failure restarts: the whole gang (a new attempt), or the failed
  // task alone (its own process again; the others keep running).
  RestartMode restart = RestartMode::kGang;
  // How many times the whole gang (kGang), or each task (kTask), may be
  // restarted after a failure.
  int max_restarts = 0;
  // `--elastic MIN:MAX` (min 0: off): a data-parallel gang of MAX tasks
  // whose members train on while at least MIN remain (restart kTask; see
  // AttemptPlan::Elastic and training/elastic_gang.h); tasks get
  // COHORT_ELASTIC and COHORT_ELASTIC_WAIT.
  coord::ElasticRange elastic;
  // How long the members stay below MIN waiting for a replacement.
  absl::Duration elastic_wait = absl::Seconds(60);
  // The coordinator's sync timeout (Spark's spark.barrier.sync.timeout,
  // default 365 days).
  absl::Duration barrier_timeout = absl::Hours(24 * 365);
  // Where per-task logs go; empty: a fresh directory under $TMPDIR or /tmp.
  std::string log_dir;
  // The program and its arguments, run once per task.
  std::vector<std::string> command;
  // The address tasks and the control plane listen on.
  std::string host = "127.0.0.1";
  // A connected task silent this long is failed (the service's rule).
  absl::Duration heartbeat_timeout = absl::Seconds(10);
  // Time between SIGTERM and SIGKILL when stopping tasks.
  absl::Duration stop_grace = absl::Seconds(5);
  // Lines of a failed task's log shown in the root-cause summary.
  int summary_lines = 10;
  // Print a progress line (at most once a second, when it changes), and,
  // once tasks publish training metrics (training/metrics_publisher_hook.h),
  // "progress: global step S/N (P%), E examples/s, ETA T" every
  // `progress_every` when it changed.
  bool progress = true;
  absl::Duration progress_every = absl::Seconds(5);
  // Task output goes only to the logs, and of the launcher's own lines only
  // the training progress line and the job's summary (how it ended, the
  // root cause, restarts) are printed.
  bool quiet = false;
  // "[HOST:]PORT": serve the job's page there (job_page.h; loopback when
  // HOST is left out). Empty: no page.
  std::string ui;
  // The job token every server of the job requires; empty: a fresh random
  // one. Tasks get it as COHORT_JOB_TOKEN.
  std::string job_token;
  // Extra "KEY=VALUE" entries for every task's environment.
  std::vector<std::string> extra_env;
  // Sinks; each call gets one complete line without its newline. Defaults:
  // stdout for task output, stderr for launcher messages.
  std::function<void(const std::string&)> output;
  std::function<void(const std::string&)> messages;
};

struct LaunchResult {
  bool succeeded = false;
  // The exit code `cohort launch` should return: 0 on success; otherwise the
  // root-cause task's exit code (128 + signal when it was killed), or 130
  // after Stop().
  int exit_code = 0;
  // Attempts started (1 + restarts used).
  int attempts = 0;
  // The root-cause summary of the last failure (empty on success).
  std::string failure_summary;
  std::string log_dir;
};

class Launcher {
 public:
  // `env` must outlive the launcher.
  Launcher(Env* env, LaunchOptions options);
  ~Launcher();
  Launcher(const Launcher&) = delete;
  Launcher& operator=(const Launcher&) = delete;

  // Runs the job to the end and blocks until then. A finished job, failed or
  // not, is a LaunchResult; an error status means nothing could be started:
  // InvalidArgument for bad options, FailedPrecondition when the job needs
  // more slots than `slots` (nothing is started), NotFound when the program
  // does not exist, Unavailable when no port could be bound.
  absl::StatusOr<LaunchResult> Run();

  // Stops every task cleanly (SIGTERM, then SIGKILL after stop_grace) and
  // makes Run() return with exit code 130. Thread-safe; never blocks.
  void Stop();

  // Once Run() started the control plane: its gRPC address ("host:port"),
  // which serves the coordination service and the barriers.
  std::string barrier_address() const;
  // Once Run() started the job page (LaunchOptions::ui): its URL, with the
  // token; empty before, or without a page.
  std::string page_url() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace cohort::launch

#endif  // COHORT_LAUNCH_LAUNCHER_H_
