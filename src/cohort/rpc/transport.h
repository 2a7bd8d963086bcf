// Channels, servers and their security for every cohort gRPC service.
//
//   TransportSecurity security;              // insecure by default (loopback)
//   security.job_token = "s3cret";           // checked on every RPC
//   COHORT_ASSIGN_OR_RETURN(auto server,
//       StartGrpcServer("127.0.0.1:0", {&service}, security));
//   int port = server.port;                  // the port the OS chose
//   auto channel = CreateChannel(
//       absl::StrCat("127.0.0.1:", port), security);
//   grpc::ClientContext ctx;
//   AttachJobToken(&ctx, security);
//
// Security modes:
//  - TLS from files (ca_cert_file set): the server presents cert/key and the
//    client verifies it against the CA (optionally mutual: the server then
//    requires client certificates signed by the same CA);
//  - job TLS (a job token and no TLS files, the default of every job):
//    mutual TLS with certificates from a CA derived from the token
//    (job_tls.h), so neither end sends anything to a peer that does not hold
//    the token;
//  - insecure (neither): loopback only unless `insecure`.
// The token is also sent as metadata "cohort-job-token" on every call and
// compared in constant time: on the call's headers, before its message is
// read (an AuthMetadataProcessor on every server with a token), and again by
// each service handler (CheckJobToken), which answers Unauthenticated, with
// no data, on a wrong or missing token.
//
// Thread safety: functions are thread-safe; GrpcServer is thread-compatible.
#ifndef COHORT_RPC_TRANSPORT_H_
#define COHORT_RPC_TRANSPORT_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"
#include "grpcpp/server.h"
#include "grpcpp/server_context.h"

namespace cohort::rpc {

inline constexpr char kJobTokenMetadataKey[] = "cohort-job-token";
// Environment variable that hands the job token to tasks and CLI commands.
inline constexpr char kJobTokenEnvVar[] = "COHORT_JOB_TOKEN";

// Limits applied to every channel and server. kMaxMessageBytes is the
// default message cap; services that carry tensors (the runtime) pass
// kMaxTensorMessageBytes instead.
inline constexpr int kMaxMessageBytes = 64 << 20;
inline constexpr int kMaxTensorMessageBytes = (1 << 30) - 1;
inline constexpr int kMaxConcurrentStreams = 4096;
inline constexpr size_t kServerMemoryQuotaBytes = size_t{1} << 30;
inline constexpr absl::Duration kKeepaliveTime = absl::Seconds(4);
inline constexpr absl::Duration kKeepaliveTimeout = absl::Seconds(4);
inline constexpr absl::Duration kServerHandshakeTimeout = absl::Seconds(10);

struct TransportSecurity {
  // TLS is on when ca_cert_file is set. Server side: cert_file and key_file
  // are the server's identity; client side they are optional (mutual TLS).
  std::string ca_cert_file;
  std::string cert_file;
  std::string key_file;
  // Server name the client expects in the server certificate (default: the
  // host part of the target).
  std::string server_name_override;
  // Server side: require client certificates signed by the CA (mutual TLS).
  bool require_client_cert = false;
  // Empty: no token is sent or required.
  std::string job_token;
  // Server side: allow listening beyond loopback with neither a token nor
  // TLS (the user asked with --insecure).
  bool insecure = false;

  bool tls() const { return !ca_cert_file.empty(); }
};

// How a channel checks a quiet connection. kCohort: cohort's own servers,
// which allow pings every kKeepaliveTime even without calls. kExternal: a
// service with the common default policy (etcd: at most one ping per 5 s,
// none without calls, else GOAWAY "too_many_pings"): every 30 s, only while
// a call is open.
enum class Keepalive { kCohort, kExternal };

// Creates a channel to "host:port". Fails (InvalidArgument / NotFound) only
// when TLS files cannot be read; connecting happens lazily.
absl::StatusOr<std::shared_ptr<grpc::Channel>> CreateChannel(
    const std::string& target, const TransportSecurity& security,
    int max_message_bytes = kMaxMessageBytes,
    Keepalive keepalive = Keepalive::kCohort);

// Adds the job token (if any) to an outgoing call.
void AttachJobToken(grpc::ClientContext* context,
                    const TransportSecurity& security);

// OK when `expected_token` is empty or the call carries exactly it;
// Unauthenticated otherwise (the message never echoes either token).
absl::Status CheckJobToken(const grpc::ServerContextBase& context,
                           const std::string& expected_token);
// The same check over a call's metadata.
absl::Status CheckJobTokenMetadata(
    const std::multimap<grpc::string_ref, grpc::string_ref>& metadata,
    const std::string& expected_token);

struct GrpcServer {
  std::unique_ptr<grpc::Server> server;
  int port = 0;
};

// Builds and starts a server listening on `address` ("127.0.0.1:0" lets the
// OS choose the port) serving `services` (not owned; they must outlive the
// server), with keepalive and the limits above. Unavailable when the address
// cannot be bound, naming it. InvalidArgument when `address` is beyond
// loopback and `security` has neither a token nor TLS, or when it has
// server-only TLS and no token (anyone could call), unless `insecure`.
// Every service must call CheckJobToken on every call.
absl::StatusOr<GrpcServer> StartGrpcServer(
    const std::string& address, const std::vector<grpc::Service*>& services,
    const TransportSecurity& security,
    int max_message_bytes = kMaxMessageBytes);

}  // namespace cohort::rpc

#endif  // COHORT_RPC_TRANSPORT_H_
