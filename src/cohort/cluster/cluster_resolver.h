// ClusterResolver: finds the cluster a process belongs to (from TF_CONFIG,
// Slurm, SageMaker, Kubernetes, GCE, Cloud TPU, or a fixed spec) and this
// process's place in it.
//
// Values that Python's resolvers leave as None are std::nullopt here. Errors
// follow the conformance mapping (docs/conformance.md):
// ValueError -> InvalidArgument, KeyError -> AlreadyExists (merge conflict),
// RuntimeError -> FailedPrecondition or Unavailable, TypeError ->
// InvalidArgument, AssertionError -> FailedPrecondition.
//
// Thread safety: a resolver is not thread-safe; give each thread its own or
// synchronise externally. Resolvers that call a REST API block for at most
// their configured request timeout per call and say which endpoint failed.
#ifndef COHORT_CLUSTER_CLUSTER_RESOLVER_H_
#define COHORT_CLUSTER_CLUSTER_RESOLVER_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "cohort/cluster/cluster_spec.h"

namespace cohort {

// One device as a device listing reports it.
struct DeviceInfo {
  std::string name;         // "/job:worker/replica:0/task:0/device:GPU:0"
  std::string device_type;  // "GPU", "TPU", "CPU", ...
};

// Lists the devices reachable through a master (a worker implements this;
// tests fake it).
class DeviceLister {
 public:
  virtual ~DeviceLister() = default;
  // `master` is the resolver's master URL ("" for in-process).
  virtual absl::StatusOr<std::vector<DeviceInfo>> ListDevices(
      absl::string_view master) = 0;
};

// Device type -> count, e.g. {"GPU": 4}.
using AcceleratorCounts = std::map<std::string, int>;

// "<rpc_layer>://<master>", or `master` unchanged when the layer is empty or
// absent.
std::string FormatMasterUrl(absl::string_view master,
                            const std::optional<std::string>& rpc_layer);

// Python's `rpc_layer or fallback`: `rpc_layer` when set and non-empty, else
// `fallback`.
std::optional<std::string> RpcLayerOr(
    const std::optional<std::string>& rpc_layer,
    const std::optional<std::string>& fallback);

// Counts `devices` by type, leaving out CPU and XLA_CPU. When both task_type
// and task_id are given, keeps only names containing "/job:<type>" and
// "/task:<id>" (substring match, as TensorFlow does).
AcceleratorCounts CountAccelerators(const std::vector<DeviceInfo>& devices,
                                    const std::optional<std::string>& task_type,
                                    const std::optional<int64_t>& task_id);

// spec.task_address(job, task_id) for a 64-bit task id: an id outside the
// int range is InvalidArgument "No task with index N in job 'x'" instead of
// being truncated.
absl::StatusOr<std::string> TaskAddress(const ClusterSpec& spec,
                                        absl::string_view job, int64_t task_id);

class ClusterResolver {
 public:
  virtual ~ClusterResolver() = default;

  // A short name for messages and `cohort resolve`: "tf_config", "slurm", ...
  virtual std::string name() const = 0;

  // Resolves the cluster. May do I/O (environment, REST calls).
  virtual absl::StatusOr<ClusterSpec> cluster_spec() = 0;

  // The master URL of a task (by default this task's), formatted with the
  // given rpc layer or the resolver's. "" where the resolver's rules say so.
  virtual absl::StatusOr<std::string> master(
      std::optional<std::string> task_type = std::nullopt,
      std::optional<int64_t> task_id = std::nullopt,
      std::optional<std::string> rpc_layer = std::nullopt) = 0;

  // This task's type and index, and the rpc layer; nullopt when unknown.
  virtual std::optional<std::string> task_type() = 0;
  virtual std::optional<int64_t> task_id() = 0;
  virtual std::optional<std::string> rpc_layer() = 0;
  // Setters may refuse (GCE's task_type: FailedPrecondition).
  virtual absl::Status set_task_type(std::optional<std::string> task_type) = 0;
  virtual absl::Status set_task_id(std::optional<int64_t> task_id) = 0;
  virtual absl::Status set_rpc_layer(std::optional<std::string> rpc_layer) = 0;

  // "" by default; nullopt where TensorFlow's resolver returns None.
  virtual std::optional<std::string> environment() { return std::string(); }

  // Accelerators per type for a task (default: this task). The default counts
  // the devices that the DeviceLister reports through master().
  virtual absl::StatusOr<AcceleratorCounts> num_accelerators(
      std::optional<std::string> task_type = std::nullopt,
      std::optional<int64_t> task_id = std::nullopt);

  // Where num_accelerators lists devices. Not owned; may be null (then the
  // default num_accelerators returns {}). Resolvers that delegate to others
  // (Union) pass it on.
  virtual void set_device_lister(DeviceLister* lister) {
    device_lister_ = lister;
  }

 protected:
  DeviceLister* device_lister_ = nullptr;
};

// A resolver that stores this task's type, id and rpc layer as attributes:
// the getters return them and the setters replace them (always OK).
// Resolvers with other rules override only what differs (GCE refuses
// set_task_type; TFConfig's getters fall back to TF_CONFIG; Union's to its
// first resolver).
class ClusterResolverWithTaskAttributes : public ClusterResolver {
 public:
  // The shared rule (GCE, Kubernetes, Slurm): task_type and task_id default
  // to the attributes, read before anything else; "" when either is still
  // unset. Otherwise calls cluster_spec() (errors returned as they are), looks
  // the task up in it (InvalidArgument for an unknown job or index) and
  // prefixes the address with `rpc_layer` when non-empty, else with the
  // rpc_layer attribute (none when that is unset or empty).
  absl::StatusOr<std::string> master(
      std::optional<std::string> task_type = std::nullopt,
      std::optional<int64_t> task_id = std::nullopt,
      std::optional<std::string> rpc_layer = std::nullopt) override;

  std::optional<std::string> task_type() override { return task_type_; }
  std::optional<int64_t> task_id() override { return task_id_; }
  std::optional<std::string> rpc_layer() override { return rpc_layer_; }
  absl::Status set_task_type(std::optional<std::string> v) override;
  absl::Status set_task_id(std::optional<int64_t> v) override;
  absl::Status set_rpc_layer(std::optional<std::string> v) override;

 protected:
  ClusterResolverWithTaskAttributes() = default;
  ClusterResolverWithTaskAttributes(std::optional<std::string> task_type,
                                    std::optional<int64_t> task_id,
                                    std::optional<std::string> rpc_layer)
      : task_type_(std::move(task_type)),
        task_id_(task_id),
        rpc_layer_(std::move(rpc_layer)) {}

  // The stored attributes; subclasses read and set them directly where their
  // own rules (overridden getters or setters) must be bypassed.
  std::optional<std::string> task_type_;
  std::optional<int64_t> task_id_;
  std::optional<std::string> rpc_layer_;
};

}  // namespace cohort

#endif  // COHORT_CLUSTER_CLUSTER_RESOLVER_H_
