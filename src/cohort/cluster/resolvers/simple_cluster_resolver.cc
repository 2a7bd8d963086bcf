#include "cohort/cluster/resolvers/simple_cluster_resolver.h"

#include "cohort/base/status.h"

namespace cohort {

SimpleClusterResolver::SimpleClusterResolver(ClusterSpec cluster_spec,
                                             Options options)
    : spec_(std::move(cluster_spec)),
      master_(std::move(options.master)),
      task_type_(std::move(options.task_type)),
      task_id_(options.task_id),
      environment_(std::move(options.environment)),
      num_accelerators_(std::move(options.num_accelerators)),
      rpc_layer_(std::move(options.rpc_layer)) {}

absl::StatusOr<std::string> SimpleClusterResolver::master(
    std::optional<std::string> task_type, std::optional<int64_t> task_id,
    std::optional<std::string> rpc_layer) {
  std::string address = master_;
  if (task_type.has_value() && task_id.has_value()) {
    COHORT_ASSIGN_OR_RETURN(address, TaskAddress(spec_, *task_type, *task_id));
  }
  return FormatMasterUrl(
      address, rpc_layer.has_value() && !rpc_layer->empty() ? rpc_layer
                                                            : rpc_layer_);
}

absl::Status SimpleClusterResolver::set_task_type(std::optional<std::string> v) {
  task_type_ = std::move(v);
  return absl::OkStatus();
}
absl::Status SimpleClusterResolver::set_task_id(std::optional<int64_t> v) {
  task_id_ = v;
  return absl::OkStatus();
}
absl::Status SimpleClusterResolver::set_rpc_layer(std::optional<std::string> v) {
  rpc_layer_ = std::move(v);
  return absl::OkStatus();
}

}  // namespace cohort
