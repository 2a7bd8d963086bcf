#include "cohort/cluster/cluster_resolver.h"

#include <limits>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "cohort/base/status.h"

namespace cohort {

std::string FormatMasterUrl(absl::string_view master,
                            const std::optional<std::string>& rpc_layer) {
  if (rpc_layer.has_value() && !rpc_layer->empty()) {
    return absl::StrCat(*rpc_layer, "://", master);
  }
  return std::string(master);
}

std::optional<std::string> RpcLayerOr(
    const std::optional<std::string>& rpc_layer,
    const std::optional<std::string>& fallback) {
  return rpc_layer.has_value() && !rpc_layer->empty() ? rpc_layer : fallback;
}

AcceleratorCounts CountAccelerators(const std::vector<DeviceInfo>& devices,
                                    const std::optional<std::string>& task_type,
                                    const std::optional<int64_t>& task_id) {
  AcceleratorCounts counts;
  const bool filter = task_type.has_value() && task_id.has_value();
  const std::string job_part = filter ? absl::StrCat("/job:", *task_type) : "";
  const std::string task_part = filter ? absl::StrCat("/task:", *task_id) : "";
  for (const DeviceInfo& device : devices) {
    if (device.device_type == "CPU" || device.device_type == "XLA_CPU") {
      continue;
    }
    // Substring matching, as TensorFlow does: "/job:worker" also matches
    // "/job:worker1" and "/task:1" matches "/task:10".
    if (filter && (!absl::StrContains(device.name, job_part) ||
                   !absl::StrContains(device.name, task_part))) {
      continue;
    }
    ++counts[device.device_type];
  }
  return counts;
}

absl::StatusOr<std::string> TaskAddress(const ClusterSpec& spec,
                                        absl::string_view job,
                                        int64_t task_id) {
  if (task_id < std::numeric_limits<int>::min() ||
      task_id > std::numeric_limits<int>::max()) {
    if (!spec.HasJob(job)) {
      return absl::InvalidArgumentError(
          absl::StrCat("No such job in cluster: '", job, "'"));
    }
    return absl::InvalidArgumentError(
        absl::StrCat("No task with index ", task_id, " in job '", job, "'"));
  }
  return spec.task_address(job, static_cast<int>(task_id));
}

absl::StatusOr<AcceleratorCounts> ClusterResolver::num_accelerators(
    std::optional<std::string> task_type, std::optional<int64_t> task_id) {
  if (device_lister_ == nullptr) return AcceleratorCounts();
  COHORT_ASSIGN_OR_RETURN(std::string master_url, master());
  auto devices = device_lister_->ListDevices(master_url);
  if (!devices.ok()) {
    return Annotate(devices.status(),
                    absl::StrCat("listing devices through master \"",
                                 master_url, "\" for resolver ", name()));
  }
  return CountAccelerators(*devices, task_type, task_id);
}

absl::StatusOr<std::string> ClusterResolverWithTaskAttributes::master(
    std::optional<std::string> task_type, std::optional<int64_t> task_id,
    std::optional<std::string> rpc_layer) {
  // Defaults are taken before cluster_spec(), which may reset the attributes
  // (Slurm).
  if (!task_type.has_value()) task_type = task_type_;
  if (!task_id.has_value()) task_id = task_id_;
  if (!task_type.has_value() || !task_id.has_value()) return std::string();
  COHORT_ASSIGN_OR_RETURN(ClusterSpec spec, cluster_spec());
  COHORT_ASSIGN_OR_RETURN(std::string address,
                          spec.task_address(*task_type, *task_id));
  return FormatMasterUrl(address, RpcLayerOr(rpc_layer, rpc_layer_));
}

absl::Status ClusterResolverWithTaskAttributes::set_task_type(
    std::optional<std::string> v) {
  task_type_ = std::move(v);
  return absl::OkStatus();
}

absl::Status ClusterResolverWithTaskAttributes::set_task_id(
    std::optional<int64_t> v) {
  task_id_ = v;
  return absl::OkStatus();
}

absl::Status ClusterResolverWithTaskAttributes::set_rpc_layer(
    std::optional<std::string> v) {
  rpc_layer_ = std::move(v);
  return absl::OkStatus();
}

}  // namespace cohort
