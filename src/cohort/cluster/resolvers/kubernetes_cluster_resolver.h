// KubernetesClusterResolver: builds the cluster from the pods that match
// label selectors, through the Kubernetes REST API (reference §9).
//
//   GET <server>/api/v1/pods?labelSelector=<selector>   (all namespaces)
//
// For each job, each selector is queried in order; the pods of one selector
// are sorted by metadata.name (as text) and every one must be in phase
// "Running" (else FailedPrecondition `Pod "<name>" is not running; phase:
// "<phase>"`). A task's address is "<status.hostIP>:<port>" (the node IP, not
// the pod IP). Results of the selectors are concatenated in selector order.
//
// Where the API is: KubernetesApiConfig, from the in-cluster service account
// (LoadInClusterKubernetesConfig), a kubeconfig (LoadKubeconfig), or given
// directly (tests, the conformance runner: TensorFlow's `override_client`).
//
// Thread safety: not thread-safe (see ClusterResolver).
#ifndef COHORT_CLUSTER_RESOLVERS_KUBERNETES_CLUSTER_RESOLVER_H_
#define COHORT_CLUSTER_RESOLVERS_KUBERNETES_CLUSTER_RESOLVER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "cohort/base/env.h"
#include "cohort/cluster/cluster_resolver.h"
#include "cohort/cluster/resolvers/http_client.h"

namespace cohort {

class ResolverRegistry;

// How to reach a Kubernetes API server.
struct KubernetesApiConfig {
  // "https://10.96.0.1:443"; no trailing slash needed.
  std::string server;
  // Bearer token ("" = none).
  std::string token;
  // Timeouts, CA bundle, client certificate.
  HttpClient::Options http;
  // Where this configuration came from, for messages ("in-cluster service
  // account", "kubeconfig /home/u/.kube/config").
  std::string source;
};

inline constexpr char kServiceAccountDir[] =
    "/var/run/secrets/kubernetes.io/serviceaccount";

// In-cluster configuration: KUBERNETES_SERVICE_HOST/PORT and the service
// account's token and ca.crt under `service_account_dir`. FailedPrecondition
// naming what is missing (not running in a pod?). Reads files through `env`.
absl::StatusOr<KubernetesApiConfig> LoadInClusterKubernetesConfig(
    Env* env, const std::string& service_account_dir = kServiceAccountDir);

// Off-cluster configuration from a kubeconfig: `path`, else the first entry
// of $KUBECONFIG, else $HOME/.kube/config. Uses the current context's
// cluster (server, certificate-authority[-data], insecure-skip-tls-verify)
// and user (token, tokenFile, client-certificate[-data]/client-key[-data]).
// Inline *-data values are written to private (0600) temporary files under
// $TMPDIR (or /tmp), which are left in place for the process. The file may
// be YAML (the block-style subset kubectl writes) or JSON.
// FailedPrecondition/InvalidArgument naming the file and the missing entry.
absl::StatusOr<KubernetesApiConfig> LoadKubeconfig(
    Env* env, std::optional<std::string> path = std::nullopt);

// Parses the YAML subset used by kubeconfig files (block mappings, block
// sequences, "{}"/"[]", plain and quoted scalars, comments) into JSON; JSON
// text is accepted as is. InvalidArgument naming `what` and the line.
absl::StatusOr<Json> ParseKubeconfigText(absl::string_view text,
                                         absl::string_view what);

class KubernetesClusterResolver : public ClusterResolverWithTaskAttributes {
 public:
  enum class ExecutableLocation { kWithinCluster, kOffCluster };

  struct Options {
    // job -> label selectors, queried in order.
    std::map<std::string, std::vector<std::string>> job_to_label_mapping = {
        {"worker", {"job-name=tensorflow"}}};
    int tf_server_port = 8470;
    std::optional<std::string> rpc_layer = std::string("grpc");
    ExecutableLocation executable_location = ExecutableLocation::kWithinCluster;
    // Given: use this API server as is (TensorFlow's override_client).
    // Unset: load the in-cluster or kubeconfig configuration by location.
    std::optional<KubernetesApiConfig> api;
  };

  // Loads the API configuration when not given (errors as the loaders).
  static absl::StatusOr<std::unique_ptr<KubernetesClusterResolver>> Create(
      Env* env, Options options);

  // Parses "WITHIN_CLUSTER" / "OFF_CLUSTER"; anything else is InvalidArgument
  // "The executable location provided is invalid."
  static absl::StatusOr<ExecutableLocation> ParseExecutableLocation(
      absl::string_view text);

  std::string name() const override { return "kubernetes"; }

  // One REST call per selector; blocks up to the HTTP timeouts each.
  // Unavailable/other HTTP errors name the URL and what to check.
  absl::StatusOr<ClusterSpec> cluster_spec() override;
  // master(): ClusterResolverWithTaskAttributes's rule ("" while task type
  // or id, argument else attribute, is unknown).

  const KubernetesApiConfig& api() const { return api_; }

 private:
  KubernetesClusterResolver(Options options, KubernetesApiConfig api);

  Options options_;
  KubernetesApiConfig api_;
  HttpClient http_;
};

// Registers "kubernetes" (in-cluster; detected by KUBERNETES_SERVICE_HOST).
// The factory reads COHORT_KUBERNETES_JOBS (JSON job -> selectors, default
// {"worker": ["job-name=tensorflow"]}) and COHORT_KUBERNETES_PORT (8470);
// without KUBERNETES_SERVICE_HOST it uses the kubeconfig.
void RegisterKubernetesResolver(ResolverRegistry* registry);

}  // namespace cohort

#endif  // COHORT_CLUSTER_RESOLVERS_KUBERNETES_CLUSTER_RESOLVER_H_
