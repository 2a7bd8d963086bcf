#include "cohort/distribute/strategy.h"

#include "absl/strings/str_cat.h"

namespace cohort::distribute {

bool IsChiefTask(const ClusterSpec* cluster, const std::string& task_type,
                 int task_id) {
  if (cluster == nullptr || cluster->empty()) return true;
  if (task_type.empty() || task_type == "chief" || task_type == "evaluator") {
    return true;
  }
  // Only without a chief job does worker 0 take the chief's duties.
  return task_type == "worker" && task_id == 0 && !cluster->HasJob("chief");
}

void ParameterServerStrategy::Configure(ConfigProto* session_config,
                                        const ClusterSpec* cluster,
                                        const std::string& task_type,
                                        int task_id) {
  is_chief_ = IsChiefTask(cluster, task_type, task_id);
  if (session_config == nullptr || cluster == nullptr || cluster->empty()) {
    return;
  }
  if (task_type == "chief" || task_type == "worker") {
    // A worker talks to the ps tasks and itself only: no session of one
    // worker ever waits on another worker.
    session_config->clear_device_filters();
    session_config->add_device_filters(
        absl::StrCat("/job:", task_type, "/task:", task_id));
    session_config->add_device_filters("/job:ps");
  }
}

std::unique_ptr<Strategy> ParameterServerStrategy::Clone() const {
  return std::make_unique<ParameterServerStrategy>(*this);
}

void CollectiveAllReduceStrategy::Configure(ConfigProto* session_config,
                                            const ClusterSpec* cluster,
                                            const std::string& task_type,
                                            int task_id) {
  is_chief_ = IsChiefTask(cluster, task_type, task_id);
  if (session_config == nullptr || cluster == nullptr || cluster->empty()) {
    return;
  }
  if (task_type != "chief" && task_type != "worker") return;
  // The same leader rule as multi_worker_util::CollectiveLeader; a cluster
  // with a chief or worker task always has one of the two jobs here.
  const char* leader = cluster->HasJob("chief")
                           ? "/job:chief/replica:0/task:0"
                           : "/job:worker/replica:0/task:0";
  session_config->mutable_experimental()->set_collective_group_leader(leader);
  // Each task's session runs its own replica: the master talks to its own
  // task only (the collective ops reach the others through the group).
  session_config->clear_device_filters();
  session_config->add_device_filters(
      absl::StrCat("/job:", task_type, "/task:", task_id));
}

std::unique_ptr<Strategy> CollectiveAllReduceStrategy::Clone() const {
  return std::make_unique<CollectiveAllReduceStrategy>(*this);
}

}  // namespace cohort::distribute
