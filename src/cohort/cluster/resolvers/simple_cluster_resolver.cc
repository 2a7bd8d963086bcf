#include "cohort/cluster/resolvers/simple_cluster_resolver.h"

#include "cohort/base/status.h"

namespace cohort {

SimpleClusterResolver::SimpleClusterResolver(ClusterSpec cluster_spec,
                                             Options options)
    : ClusterResolverWithTaskAttributes(std::move(options.task_type),
                                        options.task_id,
                                        std::move(options.rpc_layer)),
      spec_(std::move(cluster_spec)),
      master_(std::move(options.master)),
      environment_(std::move(options.environment)),
      num_accelerators_(std::move(options.num_accelerators)) {}

absl::StatusOr<std::string> SimpleClusterResolver::master(
    std::optional<std::string> task_type, std::optional<int64_t> task_id,
    std::optional<std::string> rpc_layer) {
  std::string address = master_;
  if (task_type.has_value() && task_id.has_value()) {
    COHORT_ASSIGN_OR_RETURN(address, TaskAddress(spec_, *task_type, *task_id));
  }
  return FormatMasterUrl(address, RpcLayerOr(rpc_layer, rpc_layer_));
}

}  // namespace cohort
