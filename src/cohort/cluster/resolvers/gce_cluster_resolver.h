// GceClusterResolver: one job made of the RUNNING instances of a Compute
// Engine instance group (reference §8), through the Compute REST API:
//
//   POST <compute>/projects/P/zones/Z/instanceGroups/G/listInstances
//        ?orderBy=name[&pageToken=T]   body {"instanceState": "RUNNING"}
//        (followed until no nextPageToken)
//   GET  <compute>/projects/P/zones/Z/instances/<name>
//        -> networkInterfaces[0].networkIP
//
// Addresses are "<networkIP>:<port>", sorted as text (so "10.10.0.1:8470"
// sorts before "10.9.0.1:8470"; the name order is discarded, as TensorFlow
// does). The job is named task_type, which may be "".
//
// Credentials: Options::access_token, else the VM service account's token
// from the metadata server. A missing project or zone is read from the
// metadata server too. Base URLs are injectable for tests.
//
// Thread safety: not thread-safe (see ClusterResolver).
#ifndef COHORT_CLUSTER_RESOLVERS_GCE_CLUSTER_RESOLVER_H_
#define COHORT_CLUSTER_RESOLVERS_GCE_CLUSTER_RESOLVER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "cohort/base/env.h"
#include "cohort/cluster/cluster_resolver.h"
#include "cohort/cluster/resolvers/gce_metadata.h"
#include "cohort/cluster/resolvers/http_client.h"

namespace cohort {

class ResolverRegistry;

inline constexpr char kDefaultComputeApiUrl[] =
    "https://compute.googleapis.com/compute/v1";

class GceClusterResolver : public ClusterResolverWithTaskAttributes {
 public:
  struct Options {
    std::optional<std::string> project;  // unset: metadata project/project-id
    std::optional<std::string> zone;     // unset: metadata instance/zone
    std::string instance_group;
    int port = 8470;
    std::optional<std::string> task_type = std::string("worker");
    std::optional<int64_t> task_id = 0;
    std::optional<std::string> rpc_layer = std::string("grpc");
    // Bearer token for the Compute API; unset: from the metadata server.
    std::optional<std::string> access_token;
    std::string compute_api_url = kDefaultComputeApiUrl;
    GceMetadataClient::Options metadata;
    HttpClient::Options http;
  };

  // InvalidArgument when instance_group is empty. Does no I/O. `env` is not
  // owned (used for the metadata server's location).
  static absl::StatusOr<std::unique_ptr<GceClusterResolver>> Create(
      Env* env, Options options);

  std::string name() const override { return "gce"; }

  // 1 + pages + instances REST calls, each bounded by the HTTP timeouts.
  // Errors name the URL, the HTTP status and body, and what to check.
  absl::StatusOr<ClusterSpec> cluster_spec() override;
  // master(): ClusterResolverWithTaskAttributes's rule: "" when task type or
  // id (argument, else attribute) is unset; an empty rpc layer gives the bare
  // address.

  // Always FailedPrecondition "You cannot reset the task_type of the
  // GCEClusterResolver after it has been created."
  absl::Status set_task_type(std::optional<std::string> v) override;

 private:
  GceClusterResolver(Env* env, Options options);
  absl::StatusOr<std::string> Token();

  Options options_;
  GceMetadataClient metadata_;
  HttpClient http_;
};

// Registers "gce" (never auto-detected). The factory reads
// COHORT_GCE_INSTANCE_GROUP (required), COHORT_GCE_PROJECT, COHORT_GCE_ZONE
// (default: metadata server), COHORT_GCE_PORT (8470), COHORT_GCE_TASK_TYPE
// ("worker"), COHORT_GCE_TASK_ID (0), COHORT_GCE_ACCESS_TOKEN (default: the
// metadata server's) and COHORT_GCE_COMPUTE_API_URL.
void RegisterGceResolver(ResolverRegistry* registry);

}  // namespace cohort

#endif  // COHORT_CLUSTER_RESOLVERS_GCE_CLUSTER_RESOLVER_H_
