// A CoordinationClient over gRPC (callback API, stub->async()).
//
//   COHORT_ASSIGN_OR_RETURN(auto client,
//       NewGrpcCoordinationClient("10.0.0.5:2222", security));
//
// Each call gets its own grpc::ClientContext with the job token attached,
// CallOptions::timeout as its deadline and wait_for_ready as asked;
// CallCancellation maps to ClientContext::TryCancel. Transport failures come
// back without the service-error payload (see IsServiceError).
//
// Thread safety: thread-safe.
#ifndef COHORT_COORD_GRPC_COORDINATION_CLIENT_H_
#define COHORT_COORD_GRPC_COORDINATION_CLIENT_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "cohort/coord/coordination_client.h"
#include "cohort/rpc/transport.h"

namespace cohort::coord {

// Fails only when TLS files cannot be read; the connection is made lazily.
absl::StatusOr<std::unique_ptr<CoordinationClient>> NewGrpcCoordinationClient(
    const std::string& target, const rpc::TransportSecurity& security);

}  // namespace cohort::coord

#endif  // COHORT_COORD_GRPC_COORDINATION_CLIENT_H_
