// BarrierTcpServer: a second, low-latency transport for the same
// BarrierCoordinator, used by tasks of `cohort launch` on this machine.
//
// Why: a unary gRPC call costs ~45x a raw loopback TCP round trip on the
// 2-core machines this project targets (docs/barrier.md, "Benchmark"), and a
// barrier is nothing but round trips. The wire format is the same protobuf
// messages as barrier.proto, framed on one TCP connection per task:
//   request:  u32 length (little endian) + BarrierSyncRequest
//   response: u8 status code + u32 length + (BarrierSyncResponse if the code
//             is OK, else the error message)
// A task has at most one sync in flight per connection. A connection that
// closes while its request is parked withdraws the request (like a
// cancelled RPC), which is how a killed or cancelled task leaves a sync.
//
// One thread runs an epoll loop that accepts, reads and hands complete
// requests to the coordinator; replies are written by whichever thread
// completes the sync (small writes to a socket buffer; never under the
// coordinator's lock).
//
// Thread safety: thread-safe; the coordinator must outlive the server.
#ifndef COHORT_BARRIER_BARRIER_TCP_SERVER_H_
#define COHORT_BARRIER_BARRIER_TCP_SERVER_H_

#include <memory>
#include <string>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "cohort/barrier/barrier_coordinator.h"

namespace cohort::barrier {

class BarrierTcpServer {
 public:
  // Listens on host:0 (the OS picks the port). Unavailable when it cannot.
  static absl::StatusOr<std::unique_ptr<BarrierTcpServer>> Start(
      BarrierCoordinator* coordinator, const std::string& host = "127.0.0.1");
  // Stops the loop, closes every connection (withdrawing parked requests).
  ~BarrierTcpServer();

  // "host:port".
  const std::string& address() const { return address_; }

  struct Connection;

 private:
  BarrierTcpServer() = default;
  void Loop();
  void OnReadable(const std::shared_ptr<Connection>& c);
  void Close(const std::shared_ptr<Connection>& c);

  BarrierCoordinator* coordinator_ = nullptr;
  std::string address_;
  int listen_fd_ = -1;
  int epoll_fd_ = -1;
  int stop_fd_ = -1;
  std::thread loop_;
  // Owned by the loop thread.
  absl::flat_hash_map<int, std::shared_ptr<Connection>> connections_;
};

// Client side: one blocking sync over an established connection `fd`.
// Waits for the answer or until `wake_fd` becomes readable (cancellation:
// returns Cancelled and the caller must close `fd`) or `deadline` passes.
absl::StatusOr<std::vector<std::string>> TcpSync(int fd, int wake_fd,
                                                 const std::string& request,
                                                 absl::Time deadline);
// Connects to "host:port" with TCP_NODELAY. Unavailable naming the address.
absl::StatusOr<int> TcpConnect(const std::string& address);

}  // namespace cohort::barrier

#endif  // COHORT_BARRIER_BARRIER_TCP_SERVER_H_
