#include "cohort/cluster/multi_worker_util.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cohort/base/status.h"

namespace cohort::multi_worker_util {
namespace {

constexpr const char* kAllowedTypes[] = {"chief", "worker", "evaluator", "ps"};
constexpr const char* kAllowedText =
    "('chief', 'worker', 'evaluator', 'ps', None)";

bool IsAllowed(const std::string& type) {
  for (const char* allowed : kAllowedTypes) {
    if (type == allowed) return true;
  }
  return false;
}

int CountTasks(const ClusterSpec& spec, const char* job) {
  const ClusterSpec::TaskMap* tasks = spec.tasks(job);
  return tasks == nullptr ? 0 : static_cast<int>(tasks->size());
}

std::string TypeText(const std::optional<std::string>& type) {
  return type.has_value() ? absl::StrCat("'", *type, "'") : "None";
}

}  // namespace

absl::StatusOr<ClusterSpec> NormalizeClusterSpec(const Json& cluster_spec) {
  if (!cluster_spec.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "`cluster_spec' should be dict or a `tf.train.ClusterSpec` or a "
        "`tf.train.ClusterDef` object (a JSON object in cohort); got ",
        JsonTypeName(cluster_spec), " ", JsonPreview(cluster_spec)));
  }
  return ClusterSpec::FromJson(cluster_spec, "cluster_spec");
}

absl::StatusOr<ClusterSpec> NormalizeClusterSpec(
    const ClusterDef& cluster_def) {
  return ClusterSpec::FromClusterDef(cluster_def);
}

ClusterSpec NormalizeClusterSpec(const ClusterSpec& cluster_spec) {
  return cluster_spec;
}

absl::Status ValidateClusterSpec(const ClusterSpec& spec,
                                 const std::optional<std::string>& task_type,
                                 std::optional<int64_t> task_id) {
  for (const std::string& job : spec.jobs()) {
    if (!IsAllowed(job)) {
      return absl::InvalidArgumentError(
          absl::StrCat("Disallowed task type found in cluster spec: job '", job,
                       "'. Allowed types are ", kAllowedText,
                       " and the cluster spec is ", spec.DebugString(), "."));
    }
  }
  if (task_type.has_value() && !IsAllowed(*task_type)) {
    return absl::InvalidArgumentError(
        absl::StrCat("Unrecognized task_type: '", *task_type,
                     "', valid task types are: ", kAllowedText, "."));
  }
  if (task_type.has_value() && !task_type->empty() &&
      !spec.HasJob(*task_type) && *task_type != "evaluator") {
    return absl::InvalidArgumentError(
        absl::StrCat("`task_type` '", *task_type,
                     "' not found in cluster_spec. The cluster "
                     "spec is ",
                     spec.DebugString(), "."));
  }
  for (const char* single : {"chief", "evaluator"}) {
    if (CountTasks(spec, single) > 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "There must be at most one '", single, "' job. The cluster has ",
          CountTasks(spec, single), " '", single, "' tasks."));
    }
  }
  if (task_type.has_value() && spec.HasJob(*task_type)) {
    const int64_t id = task_id.value_or(0);
    const size_t padded = spec.job_tasks(*task_type)->size();
    if (id >= static_cast<int64_t>(padded)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "The `task_id` ", id, " exceeds the maximum id of ", *task_type,
          ". Job '", *task_type, "' has task ids below ", padded, "."));
    }
    if (id < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("The `task_id` ", id, " of ", *task_type,
                       " is negative; task ids start at 0."));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> IsChief(const ClusterSpec& spec,
                             const std::optional<std::string>& task_type,
                             std::optional<int64_t> task_id) {
  COHORT_RETURN_IF_ERROR(ValidateClusterSpec(spec, task_type, task_id));
  if (task_type == "chief" || task_type == "evaluator") return true;
  return !spec.HasJob("chief") && task_type == "worker" && task_id == 0;
}

absl::StatusOr<int> WorkerCount(const ClusterSpec& spec,
                                const std::optional<std::string>& task_type) {
  COHORT_RETURN_IF_ERROR(ValidateClusterSpec(spec, task_type, 0));
  if (task_type == "evaluator") return CountTasks(spec, "evaluator");
  if (task_type == "chief" || task_type == "worker") {
    return CountTasks(spec, "chief") + CountTasks(spec, "worker");
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "Unexpected `task_type` ", TypeText(task_type),
      "; worker_count is defined for chief, worker and evaluator."));
}

absl::StatusOr<int64_t> IdInCluster(const ClusterSpec& spec,
                                    const std::optional<std::string>& task_type,
                                    std::optional<int64_t> task_id) {
  COHORT_RETURN_IF_ERROR(ValidateClusterSpec(spec, task_type, task_id));
  if (task_type == "chief") return 0;
  if (task_type == "worker") {
    return task_id.value_or(0) + CountTasks(spec, "chief");
  }
  if (task_type == "evaluator") return task_id.value_or(0);
  return absl::InvalidArgumentError(
      absl::StrCat("There is no id for task_type ", TypeText(task_type),
                   "; only chief, worker and evaluator tasks have one."));
}

absl::StatusOr<std::string> CollectiveLeader(
    const ClusterSpec& spec, const std::optional<std::string>& task_type,
    std::optional<int64_t> task_id) {
  if (spec.empty()) return std::string();
  COHORT_RETURN_IF_ERROR(ValidateClusterSpec(spec, task_type, task_id));
  if (task_type == "evaluator") return std::string();
  if (spec.HasJob("chief")) return std::string("/job:chief/replica:0/task:0");
  if (spec.HasJob("worker")) return std::string("/job:worker/replica:0/task:0");
  return absl::FailedPreconditionError(absl::StrCat(
      "the cluster has neither a 'chief' nor a 'worker' job, so there is no "
      "collective leader; cluster spec: ",
      spec.DebugString()));
}

std::string CoordinationLeader(const ClusterSpec& spec) {
  if (spec.empty()) return "";
  for (const char* job : {"ps", "chief", "worker"}) {
    if (spec.HasJob(job))
      return absl::StrCat("/job:", job, "/replica:0/task:0");
  }
  return "";
}

}  // namespace cohort::multi_worker_util
