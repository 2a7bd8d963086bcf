// Conversion between absl::Status and grpc::Status, payloads included.
//
// Every cohort gRPC service returns ToGrpcStatus(status) and every client
// turns what it receives back with FromGrpcStatus, so the code, the message
// and every payload (typed error details such as "which task failed") cross
// the wire intact. Payloads travel in grpc::Status::error_details as a
// cohort.rpc.StatusDetails message.
//
// Thread safety: pure functions.
#ifndef COHORT_RPC_STATUS_CONVERSION_H_
#define COHORT_RPC_STATUS_CONVERSION_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "grpcpp/support/status.h"

namespace cohort::rpc {

// Error messages received from a peer are printed and logged: they are
// cut at this many bytes and their control characters, newlines included,
// escaped (SanitizeForDisplay), whatever the peer sent.
inline constexpr size_t kMaxPeerErrorMessageBytes = 16 << 10;

grpc::Status ToGrpcStatus(const absl::Status& status);

// A grpc::Status whose error_details do not parse keeps its code and message
// and gets no payloads. The message is sanitized (see above). A connection
// refused on a certificate (IsCertificateRejection) is Unauthenticated,
// saying to check the job token or the TLS files, not Unavailable.
absl::Status FromGrpcStatus(const grpc::Status& status);

// True for gRPC's Unavailable when the TLS handshake failed in the protocol
// (SSL_ERROR_SSL): the peer's certificate did not verify, or the peer
// refused ours. Under job TLS that means the two ends hold different job
// tokens.
bool IsCertificateRejection(const grpc::Status& status);

// True when `status` is an error that a cohort service returned through
// ToGrpcStatus; false for OK and for errors made by gRPC itself (the
// transport: refused, reset, deadline, cancelled).
bool AnsweredByService(const grpc::Status& status);

// The same for cohort's framed transport (frame.h), whose error replies
// carry a code and a body: the body of a service's error reply (u32 message
// length, the message, then the cohort.rpc.StatusDetails), and back. A body
// that is not one becomes the message, without payloads.
std::string EncodeErrorBody(const absl::Status& status);
absl::Status DecodeErrorBody(absl::StatusCode code, absl::string_view body);

}  // namespace cohort::rpc

#endif  // COHORT_RPC_STATUS_CONVERSION_H_
