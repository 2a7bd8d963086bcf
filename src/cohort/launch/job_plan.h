// What each task of a launched job is, and what it is told: the job's shape
// (chief, workers, ps, evaluator), the order of the barrier gang, TF_CONFIG,
// the environment a task starts with, and the whole-gang retry rules.
// Shared by the single-machine launcher (launcher.h) and the launcher that
// runs one task per cluster-engine task (cluster_launcher.h).
//
// Thread safety: functions are pure.
#ifndef COHORT_LAUNCH_JOB_PLAN_H_
#define COHORT_LAUNCH_JOB_PLAN_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "cohort/barrier/barrier_task_context.h"
#include "cohort/base/json.h"

namespace cohort::launch {

// kEnvTaskRestart (COHORT_TASK_RESTART) is in barrier_task_context.h,
// where the tasks read it.
using barrier::kEnvTaskRestart;

// The barrier stage every launched gang runs as.
inline constexpr int64_t kStageId = 0;

// One task of the job.
struct TaskSpec {
  std::string job;  // "chief", "worker", "ps", "evaluator"
  int index = 0;
  // Position in the barrier gang, or -1 for ps/evaluator.
  int partition_id = -1;
  std::string Name() const { return job + ":" + std::to_string(index); }
};

// The job shape `cohort launch` takes on its command line.
struct JobShape {
  int num_workers = 0;
  bool chief = false;
  int num_ps = 0;
  bool evaluator = false;
};

// The tasks of a job shape, gang members first (chief, workers), then ps,
// then evaluator. InvalidArgument naming the flag when the shape is empty or
// negative.
absl::StatusOr<std::vector<TaskSpec>> PlanTasks(const JobShape& shape);

// Parses `--jobs chief=1,worker=2,ps=1`: job -> task count. Jobs are chief
// (at most 1), worker, ps and evaluator (at most 1); InvalidArgument naming
// the entry otherwise, or when a job repeats or a count is not a positive
// integer.
absl::StatusOr<std::map<std::string, int>> ParseJobCounts(
    absl::string_view text);

// The role of each of `num_engine_tasks` cluster-engine tasks: jobs sorted by
// name take consecutive slices of the engine's task list (TensorFlow's Slurm
// resolver's rule), so engine task k gets the k-th entry. Partition ids: the
// chief first, then the workers in index order. InvalidArgument when the
// counts do not add up to `num_engine_tasks` (naming both) or the job has no
// chief and no workers.
absl::StatusOr<std::vector<TaskSpec>> PlanEngineTasks(
    const std::map<std::string, int>& jobs, int num_engine_tasks);

// TF_CONFIG for `task` in a cluster whose addresses are `addresses` (one per
// entry of `tasks`). The evaluator is not part of the cluster (TensorFlow's
// convention).
Json MakeTfConfig(const std::vector<TaskSpec>& tasks,
                  const std::vector<std::string>& addresses,
                  const TaskSpec& task);

// Everything a task's environment is made of (see TaskEnvironment).
struct TaskEnvironmentInputs {
  std::vector<TaskSpec> tasks;
  std::vector<std::string> addresses;  // one per task, "host:port"
  int task = 0;                        // index into `tasks`
  int attempt = 0;
  std::string job_token;
  std::string coordination_address;  // "" when the job has no service
  // The service's heartbeat timeout for the job's programs.
  absl::Duration heartbeat_timeout = absl::ZeroDuration();
  std::string barrier_address;      // gRPC
  std::string barrier_tcp_address;  // framed TCP
  absl::Duration barrier_timeout;
  std::string epoch_file;
  std::vector<std::string> extra_env;  // "KEY=VALUE", applied first
};

// The "KEY=VALUE" overrides (and bare "KEY" removals) for one task: TF_CONFIG,
// COHORT_TASK_NAME, the job token, the attempt, the coordination address and,
// for gang members, BarrierTaskContext's variables (barrier_task_context.h).
// A task outside the gang gets those removed, so inherited values never leak.
std::vector<std::string> TaskEnvironment(const TaskEnvironmentInputs& in);

}  // namespace cohort::launch

#endif  // COHORT_LAUNCH_JOB_PLAN_H_
