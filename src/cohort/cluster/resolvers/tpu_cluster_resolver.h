// TpuClusterResolver: the workers of a Cloud TPU (reference §10).
//
// tpu "local": a directly attached TPU; master() is "" and the spec empty.
// Otherwise a CloudTpuClient resolves the name (grpc:// endpoint lists,
// KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS / TPU_NAME / TPU_CONFIG, the Cloud TPU API)
// and the spec is {job_name: ["ip:port", ...]} in API order, plus
// {coordinator_name: [coordinator_address]} when an address is known.
//
// Coordinator: with a coordinator_name and no coordinator_address, TensorFlow
// starts an in-process server on an ephemeral port and uses
// "<metadata local ip>:<port>". This layer cannot depend on the server
// layers, so the start goes through a hook: Options::start_local_server,
// else the process-wide one set with SetTpuLocalServerStarter. cohort itself
// installs none (only the conformance adapter does), and the registered
// "tpu" resolver (`cohort resolve`) sets no coordinator name: a program that
// wants the coordinator started installs a starter. With none, Create fails
// with Unimplemented saying to install one or pass coordinator_address.
//
// Thread safety: not thread-safe (see ClusterResolver).
#ifndef COHORT_CLUSTER_RESOLVERS_TPU_CLUSTER_RESOLVER_H_
#define COHORT_CLUSTER_RESOLVERS_TPU_CLUSTER_RESOLVER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "cohort/base/env.h"
#include "cohort/cluster/cluster_resolver.h"
#include "cohort/cluster/resolvers/tpu_client.h"

namespace cohort {

class ResolverRegistry;

// Starts an in-process server on an ephemeral port and returns the port.
// The server must stay up for the life of the process (or of the returned
// resolver).
using TpuLocalServerStarter = std::function<absl::StatusOr<int>()>;

// Installs the process-wide starter (nullptr removes it). Call at start-up.
void SetTpuLocalServerStarter(TpuLocalServerStarter starter);

// TPU devices per host: host id -> core ids, as found in device names
// matching ".*task:<host>/.*device:TPU:<core>$".
struct TpuDeviceDetails {
  std::map<std::string, std::vector<std::string>> device_map;
  int total_cores = 0;
};
TpuDeviceDetails GetTpuDeviceDictAndCores(
    const std::vector<DeviceInfo>& devices);
// The core count every host shares; FailedPrecondition "TPU cores on each
// device is not the same. ..." otherwise (and for an empty map).
absl::StatusOr<int> VerifyAndReturnSameCoreCount(
    const std::map<std::string, std::vector<std::string>>& device_dict);

// Whether this process runs on GCE: true unconditionally, as in TensorFlow's
// newest revision (older ones probed the metadata server).
inline bool IsRunningInGce() { return true; }

class TpuClusterResolver : public ClusterResolverWithTaskAttributes {
 public:
  struct Options {
    // Client options: tpu / tpu_list, zone, project, token, URLs.
    CloudTpuClient::Options client;
    std::string job_name = "worker";
    std::optional<std::string> coordinator_name;
    std::optional<std::string> coordinator_address;
    TpuLocalServerStarter start_local_server;
  };

  // Resolves the TPU name (may query the metadata server; see
  // CloudTpuClient::Create) and starts the coordinator server if needed.
  static absl::StatusOr<std::unique_ptr<TpuClusterResolver>> Create(
      Env* env, Options options);

  std::string name() const override { return "tpu"; }

  // Reads the node's endpoints (one API call, or none for grpc://).
  absl::StatusOr<ClusterSpec> cluster_spec() override;
  // Always "grpc://"-prefixed (the rpc_layer argument is ignored): the
  // argument task, else the attributes, else the job's first task.
  // "" for a local TPU.
  absl::StatusOr<std::string> master(
      std::optional<std::string> task_type = std::nullopt,
      std::optional<int64_t> task_id = std::nullopt,
      std::optional<std::string> rpc_layer = std::nullopt) override;

  // {"TPU": cores per host} from the device listing through master();
  // master()'s errors first (a TPU not READY: FailedPrecondition), then
  // DeadlineExceeded from the listing is retried kTpuConnectRetries times,
  // then FailedPrecondition "Failed to connect to master...". Without a
  // DeviceLister, {"TPU": 0} once master() resolved. A local TPU counts its
  // local TPU devices. Arguments are ignored.
  absl::StatusOr<AcceleratorCounts> num_accelerators(
      std::optional<std::string> task_type = std::nullopt,
      std::optional<int64_t> task_id = std::nullopt) override;

  static constexpr int kTpuConnectRetries = 120;

  bool is_local() const { return client_ == nullptr; }
  // Null for a local TPU.
  CloudTpuClient* client() { return client_.get(); }
  bool is_running_in_gce() const { return IsRunningInGce(); }
  const std::optional<std::string>& coordinator_address() const {
    return coordinator_address_;
  }

 private:
  TpuClusterResolver() = default;

  std::unique_ptr<CloudTpuClient> client_;
  std::optional<std::string> coordinator_name_;
  std::optional<std::string> coordinator_address_;
};

// Registers "tpu" (never auto-detected): TPU_NAME /
// KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS / TPU_CONFIG, COHORT_TPU_PROJECT,
// COHORT_TPU_ZONE, COHORT_TPU_ACCESS_TOKEN (default: the metadata server's).
void RegisterTpuResolver(ResolverRegistry* registry);

}  // namespace cohort

#endif  // COHORT_CLUSTER_RESOLVERS_TPU_CLUSTER_RESOLVER_H_
