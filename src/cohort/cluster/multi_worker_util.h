// multi_worker_util: the rules that give each task of a multi-worker training
// cluster its role (TensorFlow's multi_worker_util, newest revision).
//
// Task types are "chief", "worker", "evaluator" and "ps"; nullopt means "no
// task" (an in-graph client). Every function below except the leaders
// validates first (ValidateClusterSpec) and returns its InvalidArgument.
//
// Thread safety: stateless functions; thread-safe.
#ifndef COHORT_CLUSTER_MULTI_WORKER_UTIL_H_
#define COHORT_CLUSTER_MULTI_WORKER_UTIL_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cohort/base/json.h"
#include "cohort/cluster/cluster_spec.h"

namespace cohort::multi_worker_util {

// Accepts the `as_dict` JSON form (an object), a ClusterDef or a ClusterSpec.
// JSON that is not an object is InvalidArgument "`cluster_spec' should be dict
// or a `tf.train.ClusterSpec` or a `tf.train.ClusterDef` object".
absl::StatusOr<ClusterSpec> NormalizeClusterSpec(const Json& cluster_spec);
absl::StatusOr<ClusterSpec> NormalizeClusterSpec(const ClusterDef& cluster_def);
ClusterSpec NormalizeClusterSpec(const ClusterSpec& cluster_spec);

// Checks, in this order (each InvalidArgument):
//  1. every job is chief, worker, evaluator or ps ("Disallowed task type found
//     in cluster spec");
//  2. task_type is one of those or nullopt ("Unrecognized task_type");
//  3. a non-empty task_type other than evaluator is a job of the spec
//     ("`task_type` 'x' not found in cluster_spec."); an evaluator outside
//     the cluster is valid;
//  4. at most one chief task and at most one evaluator task ("There must be
//     at most one 'chief' job.");
//  5. when task_type is a job, task_id is below its padded task count ("The
//     `task_id` N exceeds the maximum id of T."), and not negative.
absl::Status ValidateClusterSpec(const ClusterSpec& cluster_spec,
                                 const std::optional<std::string>& task_type,
                                 std::optional<int64_t> task_id);

// Chief and evaluator are chief; so is worker 0 when there is no chief job.
absl::StatusOr<bool> IsChief(const ClusterSpec& cluster_spec,
                             const std::optional<std::string>& task_type,
                             std::optional<int64_t> task_id);

// Evaluator: the evaluator count (0 when the cluster has none; TensorFlow
// raises KeyError there). Chief/worker: chief count + worker count. Any other
// type: InvalidArgument "Unexpected `task_type` 'ps'".
absl::StatusOr<int> WorkerCount(const ClusterSpec& cluster_spec,
                                const std::optional<std::string>& task_type);

// Chief -> 0, worker -> id + chief count, evaluator -> id. Others:
// InvalidArgument "There is no id for task_type 'ps'".
absl::StatusOr<int64_t> IdInCluster(const ClusterSpec& cluster_spec,
                                    const std::optional<std::string>& task_type,
                                    std::optional<int64_t> task_id);

// "" for an empty spec (before validation) and for an evaluator; else
// "/job:chief/replica:0/task:0" when a chief exists, otherwise worker 0.
// FailedPrecondition when the cluster has neither chief nor worker.
absl::StatusOr<std::string> CollectiveLeader(
    const ClusterSpec& cluster_spec,
    const std::optional<std::string>& task_type,
    std::optional<int64_t> task_id);

// "" for an empty spec; else task 0 of the first of ps, chief, worker that
// exists ("/job:ps/replica:0/task:0"); "" when none does.
std::string CoordinationLeader(const ClusterSpec& cluster_spec);

}  // namespace cohort::multi_worker_util

#endif  // COHORT_CLUSTER_MULTI_WORKER_UTIL_H_
