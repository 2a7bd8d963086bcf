// FakeKubernetesServer: answers the pod lists the Kubernetes resolver asks
// for, with a real PodList (apiVersion, kind, metadata, items[].metadata/
// spec/status):
//
//   GET /api/v1/pods?labelSelector=S                    all namespaces
//   GET /api/v1/namespaces/N/pods?labelSelector=S       items whose
//                                                       metadata.namespace is N
//
// The items are those registered for exactly the selector S (none: an empty
// list); the selector is not evaluated against labels.
//
// With a required token, requests without "Authorization: Bearer <token>"
// get 401 and a Kubernetes Status body, as the API server answers.
//
// Thread safety: thread-safe.
#ifndef COHORT_CLUSTER_RESOLVERS_TESTING_FAKE_KUBERNETES_SERVER_H_
#define COHORT_CLUSTER_RESOLVERS_TESTING_FAKE_KUBERNETES_SERVER_H_

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cohort/cluster/resolvers/testing/fake_http_server.h"

namespace cohort::testing {

struct FakePod {
  std::string name;
  std::string phase;    // "Running", "Pending", ...
  std::string host_ip;  // "" = no hostIP field (e.g. a pending pod)
  std::string namespace_name = "default";
};

class FakeKubernetesServer : public FakeHttpServer {
 public:
  // HTTPS with `tls` (see FakeHttpServer), plain HTTP without.
  explicit FakeKubernetesServer(
      std::optional<std::string> required_token = std::nullopt,
      std::optional<TlsServerCertificate> tls = std::nullopt);
  // Stops serving before the pod lists the handlers read are destroyed.
  ~FakeKubernetesServer() override { Stop(); }

  void SetPods(const std::string& label_selector, std::vector<FakePod> pods);
  // Serves the items of `pod_list` (a PodList object, e.g. a fixture file
  // holding what a real API server answered) for `label_selector`.
  void SetPodList(const std::string& label_selector, const Json& pod_list);
  // Makes every pod list answer `status` with `body` (nullopt: normal).
  void FailWith(std::optional<std::pair<int, std::string>> failure);

  // The PodList JSON the server answers for `pods`.
  static Json PodList(const std::vector<FakePod>& pods);

  // A kubeconfig (YAML) whose current context reaches this server at
  // base_url() with bearer `token` (no certificate-authority entry).
  std::string Kubeconfig(const std::string& token) const;

 private:
  // Answers a list request; `namespace_name` nullopt: all namespaces.
  void HandleList(const httplib::Request& req, httplib::Response& res,
                  const std::optional<std::string>& namespace_name);

  const std::optional<std::string> required_token_;
  mutable absl::Mutex mu_;
  // selector -> items[] of the PodList to answer.
  std::map<std::string, Json> items_ ABSL_GUARDED_BY(mu_);
  std::optional<std::pair<int, std::string>> failure_ ABSL_GUARDED_BY(mu_);
};

// The fixture indexed_job_pods.json next to this file (a real Indexed Job
// "train" of 12 completions in namespace "ml", as the API server lists it),
// read from the source tree at `source_dir`, with the items cut to the pods
// whose completion index is below `n`.
absl::StatusOr<Json> IndexedJobPods(const std::string& source_dir, int n);

}  // namespace cohort::testing

#endif  // COHORT_CLUSTER_RESOLVERS_TESTING_FAKE_KUBERNETES_SERVER_H_
