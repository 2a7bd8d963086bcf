// TensorDataService: the producer side of the tensor data plane. It serves
// RecvTensor on cohort's framed transport (rpc/framed_server.h) so that a
// tensor crosses tasks as one small header followed by its bytes, written
// straight from the tensor's buffer (tensor_wire.h), instead of a gRPC
// message built with several copies (reference runtime_training.md §5).
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
// Protocol: one RecvTensor in flight per connection (a client that pools
// connections gets concurrency from several); a second request before the
// first is answered closes the connection. Requests are capped at
// kMaxRequestBytes; tensors at kMaxWireTensorBytes (ResourceExhausted).
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

namespace cohort::runtime {

class Worker;

class TensorDataService final : public rpc::FramedServer::Handler {
 public:
  static constexpr size_t kMaxRequestBytes = 64 << 10;

  // Listens on options.host (port chosen by the OS) with options' token,
  // insecure flag and connection caps; options.max_frame_bytes is lowered
  // to kMaxRequestBytes. Errors as FramedServer::Start's.
  static absl::StatusOr<std::unique_ptr<TensorDataService>> Start(
      Worker* worker, rpc::FramedServerOptions options);
  // Closes every connection (cancelling what they wait for).
  ~TensorDataService() override;

  int port() const { return port_; }
  const std::string& address() const { return server_->address(); }
  // Tensors answered so far (tests: the fast path was used).
  uint64_t num_tensors_sent() const;

  void OnRequest(const std::shared_ptr<rpc::FramedConnection>& c,
                 std::string request) override;
  void OnClose(const std::shared_ptr<rpc::FramedConnection>& c) override;

 private:
  struct Call;
  struct State;
  explicit TensorDataService(Worker* worker);
  static void Answer(const std::shared_ptr<State>& state,
                     const std::shared_ptr<Call>& call,
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
