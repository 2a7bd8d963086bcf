// GceMetadataClient: reads the GCE/Cloud TPU VM metadata server
// (http://metadata.google.internal/computeMetadata/v1/...), which the GCE and
// TPU resolvers use for the project, the zone, the VM's IP and an OAuth2
// access token of the VM's service account.
//
// Every request carries "Metadata-Flavor: Google", as the server requires.
// The base URL is, in order: Options::base_url, "http://$GCE_METADATA_HOST",
// "http://$GCE_METADATA_IP" (the variables Google's own clients honour), and
// "http://metadata.google.internal".
//
// Thread safety: thread-safe (no mutable state).
#ifndef COHORT_CLUSTER_RESOLVERS_GCE_METADATA_H_
#define COHORT_CLUSTER_RESOLVERS_GCE_METADATA_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "cohort/base/env.h"
#include "cohort/cluster/resolvers/http_client.h"

namespace cohort {

class GceMetadataClient {
 public:
  struct Options {
    // "http://host[:port]" (no trailing path); "" = from the environment.
    std::string base_url;
    HttpClient::Options http;
    Options() { http.connect_timeout = absl::Seconds(2); }
  };

  // `env` is not owned and must outlive the client.
  GceMetadataClient(Env* env, Options options);

  // The metadata base URL in use, e.g. "http://metadata.google.internal".
  const std::string& base_url() const { return base_url_; }

  // GET <base>/computeMetadata/v1/<path> ("project/project-id",
  // "instance/zone", ...). Blocks up to the HTTP timeouts. Unavailable when
  // the server cannot be reached (not on GCE?), NotFound for an unknown path;
  // messages name the URL.
  absl::StatusOr<std::string> Get(absl::string_view path) const;

  // The project id ("project/project-id").
  absl::StatusOr<std::string> ProjectId() const;
  // The zone name: the last '/' segment of "instance/zone"
  // ("projects/123/zones/us-central1-c" -> "us-central1-c").
  absl::StatusOr<std::string> Zone() const;
  // The VM's primary internal IP ("instance/network-interfaces/0/ip").
  absl::StatusOr<std::string> LocalIp() const;
  // An access token of the default service account
  // ("instance/service-accounts/default/token" -> "access_token").
  absl::StatusOr<std::string> AccessToken() const;

 private:
  std::string base_url_;
  HttpClient http_;
};

}  // namespace cohort

#endif  // COHORT_CLUSTER_RESOLVERS_GCE_METADATA_H_
