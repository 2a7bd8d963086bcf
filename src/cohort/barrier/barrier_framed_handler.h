// BarrierFramedHandler: the low-latency transport for a BarrierCoordinator,
// used by the tasks of `cohort launch`: barrier.proto's messages over
// cohort's framed TCP transport (rpc/framed_server.h), which authenticates
// every connection with the job token and bounds frames, connections and
// queued replies. It is a FramedServer handler, not a server: the job's
// coordination server carries it on its framed port beside the coordination
// service (barrier_control_plane.h, ServeBarriers), so a job opens no
// barrier port of its own.
//
// Why not gRPC: a unary gRPC call costs ~45x a raw loopback TCP round trip
// on the 2-core machines this project targets (docs/barrier.md), and a
// barrier is nothing but round trips.
//
// Protocol on an authenticated connection: a request frame is a serialized
// BarrierSyncRequest; its reply frame carries a BarrierSyncResponse when the
// code is OK, else the coordinator's error message. A task has at most one
// sync in flight per connection. A connection that closes while its request
// is parked withdraws the request (like a cancelled RPC), which is how a
// killed or cancelled task leaves a sync. A frame that is not a
// BarrierSyncRequest, or a second request while one is parked, closes the
// connection (logged with the peer's address); other connections and the
// job are untouched.
//
// Thread safety: thread-safe; the coordinator must outlive the handler, and
// the handler the server that carries it.
#ifndef COHORT_BARRIER_BARRIER_FRAMED_HANDLER_H_
#define COHORT_BARRIER_BARRIER_FRAMED_HANDLER_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "cohort/barrier/barrier_coordinator.h"
#include "cohort/rpc/framed_server.h"

namespace cohort::barrier {

// The framed identity a BarrierTaskContext names in the handshake; a server
// routes such connections to the BarrierFramedHandler registered under it
// (rpc/framed_server.h, "Several services, one port").
inline constexpr char kBarrierTcpIdentity[] = "barrier coordinator";

// The protocol above on the connections a FramedServer hands it (those
// whose handshake named kBarrierTcpIdentity). The coordinator must outlive
// the handler, and the handler the server.
class BarrierFramedHandler : public rpc::FramedServer::Handler {
 public:
  explicit BarrierFramedHandler(BarrierCoordinator* coordinator)
      : coordinator_(coordinator) {}

  void OnRequest(const std::shared_ptr<rpc::FramedConnection>& c,
                 std::string request) override;
  // Withdraws the connection's parked request from its sync.
  void OnClose(const std::shared_ptr<rpc::FramedConnection>& c) override;

 private:
  BarrierCoordinator* const coordinator_;
  absl::Mutex mu_;
  // Connection id -> its parked request's id.
  absl::flat_hash_map<uint64_t, uint64_t> parked_ ABSL_GUARDED_BY(mu_);
};

}  // namespace cohort::barrier

#endif  // COHORT_BARRIER_BARRIER_FRAMED_HANDLER_H_
