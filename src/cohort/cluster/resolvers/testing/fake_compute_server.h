// FakeComputeServer: the two Compute Engine v1 calls GceClusterResolver
// makes, under base_url() + "/compute/v1":
//
//   POST .../projects/P/zones/Z/instanceGroups/G/listInstances[?pageToken=T]
//        body {"instanceState": "RUNNING"} (anything else: 400)
//        -> {"kind": "compute#instanceGroupsListInstances",
//            "items": [{"instance": URL, "status": "RUNNING"}],
//            "nextPageToken": "<next page>"}   (no token on the last page)
//   GET  .../projects/P/zones/Z/instances/NAME -> the instance JSON
//
// Groups are keyed by name and instances by name (any project and zone;
// requests() shows the paths used). Requests need "Authorization: Bearer
// <token>" when a token is required (else 401).
//
// Thread safety: thread-safe.
#ifndef COHORT_CLUSTER_RESOLVERS_TESTING_FAKE_COMPUTE_SERVER_H_
#define COHORT_CLUSTER_RESOLVERS_TESTING_FAKE_COMPUTE_SERVER_H_

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "cohort/cluster/resolvers/testing/fake_http_server.h"

namespace cohort::testing {

class FakeComputeServer : public FakeHttpServer {
 public:
  // HTTPS with `tls` (see FakeHttpServer), plain HTTP without.
  explicit FakeComputeServer(
      std::optional<std::string> required_token = std::nullopt,
      std::optional<TlsServerCertificate> tls = std::nullopt);

  // Page i lists pages[i] (instance URLs).
  void SetInstanceGroup(const std::string& group,
                        std::vector<std::vector<std::string>> pages);
  // The instance resource, e.g. {"networkInterfaces": [{"networkIP": ...}]}.
  void SetInstance(const std::string& name, Json instance);

  // base_url() + "/compute/v1".
  std::string api_url() const;

 private:
  const std::optional<std::string> required_token_;
  mutable absl::Mutex mu_;
  std::map<std::string, std::vector<std::vector<std::string>>> groups_
      ABSL_GUARDED_BY(mu_);
  std::map<std::string, Json> instances_ ABSL_GUARDED_BY(mu_);
};

}  // namespace cohort::testing

#endif  // COHORT_CLUSTER_RESOLVERS_TESTING_FAKE_COMPUTE_SERVER_H_
