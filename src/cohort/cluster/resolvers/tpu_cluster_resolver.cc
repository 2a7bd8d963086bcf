#include "cohort/cluster/resolvers/tpu_cluster_resolver.h"

#include <regex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/const_init.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "cohort/base/logging.h"
#include "cohort/base/status.h"
#include "cohort/cluster/resolver_registry.h"

namespace cohort {
namespace {

absl::Mutex starter_mu(absl::kConstInit);
TpuLocalServerStarter* global_starter ABSL_GUARDED_BY(starter_mu) = nullptr;

TpuLocalServerStarter GlobalStarter() {
  absl::MutexLock lock(&starter_mu);
  return global_starter ? *global_starter : TpuLocalServerStarter();
}

std::string DeviceDictString(
    const std::map<std::string, std::vector<std::string>>& d) {
  std::vector<std::string> parts;
  for (const auto& [host, cores] : d) {
    parts.push_back(absl::StrCat(host, ": [", absl::StrJoin(cores, ", "), "]"));
  }
  return absl::StrCat("{", absl::StrJoin(parts, ", "), "}");
}

}  // namespace

void SetTpuLocalServerStarter(TpuLocalServerStarter starter) {
  absl::MutexLock lock(&starter_mu);
  delete global_starter;
  global_starter =
      starter ? new TpuLocalServerStarter(std::move(starter)) : nullptr;
}

TpuDeviceDetails GetTpuDeviceDictAndCores(
    const std::vector<DeviceInfo>& devices) {
  static const std::regex* kTpuDevice =
      new std::regex(R"(.*task:(\d+)/.*device:TPU:(\d+)$)");
  TpuDeviceDetails details;
  for (const DeviceInfo& device : devices) {
    std::smatch m;
    if (std::regex_match(device.name, m, *kTpuDevice)) {
      details.device_map[m[1].str()].push_back(m[2].str());
      ++details.total_cores;
    }
  }
  return details;
}

absl::StatusOr<int> VerifyAndReturnSameCoreCount(
    const std::map<std::string, std::vector<std::string>>& device_dict) {
  std::set<size_t> counts;
  for (const auto& [host, cores] : device_dict) counts.insert(cores.size());
  if (counts.size() != 1) {
    return absl::FailedPreconditionError(absl::StrCat(
        "TPU cores on each device is not the same. This should never happen. "
        "Devices: ",
        DeviceDictString(device_dict)));
  }
  return static_cast<int>(*counts.begin());
}

absl::StatusOr<std::unique_ptr<TpuClusterResolver>> TpuClusterResolver::Create(
    Env* env, Options options) {
  std::unique_ptr<TpuClusterResolver> r(new TpuClusterResolver());
  const bool local =
      options.client.tpu == std::optional<std::string>("local") &&
      !options.client.tpu_list.has_value();
  if (!local) {
    COHORT_ASSIGN_OR_RETURN(r->client_,
                            CloudTpuClient::Create(env, options.client));
  }
  // By default this task is the first task of the worker job.
  r->task_type_ = options.job_name;
  r->task_id_ = 0;
  r->coordinator_name_ = options.coordinator_name;
  r->coordinator_address_ = options.coordinator_address;
  const bool has_name = options.coordinator_name.has_value() &&
                        !options.coordinator_name->empty();
  const bool has_address = options.coordinator_address.has_value() &&
                           !options.coordinator_address->empty();
  if (has_name && !has_address) {
    TpuLocalServerStarter start = options.start_local_server
                                      ? options.start_local_server
                                      : GlobalStarter();
    if (!start) {
      return absl::UnimplementedError(absl::StrCat(
          "TPU resolver: coordinator \"", *options.coordinator_name,
          "\" needs an in-process coordinator server and no starter is "
          "installed (cohort starts none by itself: install one with "
          "SetTpuLocalServerStarter or Options::start_local_server), or pass "
          "coordinator_address=\"host:port\" of a running server instead"));
    }
    if (r->client_ == nullptr) {
      return absl::FailedPreconditionError(
          "TPU resolver: a coordinator server needs the VM's IP from the "
          "metadata server, which a local TPU does not use; pass "
          "coordinator_address");
    }
    COHORT_ASSIGN_OR_RETURN(std::string ip, r->client_->LocalIp());
    absl::StatusOr<int> port = start();
    if (!port.ok()) {
      return Annotate(port.status(),
                      "TPU resolver: starting the in-process coordinator "
                      "server");
    }
    r->coordinator_address_ = absl::StrCat(ip, ":", *port);
  }
  return r;
}

absl::StatusOr<ClusterSpec> TpuClusterResolver::cluster_spec() {
  ClusterSpec spec;
  if (client_ == nullptr) return spec;
  COHORT_ASSIGN_OR_RETURN(std::vector<TpuNetworkEndpoint> endpoints,
                          client_->NetworkEndpoints());
  std::vector<std::string> workers;
  for (const TpuNetworkEndpoint& e : endpoints) {
    workers.push_back(absl::StrCat(e.ip_address, ":", e.port));
  }
  spec.SetJob(task_type_.value_or(""), workers);
  if (coordinator_address_.has_value() && !coordinator_address_->empty()) {
    spec.SetJob(coordinator_name_.value_or(""),
                std::vector<std::string>{*coordinator_address_});
  }
  return spec;
}

absl::StatusOr<std::string> TpuClusterResolver::master(
    std::optional<std::string> task_type, std::optional<int64_t> task_id,
    std::optional<std::string> /*rpc_layer: ignored, always grpc*/) {
  if (client_ == nullptr) return std::string();
  COHORT_ASSIGN_OR_RETURN(ClusterSpec spec, cluster_spec());
  std::string address;
  if (task_type.has_value() && task_id.has_value()) {
    COHORT_ASSIGN_OR_RETURN(address, spec.task_address(*task_type, *task_id));
  } else if (task_type_.has_value() && task_id_.has_value()) {
    COHORT_ASSIGN_OR_RETURN(address, spec.task_address(*task_type_, *task_id_));
  } else {
    const std::string job = task_type_.value_or("");
    const ClusterSpec::TaskMap* tasks = spec.tasks(job);
    if (tasks == nullptr || tasks->empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("No TPUs with the specified names exist. (job \"", job,
                       "\" of TPU \"", client_->name(), "\" has no tasks)"));
    }
    address = tasks->begin()->second;
  }
  return FormatMasterUrl(address, std::string("grpc"));
}

absl::StatusOr<AcceleratorCounts> TpuClusterResolver::num_accelerators(
    std::optional<std::string>, std::optional<int64_t>) {
  if (client_ == nullptr) {
    if (device_lister_ == nullptr) return AcceleratorCounts{{"TPU", 0}};
    COHORT_ASSIGN_OR_RETURN(std::vector<DeviceInfo> devices,
                            device_lister_->ListDevices(""));
    int n = 0;
    for (const DeviceInfo& d : devices) n += d.device_type == "TPU";
    return AcceleratorCounts{{"TPU", n}};
  }
  // The master first, as TensorFlow: a TPU that is not READY (or cannot be
  // looked up) is that error, not a count of zero.
  COHORT_ASSIGN_OR_RETURN(std::string master_url, master());
  if (device_lister_ == nullptr) return AcceleratorCounts{{"TPU", 0}};
  for (int attempt = 0;; ++attempt) {
    absl::StatusOr<std::vector<DeviceInfo>> devices =
        device_lister_->ListDevices(master_url);
    if (devices.ok()) {
      TpuDeviceDetails details = GetTpuDeviceDictAndCores(*devices);
      if (details.total_cores == 0) return AcceleratorCounts{{"TPU", 0}};
      COHORT_ASSIGN_OR_RETURN(int cores,
                              VerifyAndReturnSameCoreCount(details.device_map));
      return AcceleratorCounts{{"TPU", cores}};
    }
    if (!absl::IsDeadlineExceeded(devices.status())) {
      return Annotate(devices.status(),
                      absl::StrCat("listing TPU devices through ", master_url));
    }
    const std::string message = absl::StrCat(
        "Failed to connect to master. The TPU might not be ready (e.g. still "
        "scheduling) or the master address is incorrect: got (",
        master_url, "): ", devices.status().message());
    if (attempt >= kTpuConnectRetries) {
      return absl::FailedPreconditionError(message);
    }
    if (attempt % 20 == 0) {
      COHORT_LOG(WARNING) << message << "; retrying (" << attempt + 1 << "/"
                          << kTpuConnectRetries << ")";
    }
  }
}

void RegisterTpuResolver(ResolverRegistry* registry) {
  ResolverRegistration reg;
  reg.name = "tpu";
  reg.description =
      "Cloud TPU: TPU_NAME, KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS or TPU_CONFIG; "
      "COHORT_TPU_PROJECT/COHORT_TPU_ZONE (default: metadata server)";
  reg.factory =
      [](Env* env) -> absl::StatusOr<std::unique_ptr<ClusterResolver>> {
    TpuClusterResolver::Options options;
    if (auto v = env->GetVar("COHORT_TPU_PROJECT"); v && !v->empty()) {
      options.client.project = *v;
    }
    if (auto v = env->GetVar("COHORT_TPU_ZONE"); v && !v->empty()) {
      options.client.zone = *v;
    }
    if (auto v = env->GetVar("COHORT_TPU_ACCESS_TOKEN"); v && !v->empty()) {
      options.client.access_token = *v;
    }
    COHORT_ASSIGN_OR_RETURN(auto r, TpuClusterResolver::Create(env, options));
    return std::unique_ptr<ClusterResolver>(std::move(r));
  };
  reg.priority = 60;
  absl::Status s = registry->Register(std::move(reg));
  COHORT_CHECK(s.ok()) << s;
}

}  // namespace cohort
