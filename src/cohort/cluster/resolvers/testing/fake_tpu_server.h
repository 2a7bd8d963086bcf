// FakeTpuServer: the Cloud TPU v1 node lookup under base_url() + "/v1":
//
//   GET /v1/projects/P/locations/Z/nodes/N -> the node JSON registered under
//       "projects/P/locations/Z/nodes/N" (else 404 with a Google error body)
//
// Requests need "Authorization: Bearer <token>" when a token is required.
//
// Thread safety: thread-safe.
#ifndef COHORT_CLUSTER_RESOLVERS_TESTING_FAKE_TPU_SERVER_H_
#define COHORT_CLUSTER_RESOLVERS_TESTING_FAKE_TPU_SERVER_H_

#include <map>
#include <optional>
#include <string>

#include "cohort/cluster/resolvers/testing/fake_http_server.h"

namespace cohort::testing {

class FakeTpuServer : public FakeHttpServer {
 public:
  // HTTPS with `tls` (see FakeHttpServer), plain HTTP without.
  explicit FakeTpuServer(
      std::optional<std::string> required_token = std::nullopt,
      std::optional<TlsServerCertificate> tls = std::nullopt);

  // `full_name` is "projects/P/locations/Z/nodes/N".
  void SetNode(const std::string& full_name, Json node);

  // base_url() + "/v1".
  std::string api_url() const;

 private:
  const std::optional<std::string> required_token_;
  mutable absl::Mutex mu_;
  std::map<std::string, Json> nodes_ ABSL_GUARDED_BY(mu_);
};

}  // namespace cohort::testing

#endif  // COHORT_CLUSTER_RESOLVERS_TESTING_FAKE_TPU_SERVER_H_
