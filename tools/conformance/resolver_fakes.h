// Fake cloud back ends shared by the GCE and TPU conformance adapters.
#ifndef COHORT_TOOLS_CONFORMANCE_RESOLVER_FAKES_H_
#define COHORT_TOOLS_CONFORMANCE_RESOLVER_FAKES_H_

#include <memory>

#include "absl/status/statusor.h"
#include "cohort/cluster/resolvers/testing/fake_metadata_server.h"
#include "tools/conformance/adapter.h"

namespace cohort::conformance {

// Starts a FakeMetadataServer (kept alive by `ctx`) that answers the paths of
// `gce_metadata` ({path: value}) and a service-account token
// "conformance-token". A non-object, non-null `gce_metadata` (e.g. "must not
// be queried") makes every request fail with HTTP 500.
absl::StatusOr<std::shared_ptr<testing::FakeMetadataServer>> StartFakeMetadata(
    const Json& gce_metadata, CaseContext& ctx);

}  // namespace cohort::conformance

#endif  // COHORT_TOOLS_CONFORMANCE_RESOLVER_FAKES_H_
