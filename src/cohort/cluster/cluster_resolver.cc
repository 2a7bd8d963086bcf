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
    return absl::InvalidArgumentError(absl::StrCat(
        "No task with index ", task_id, " in job '", job, "'"));
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

}  // namespace cohort
