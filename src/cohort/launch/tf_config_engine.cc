// --engine tf_config: one launcher per task of a TF_CONFIG cluster (any
// scheduler that writes TF_CONFIG, as SageMaker, Vertex AI and Kubeflow's
// TFJob do). The cluster's jobs, sorted by name, give the engine's task list
// (chief, ps, worker); TF_CONFIG's task picks this launcher's entry, and the
// first entry's address is the rendezvous. The roles are TF_CONFIG's own, so
// --jobs is not needed. The program's TF_CONFIG is rewritten with the ports
// the launchers agreed on.
#include "absl/strings/str_cat.h"
#include "cohort/base/status.h"
#include "cohort/cluster/resolvers/tf_config_cluster_resolver.h"
#include "cohort/launch/engine.h"

namespace cohort::launch {

absl::StatusOr<EngineTask> ResolveTfConfigTask(Env* env,
                                               const EngineFlags& flags) {
  std::optional<std::string> text = env->GetVar("TF_CONFIG");
  if (!text.has_value() || text->empty()) {
    return absl::FailedPreconditionError(
        "--engine tf_config: TF_CONFIG is not set; the scheduler must give "
        "every task its cluster and task, as "
        "{\"cluster\": {\"worker\": [...]}, \"task\": {\"type\": \"worker\", "
        "\"index\": 0}}");
  }
  COHORT_ASSIGN_OR_RETURN(TfConfig config, ParseTfConfig(*text, "TF_CONFIG"));
  if (!config.task_type.has_value() || !config.task_index.has_value()) {
    return absl::FailedPreconditionError(
        "--engine tf_config: TF_CONFIG has no task type and index; every "
        "task needs \"task\": {\"type\": ..., \"index\": ...}");
  }
  EngineTask task;
  task.engine = "tf_config";
  task.index = -1;
  std::vector<std::string> jobs = config.cluster.jobs();
  std::sort(jobs.begin(), jobs.end());
  std::string first;
  for (const std::string& job : jobs) {
    COHORT_ASSIGN_OR_RETURN(auto addresses, config.cluster.job_tasks(job));
    for (size_t i = 0; i < addresses.size(); ++i) {
      if (!addresses[i].has_value()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--engine tf_config: TF_CONFIG's job ", job, " has no task ", i,
            "; the launcher needs dense task indices"));
      }
      COHORT_ASSIGN_OR_RETURN(
          auto host_port, SplitHostPort(*addresses[i], "TF_CONFIG address"));
      if (first.empty()) first = *addresses[i];
      if (job == *config.task_type &&
          static_cast<int64_t>(i) == *config.task_index) {
        task.index = static_cast<int>(task.hosts.size());
      }
      task.hosts.push_back(host_port.first);
    }
    task.jobs[job] = static_cast<int>(addresses.size());
  }
  if (task.index < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--engine tf_config: TF_CONFIG's task ", *config.task_type,
                     ":", *config.task_index, " is not in its cluster"));
  }
  task.count = static_cast<int>(task.hosts.size());
  COHORT_ASSIGN_OR_RETURN(auto host_port, SplitHostPort(first, "TF_CONFIG"));
  COHORT_ASSIGN_OR_RETURN(
      task.rendezvous,
      ApplyRendezvousFlag(host_port.first, host_port.second, flags.rendezvous));
  task.source = absl::StrCat("TF_CONFIG task ", *config.task_type, ":",
                             *config.task_index, " of ", task.count);
  return task;
}

}  // namespace cohort::launch
