// KubernetesClusterResolver: builds the cluster from the pods that match
// label selectors, through the Kubernetes REST API (reference §9).
//
//   GET <server>/api/v1/pods?labelSelector=<selector>          (default)
//   GET <server>/api/v1/namespaces/<ns>/pods?labelSelector=<selector>
//                                               (Options::pod_namespace set)
//
// For each job, each selector is queried in order and the results are
// concatenated in selector order. Within one selector:
//   - PodOrder::kByName (default, TensorFlow's behaviour): pods sorted by
//     metadata.name as text; every pod must be in phase "Running".
//   - PodOrder::kByCompletionIndex (the pods of an Indexed Job): pods sorted
//     by completion index; see Options::order for which pod stands for an
//     index and the errors.
// A task's address is "<ip>:<port>", the ip being status.hostIP (default,
// TensorFlow's; the node IP, shared by the pods of a node) or status.podIP
// (AddressSource::kPodIp).
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

// In-cluster configuration: https://KUBERNETES_SERVICE_HOST:PORT, the
// service account's token (sent as the bearer token) and ca.crt (the only CA
// the API server's certificate is verified against: http.ca_cert_pem, with
// http.ca_cert_path naming the file) under `service_account_dir`. Reads both
// files through `env`. Errors:
//   - FailedPrecondition: KUBERNETES_SERVICE_HOST or _PORT unset (not
//     running in a pod?); the token or ca.crt missing, unreadable or empty
//     (names the file).
absl::StatusOr<KubernetesApiConfig> LoadInClusterKubernetesConfig(
    Env* env, const std::string& service_account_dir = kServiceAccountDir);

// The namespace of the pod this process runs in: the contents of
// "<service_account_dir>/namespace", stripped of surrounding whitespace.
// Reads through `env`. Errors:
//   - FailedPrecondition naming the file: it cannot be read (no service
//     account mounted: automountServiceAccountToken false, or not in a pod)
//     or is empty.
absl::StatusOr<std::string> ReadServiceAccountNamespace(
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
  enum class PodOrder { kByName, kByCompletionIndex };
  enum class AddressSource { kHostIp, kPodIp };

  struct Options {
    // job -> label selectors, queried in order.
    std::map<std::string, std::vector<std::string>> job_to_label_mapping = {
        {"worker", {"job-name=tensorflow"}}};
    int tf_server_port = 8470;
    // Set: list the pods of this namespace only, which a namespaced Role
    // granting "list" on pods permits. Unset: all namespaces (TensorFlow's;
    // needs a ClusterRole). Set to "": Create fails with InvalidArgument.
    std::optional<std::string> pod_namespace;
    // kByName: sorted by metadata.name as text; every pod must be "Running"
    // (else FailedPrecondition `Pod "<name>" is not running; phase:
    // "<phase>"`).
    //
    // kByCompletionIndex: each pod's index is its annotation
    // "batch.kubernetes.io/job-completion-index", else its label of that name
    // (Kubernetes 1.28+ sets both). Per index, the pod standing for it is the
    // one in phase "Running" without metadata.deletionTimestamp; pods of
    // earlier incarnations of the index (Failed, Succeeded, being deleted)
    // are skipped. The selector's result is the pods of indexes 0, 1, ...,
    // max (the largest index listed), in that order. A missing LAST index is
    // not seen here: the caller compares the count with what it expects.
    // Errors:
    //   - InvalidArgument naming the pod: a pod without the index, with a
    //     value that is not a non-negative decimal number, or with annotation
    //     and label disagreeing (the selector matches pods that are not an
    //     Indexed Job's); two running pods with the same index in different
    //     namespaces (set pod_namespace).
    //   - FailedPrecondition naming the index and every listed pod of it
    //     with its phase: an index from 0 to max without a running pod
    //     (pods still being created, pending, or replaced), or two
    //     running pods not being deleted for one index (the Job controller
    //     removes duplicates; a Job deleted and re-created under the same
    //     name leaves old pods until garbage collection). Transient while a
    //     Job starts or replaces a pod: retry, with a deadline, since an
    //     index whose pods all ended (Failed, Succeeded) is also this error
    //     and comes back only if the Job controller replaces the pod.
    PodOrder order = PodOrder::kByName;
    // kHostIp: status.hostIP (else Internal naming the pod). kPodIp:
    // status.podIP, in brackets when IPv6 ("[fd00::5]:8470"); a running pod
    // without one is FailedPrecondition naming the pod.
    AddressSource address = AddressSource::kHostIp;
    std::optional<std::string> rpc_layer = std::string("grpc");
    ExecutableLocation executable_location = ExecutableLocation::kWithinCluster;
    // Given: use this API server as is (TensorFlow's override_client).
    // Unset: load the in-cluster or kubeconfig configuration by location.
    std::optional<KubernetesApiConfig> api;
  };

  // Loads the API configuration when not given (errors as the loaders).
  // InvalidArgument when options.pod_namespace is set to "".
  static absl::StatusOr<std::unique_ptr<KubernetesClusterResolver>> Create(
      Env* env, Options options);

  // Parses "WITHIN_CLUSTER" / "OFF_CLUSTER"; anything else is InvalidArgument
  // "The executable location provided is invalid."
  static absl::StatusOr<ExecutableLocation> ParseExecutableLocation(
      absl::string_view text);

  std::string name() const override { return "kubernetes"; }

  // One REST call per selector; blocks up to the HTTP timeouts each.
  // Errors:
  //   - Unavailable/other HTTP codes (see HttpClient) naming the URL and what
  //     to check; PermissionDenied when the service account may not list
  //     pods (in the namespace).
  //   - FailedPrecondition/InvalidArgument/Internal about the pods: see
  //     Options::order and Options::address.
  absl::StatusOr<ClusterSpec> cluster_spec() override;
  // master(): ClusterResolverWithTaskAttributes's rule ("" while task type
  // or id, argument else attribute, is unknown).

  const KubernetesApiConfig& api() const { return api_; }

 private:
  KubernetesClusterResolver(Options options, KubernetesApiConfig api);

  // GET of the pods matching `selector`: the PodList object, checked to have
  // an "items" array (or none); `*url` is set to the URL for messages.
  absl::StatusOr<Json> ListPods(const std::string& selector, std::string* url);

  Options options_;
  KubernetesApiConfig api_;
  HttpClient http_;
};

// The COHORT_KUBERNETES_* variables the registered factory reads (see
// RegisterKubernetesResolver) applied to `options`; unset variables leave
// its fields as they are. InvalidArgument naming the variable.
absl::Status KubernetesOptionsFromEnv(
    Env* env, KubernetesClusterResolver::Options* options);

// Registers "kubernetes" (in-cluster; detected by KUBERNETES_SERVICE_HOST).
// The factory reads COHORT_KUBERNETES_JOBS (JSON job -> selectors, default
// {"worker": ["job-name=tensorflow"]}), COHORT_KUBERNETES_PORT (8470),
// COHORT_KUBERNETES_NAMESPACE (Options::pod_namespace; unset or "": all
// namespaces), COHORT_KUBERNETES_ORDER ("name" (default) or
// "completion-index") and COHORT_KUBERNETES_ADDRESS ("host-ip" (default) or
// "pod-ip"); InvalidArgument naming the variable for any other value.
// Without KUBERNETES_SERVICE_HOST it uses the kubeconfig.
void RegisterKubernetesResolver(ResolverRegistry* registry);

}  // namespace cohort

#endif  // COHORT_CLUSTER_RESOLVERS_KUBERNETES_CLUSTER_RESOLVER_H_
