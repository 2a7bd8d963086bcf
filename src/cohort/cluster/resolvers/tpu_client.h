// CloudTpuClient: the Cloud TPU node behind a TPU name (TensorFlow's
// tensorflow/python/tpu/client/client.py; reference §10).
//
// Name resolution: an explicit name (a one-element list is accepted: an
// empty list is InvalidArgument "At least one TPU must be specified.", a
// longer one Unimplemented), else $KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS, else
// $TPU_NAME, else the JSON in $TPU_CONFIG (tpu_node_name, project, zone),
// else InvalidArgument "Please provide a TPU Name to connect to.".
//
// A name starting with "grpc://" is a list of endpoints and bypasses the
// Cloud API (api_available() is false). Otherwise the node
// projects/P/locations/Z/nodes/N is read from the Cloud TPU REST API
// (GET <tpu_api_url>/projects/P/locations/Z/nodes/N), with a missing project
// and zone taken from the metadata server, and the token from
// Options::access_token or the metadata server.
//
// Thread safety: not thread-safe.
#ifndef COHORT_CLUSTER_RESOLVERS_TPU_CLIENT_H_
#define COHORT_CLUSTER_RESOLVERS_TPU_CLIENT_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "cohort/base/env.h"
#include "cohort/base/json.h"
#include "cohort/cluster/resolvers/gce_metadata.h"
#include "cohort/cluster/resolvers/http_client.h"

namespace cohort {

inline constexpr char kDefaultCloudTpuApiUrl[] =
    "https://tpu.googleapis.com/v1";
inline constexpr char kDefaultTpuEndpointPort[] = "8470";

// One worker endpoint of a TPU node.
struct TpuNetworkEndpoint {
  std::string ip_address;
  std::string port;  // as text ("8470"), whatever the API's JSON type
  Json raw;          // the endpoint object exactly as the API returned it
};

// Splits "grpc://a:1,b,grpc://c:2" into endpoints: "grpc://" is stripped, the
// port defaults to "8470" and stays text.
std::vector<TpuNetworkEndpoint> EnvironmentVarToNetworkEndpoints(
    absl::string_view endpoints);

class CloudTpuClient {
 public:
  struct Options {
    // The TPU name; or `tpu_list` when given as a list.
    std::optional<std::string> tpu;
    std::optional<std::vector<std::string>> tpu_list;
    std::optional<std::string> zone;
    std::optional<std::string> project;
    // Bearer token for the TPU API; unset: from the metadata server.
    std::optional<std::string> access_token;
    // Unset: $TPU_API_URL, else kDefaultCloudTpuApiUrl.
    std::optional<std::string> tpu_api_url;
    GceMetadataClient::Options metadata;
    HttpClient::Options http;
    // recoverable(): treat a recent OOM / HBM OOM symptom as unrecoverable.
    bool runtime_oom_exit = true;
    bool hbm_oom_exit = true;
  };

  // Resolves the name (see the file comment). In API mode a missing project
  // or zone is read from the metadata server (blocking; Unavailable naming
  // the metadata URL when unreachable). `env` is not owned.
  static absl::StatusOr<std::unique_ptr<CloudTpuClient>> Create(
      Env* env, Options options);

  const std::string& name() const { return tpu_; }
  bool api_available() const { return use_api_; }
  const std::optional<std::string>& project() const { return project_; }
  const std::optional<std::string>& zone() const { return zone_; }
  // "projects/P/locations/Z/nodes/N".
  std::string full_name() const;

  // The node's JSON from the API. InvalidArgument "Could not lookup TPU
  // metadata from name '<n>'. ..." (with the URL, HTTP status and body) on
  // any failure; FailedPrecondition when the API is not in use.
  absl::StatusOr<Json> FetchNode() const;

  // A node property ("state", "health", "tensorflowVersion", ...); nullopt
  // when absent or when the API is not in use.
  absl::StatusOr<std::optional<std::string>> GetProperty(
      absl::string_view key) const;
  absl::StatusOr<std::optional<std::string>> state() const {
    return GetProperty("state");
  }
  absl::StatusOr<std::optional<std::string>> health() const {
    return GetProperty("health");
  }

  // The worker endpoints: parsed from the grpc:// name, or from the node
  // (networkEndpoints, else the legacy ipAddress + port). A node whose state
  // is not READY is FailedPrecondition `TPU "<n>" is not yet ready; state:
  // "<state>"` (None when absent).
  absl::StatusOr<std::vector<TpuNetworkEndpoint>> NetworkEndpoints() const;

  // False when the node is TERMINATED or PREEMPTED, or has an OUT_OF_MEMORY /
  // HBM_OUT_OF_MEMORY symptom younger than 90 s (per the Options flags).
  // Always true without API access.
  absl::StatusOr<bool> Recoverable() const;

  // This VM's IP from the metadata server.
  absl::StatusOr<std::string> LocalIp() const;

 private:
  CloudTpuClient(Env* env, Options options);

  Env* env_;
  Options options_;
  GceMetadataClient metadata_;
  HttpClient http_;
  std::string tpu_;
  bool use_api_ = false;
  std::optional<std::string> project_;
  std::optional<std::string> zone_;
  std::string api_url_;
};

}  // namespace cohort

#endif  // COHORT_CLUSTER_RESOLVERS_TPU_CLIENT_H_
