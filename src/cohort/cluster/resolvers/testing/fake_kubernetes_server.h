// FakeKubernetesServer: GET /api/v1/pods?labelSelector=S answering a real
// PodList (apiVersion, kind, metadata, items[].metadata/spec/status) with the
// pods registered for exactly the selector S (none: an empty list).
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
  explicit FakeKubernetesServer(
      std::optional<std::string> required_token = std::nullopt);

  void SetPods(const std::string& label_selector, std::vector<FakePod> pods);
  // Makes every pod list answer `status` with `body` (nullopt: normal).
  void FailWith(std::optional<std::pair<int, std::string>> failure);

  // The PodList JSON the server answers for `pods`.
  static Json PodList(const std::vector<FakePod>& pods);

 private:
  const std::optional<std::string> required_token_;
  mutable absl::Mutex mu_;
  std::map<std::string, std::vector<FakePod>> pods_ ABSL_GUARDED_BY(mu_);
  std::optional<std::pair<int, std::string>> failure_ ABSL_GUARDED_BY(mu_);
};

}  // namespace cohort::testing

#endif  // COHORT_CLUSTER_RESOLVERS_TESTING_FAKE_KUBERNETES_SERVER_H_
