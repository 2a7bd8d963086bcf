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

grpc::Status ToGrpcStatus(const absl::Status& status);

// A grpc::Status whose error_details do not parse keeps its code and message
// and gets no payloads.
absl::Status FromGrpcStatus(const grpc::Status& status);

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
