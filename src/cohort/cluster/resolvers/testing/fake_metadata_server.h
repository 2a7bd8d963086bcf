// FakeMetadataServer: the GCE metadata server's /computeMetadata/v1/ paths
// for tests. Requests without "Metadata-Flavor: Google" get 403, as on GCE.
//
//   FakeMetadataServer md;
//   md.Set("project/project-id", "test-project");
//   ASSERT_OK(md.Start());
//   options.metadata.base_url = md.base_url();
//
// "instance/service-accounts/default/token" answers {"access_token": token(),
// "expires_in": 3599, "token_type": "Bearer"} unless Set explicitly.
//
// Thread safety: thread-safe.
#ifndef COHORT_CLUSTER_RESOLVERS_TESTING_FAKE_METADATA_SERVER_H_
#define COHORT_CLUSTER_RESOLVERS_TESTING_FAKE_METADATA_SERVER_H_

#include <map>
#include <optional>
#include <string>

#include "cohort/cluster/resolvers/testing/fake_http_server.h"

namespace cohort::testing {

class FakeMetadataServer : public FakeHttpServer {
 public:
  explicit FakeMetadataServer(std::string token = "fake-metadata-token");

  void Set(const std::string& path, const std::string& value);
  // Every request fails with HTTP 500 and `message` (a server that must not
  // be used); nullopt restores normal answers.
  void FailAll(std::optional<std::string> message);
  const std::string& token() const { return token_; }
  // Requests rejected for lacking the Metadata-Flavor header.
  int rejected_without_flavor() const;

 private:
  const std::string token_;
  mutable absl::Mutex mu_;
  std::map<std::string, std::string> values_ ABSL_GUARDED_BY(mu_);
  std::optional<std::string> fail_all_ ABSL_GUARDED_BY(mu_);
  int rejected_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace cohort::testing

#endif  // COHORT_CLUSTER_RESOLVERS_TESTING_FAKE_METADATA_SERVER_H_
