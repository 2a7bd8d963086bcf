// TensorDataService: the producer side of the tensor data plane. It serves
// RecvTensor on cohort's framed transport (rpc/framed_server.h) so that a
// tensor crosses tasks as one small header followed by its bytes, written
// straight from the tensor's buffer (tensor_wire.h), instead of a gRPC
// message built with several copies (docs/runtime.md).
// It also serves RunGraph, the master's per-step call, which costs a
// fraction of a gRPC unary call's thread hand-offs (docs/runtime.md).
//
//   COHORT_ASSIGN_OR_RETURN(auto data, TensorDataService::Start(&worker,
//   opts)); worker.SetTensorPort(data->port());   // GetStatus advertises it
//
// Semantics are the Worker's own RecvTensor (worker.h), which this calls
// through Worker::RecvTensorValueAsync: the job token is the framed
// handshake; request-id de-duplication (`RecvTensor (GrpcWorker)`),
// incarnation check, waiting in the rendezvous without holding a thread,
// Aborted `Cleanup <id>` and every error code, message and payload are the
// worker's. A connection that closes while its RecvTensor waits cancels
// that RecvTensor only (as a cancelled gRPC call does).
//
// RunGraph likewise is the Worker's own (RunGraphAsync): request-id
// de-duplication, handles, deadlines, cancellation on a closed connection.
//
// Protocol: one call in flight per connection (a client that pools
// connections gets concurrency from several); a second request before the
// first is answered closes the connection, as do a request that is not a
// known method and message. Requests are capped at kMaxRequestBytes (a
// larger RunGraph goes over gRPC); tensors at kMaxWireTensorBytes and a
// RunGraph answer at what the client reads (kMaxReplyBytes), both
// ResourceExhausted.
//
// Threads: requests arrive on the framed server's loop thread and never
// block it; replies are queued from whichever thread finishes the
// RecvTensor (the sender's, a timer thread).
//
// Thread safety: thread-safe. The Worker must outlive the service.
#ifndef COHORT_RUNTIME_TENSOR_DATA_SERVICE_H_
#define COHORT_RUNTIME_TENSOR_DATA_SERVICE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "cohort/rpc/framed_server.h"
#include "cohort/rpc/transport.h"

namespace cohort::runtime {

class Worker;

// The framed identity (rpc::FramedServerOptions::identity) of `task`'s
// tensor data plane ("/job:ps/replica:0/task:0"): a client that meant one
// task's data plane is refused by every other.
std::string TensorDataIdentity(absl::string_view task);

class TensorDataService final : public rpc::FramedServer::Handler {
 public:
  static constexpr size_t kMaxRequestBytes = size_t{4} << 20;
  // The largest RunGraph answer body (one reply frame): gRPC's cap on the
  // runtime's messages, so a step's fetches fit either path.
  static constexpr size_t kMaxReplyBytes = rpc::kMaxTensorMessageBytes;
  // What a data-plane client accepts as one reply frame (code + body).
  static constexpr size_t kMaxReplyFrameBytes = kMaxReplyBytes + 1;

  // Listens on options.host (port chosen by the OS) with options' token,
  // insecure flag and connection caps; options.max_frame_bytes is lowered
  // to kMaxRequestBytes and options.identity is the worker's
  // TensorDataIdentity. Errors as FramedServer::Start's.
  static absl::StatusOr<std::unique_ptr<TensorDataService>> Start(
      Worker* worker, rpc::FramedServerOptions options);
  // Closes every connection (cancelling what they wait for).
  ~TensorDataService() override;

  int port() const { return port_; }
  const std::string& address() const { return server_->address(); }
  // Tensors answered so far (tests: the fast path was used).
  uint64_t num_tensors_sent() const;
  // RunGraph calls answered so far, whatever their status.
  uint64_t num_run_graphs() const;
  // Of num_tensors_sent(), those answered by reference to a consumer on the
  // same host (tensor_wire.h: kSameHostRef), and the held tensors then
  // sent as bytes after all (kFetchHeld).
  uint64_t num_tensors_by_reference() const;
  uint64_t num_held_fetched() const;
  // Tensors held now for same-host consumers (0 once each consumer
  // released its tensor or its connection ended).
  size_t num_held() const;
  // Raw tensors of at least this many bytes go by reference to a same-host
  // consumer; below it the copy through the socket costs less than the
  // consumer's extra system call and the hold.
  static constexpr size_t kSameHostMinBytes = size_t{64} << 10;

  void OnRequest(const std::shared_ptr<rpc::FramedConnection>& c,
                 std::string request) override;
  void OnClose(const std::shared_ptr<rpc::FramedConnection>& c) override;

 private:
  struct Call;
  struct RecvCall;
  struct RunCall;
  struct State;
  explicit TensorDataService(Worker* worker);
  // Parses `request` into a new call and registers it as its connection's
  // one call. Null after answering InvalidArgument (not a `rpc` request)
  // or closing the connection (a call already in flight).
  template <typename CallType>
  std::shared_ptr<CallType> Admit(
      const std::shared_ptr<rpc::FramedConnection>& c,
      absl::string_view request, const char* rpc);
  static void Forget(State& state, const Call& call);
  void ServeFetchHeld(const std::shared_ptr<rpc::FramedConnection>& c);
  void ServeRecvTensor(const std::shared_ptr<rpc::FramedConnection>& c,
                       bool same_host, absl::string_view request);
  void ServeRunGraph(const std::shared_ptr<rpc::FramedConnection>& c,
                     absl::string_view request);
  static void AnswerRecv(const std::shared_ptr<State>& state,
                         const std::shared_ptr<RecvCall>& call,
                         const absl::Status& status);
  static void AnswerRun(const std::shared_ptr<State>& state,
                        const std::shared_ptr<RunCall>& call,
                        const absl::Status& status);

  Worker* const worker_;
  // Shared with in-flight calls, whose answers may come after the service
  // is gone (a timer thread finishing a cancel).
  const std::shared_ptr<State> state_;
  std::unique_ptr<rpc::FramedServer> server_;
  int port_ = 0;
};

}  // namespace cohort::runtime

#endif  // COHORT_RUNTIME_TENSOR_DATA_SERVICE_H_
