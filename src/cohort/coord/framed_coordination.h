// The coordination service over cohort's framed transport (rpc/frame.h):
// the fast path beside gRPC. Same messages, same handler
// (coordination_rpc_handler.h), same errors with their payloads; one
// framed round trip per call instead of a gRPC unary call with its thread
// hand-offs.
//
//   // service side (CoordinationServer does this next to its gRPC server)
//   FramedCoordinationService handler(service);
//   auto server = rpc::FramedServer::Start(options, &handler);
//   // client side: a target "framed:HOST:PORT" (NewCoordinationClient)
//   auto client = NewFramedCoordinationClient("127.0.0.1:4101", token);
//
// Wire: a request frame is the method's index in COHORT_COORDINATION_RPCS
// (u8) followed by the serialized request; the reply is the serialized
// response, or the error's code with rpc::EncodeErrorBody (payloads kept).
// The connection's handshake proves the job token (framed_server.h).
//
// Client: one call at a time per connection, so a client keeps a small pool
// of connections: a call takes an idle one or connects a new one, and gives
// it back when it ends well. Blocking calls run on the caller's thread;
// NameAsync runs the call on a thread of its own (the agent only makes
// blocking calls). A cancelled call (CallOptions::cancellation) shuts its
// connection down and ends with Cancelled.
//
// Errors: the service's errors unchanged; transport failures as
// Unavailable / DeadlineExceeded naming the target and the RPC, like the
// gRPC client's.
//
// Thread safety: thread-safe.
#ifndef COHORT_COORD_FRAMED_COORDINATION_H_
#define COHORT_COORD_FRAMED_COORDINATION_H_

#include <memory>
#include <string>

#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "cohort/coord/coordination_client.h"
#include "cohort/coord/coordination_rpc_handler.h"
#include "cohort/rpc/framed_server.h"
#include "cohort/rpc/transport.h"

namespace cohort::coord {

// Targets with this prefix name a framed coordination endpoint.
inline constexpr char kFramedTargetPrefix[] = "framed:";

class FramedCoordinationService : public rpc::FramedServer::Handler {
 public:
  // `service` is not owned and must outlive the handler.
  explicit FramedCoordinationService(CoordinationService* service)
      : handler_(service) {}

  // One call at a time per connection (the client's discipline, enforced
  // here): a request sent before the previous answer closes the
  // connection, so a peer cannot park unbounded calls on one connection.
  void OnRequest(const std::shared_ptr<rpc::FramedConnection>& c,
                 std::string request) override;
  void OnClose(const std::shared_ptr<rpc::FramedConnection>& c) override;

 private:
  // Marks connection `id` idle again.
  void Finished(uint64_t id);

  CoordinationRpcHandler handler_;
  absl::Mutex mu_;
  // Connections with a call in progress.
  absl::flat_hash_set<uint64_t> busy_ ABSL_GUARDED_BY(mu_);
};

// A client for the framed endpoint at "host:port" (no prefix; the host an
// IPv4 address or a name). InvalidArgument when it is not host:port.
absl::StatusOr<std::unique_ptr<CoordinationClient>> NewFramedCoordinationClient(
    const std::string& address, const std::string& job_token);

// A client for `target`: "framed:HOST:PORT" for the framed endpoint,
// "HOST:PORT" for gRPC (with `security`). The framed transport has no TLS:
// InvalidArgument when `security` asks for it.
absl::StatusOr<std::unique_ptr<CoordinationClient>> NewCoordinationClient(
    const std::string& target, const rpc::TransportSecurity& security);

}  // namespace cohort::coord

#endif  // COHORT_COORD_FRAMED_COORDINATION_H_
