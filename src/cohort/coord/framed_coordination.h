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
// Client: every call is a tagged request (rpc/framed_channel.h) on one
// connection per process and endpoint, shared by every client made for that
// address and token (as gRPC shares its subchannels), so any number of
// threads, agents and parked calls share it, and the service writes the answers
// one event releases (a barrier) to a connection in one write. Asynchronous
// callbacks run on the channel's reader thread. A cancelled call
// (CallOptions::cancellation) ends at once with Cancelled; the service still
// answers it later, and that answer is dropped.
//
// Service: each connection may have at most max_calls_per_connection calls
// in flight and the service at most max_calls in all, so that no peer parks
// calls without bound; a call beyond either cap is answered
// ResourceExhausted at once (the connection and its other calls stay).
// Calls of a closed connection count until the service answers them.
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

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "cohort/coord/coordination_client.h"
#include "cohort/coord/coordination_rpc_handler.h"
#include "cohort/rpc/framed_server.h"
#include "cohort/rpc/transport.h"

namespace cohort::coord {

// Targets with this prefix name a framed coordination endpoint.
inline constexpr char kFramedTargetPrefix[] = "framed:";
// The framed identity (rpc::FramedServerOptions::identity) of a job's
// coordination service: its clients connect to nothing else.
inline constexpr char kFramedCoordinationIdentity[] = "coordination service";

// Caps on the calls the framed endpoint holds (see "Service" above).
struct FramedCoordinationLimits {
  // A process of 16,384 simulated tasks parks two calls per task (the error
  // poll and a barrier) and heartbeats: twice that, for headroom.
  int max_calls_per_connection = 1 << 16;
  int max_calls = 1 << 18;
};

class FramedCoordinationService : public rpc::FramedServer::Handler {
 public:
  using Limits = FramedCoordinationLimits;

  // `service` is not owned and must outlive the handler.
  explicit FramedCoordinationService(CoordinationService* service,
                                     Limits limits = Limits())
      : handler_(service), limits_(limits) {}

  void OnRequest(const std::shared_ptr<rpc::FramedConnection>& c,
                 std::string request) override;
  void OnClose(const std::shared_ptr<rpc::FramedConnection>& c) override;

  // Calls received and not yet answered, over all connections.
  int calls_in_flight();

 private:
  // One call of connection `id` was answered.
  void Finished(uint64_t id);

  CoordinationRpcHandler handler_;
  const Limits limits_;
  absl::Mutex mu_;
  // Calls in flight per connection, and in all.
  absl::flat_hash_map<uint64_t, int> in_flight_ ABSL_GUARDED_BY(mu_);
  int total_in_flight_ ABSL_GUARDED_BY(mu_) = 0;
};

// A client for the framed endpoint at "host:port" (no prefix; the host an
// IPv4 address or a name). InvalidArgument when it is not host:port.
absl::StatusOr<std::unique_ptr<CoordinationClient>> NewFramedCoordinationClient(
    const std::string& address, const std::string& job_token);

// A client for `target`: "framed:HOST:PORT" for the framed endpoint,
// "HOST:PORT" for gRPC (with `security`), "etcd://..." for a job whose
// control plane is etcd (JoinEtcdCoordination, its credentials from the
// environment). The framed transport has no TLS: InvalidArgument when
// `security` asks for it.
absl::StatusOr<std::unique_ptr<CoordinationClient>> NewCoordinationClient(
    const std::string& target, const rpc::TransportSecurity& security);

}  // namespace cohort::coord

#endif  // COHORT_COORD_FRAMED_COORDINATION_H_
