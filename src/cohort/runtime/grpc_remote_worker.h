// GrpcRemoteWorker: a WorkerInterface for another task's worker, over a
// gRPC channel (the callback client API).
//
//   auto channel = rpc::CreateChannel("10.0.0.2:2222", security);
//   GrpcRemoteWorker ps0("/job:ps/replica:0/task:0", "10.0.0.2:2222",
//                        *channel, security);
//   ps0.RunGraphAsync(&opts, &req, &resp, done);
//
// Every call attaches the job token; CallOptions' deadline becomes the gRPC
// deadline and CallOptions::StartCancel() cancels the call
// (ClientContext::TryCancel). `done` runs on a gRPC thread, or inline in
// opts->StartCancel() when gRPC completes the cancelled call right there
// (it may); a caller must then not free `opts` from `done`.
//
// Errors:
//  - Whatever the remote worker answered, as it answered (code, message,
//    payloads; worker.h lists them).
//  - gRPC's own failures (the task is down, unreachable, reset the
//    connection): Unavailable `<task> (<host:port>) is unavailable:
//    <detail>. Additional GRPC error information from remote target <task>`
//    (TF's phrase, kept for users' greps).
//  - DeadlineExceeded `<Rpc> to <task> (<host:port>) did not finish before
//    its deadline: <detail>`; Cancelled `<Rpc> to <task> (<host:port>) was
//    cancelled: <detail>` after StartCancel.
//  - Other codes gRPC makes itself (ResourceExhausted for a message over
//    the size limit, Unimplemented when the target serves no
//    WorkerService) keep their code: `<Rpc> to <task> (<host:port>) failed
//    in transport: <detail>`.
//
// Tensor data plane: RecvTensorValueAsync (what the remote rendezvous
// calls) asks the target's GetStatus once for its tensor port and, when it
// advertises one, receives tensors over it (tensor_data_client.h: header +
// raw bytes into the tensor's buffer, the same semantics and errors);
// otherwise, under TLS (the framed transport has none), while the probe
// runs, or when the host is not a dotted IPv4 address, over gRPC
// RecvTensor. An Unavailable answer on the data plane forgets the port, so
// a restarted target is probed again. RunGraph takes the data plane too
// (probing first if needed) when its request fits the data plane's request
// cap: a step's call to each task then costs a framed round trip instead
// of a gRPC unary call (docs/runtime.md). Everything else is gRPC.
//
// Thread safety: thread-safe.
#ifndef COHORT_RUNTIME_GRPC_REMOTE_WORKER_H_
#define COHORT_RUNTIME_GRPC_REMOTE_WORKER_H_

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "cohort/rpc/transport.h"
#include "cohort/runtime/tensor_data_client.h"
#include "cohort/runtime/worker_interface.h"
#include "cohort/worker.grpc.pb.h"
#include "grpcpp/channel.h"

namespace cohort::runtime {

class GrpcRemoteWorker final : public WorkerInterface {
 public:
  // `task` ("/job:ps/replica:0/task:0") and `address` ("host:port") name
  // the target in errors.
  GrpcRemoteWorker(std::string task, std::string address,
                   std::shared_ptr<grpc::Channel> channel,
                   rpc::TransportSecurity security);

#define COHORT_RUNTIME_GRPC_REMOTE_METHOD_(Name)                    \
  void Name##Async(CallOptions* opts, const Name##Request* request, \
                   Name##Response* response, StatusCallback done) override;
  COHORT_WORKER_RPCS(COHORT_RUNTIME_GRPC_REMOTE_METHOD_)
#undef COHORT_RUNTIME_GRPC_REMOTE_METHOD_

  void RecvTensorValueAsync(CallOptions* opts, const RecvTensorRequest* request,
                            RecvTensorValue* value,
                            StatusCallback done) override;

  // For tests: whether RecvTensors now use the data plane.
  bool UsesTensorDataPlane() const;

 private:
  enum class DataPlane { kUnknown, kProbing, kAvailable, kNone };
  // Runs `then` with the data plane's client, or null when calls must go
  // over gRPC: at once when that is known, else after asking GetStatus for
  // the tensor port (bounded by `deadline`; a failed probe is retried by a
  // later call). `then` may run on a gRPC thread.
  void WithDataPlane(absl::Time deadline,
                     std::function<void(TensorDataClient*)> then);
  void ProbeDataPlane(absl::Time deadline,
                      std::function<void(TensorDataClient*)> then);
  // A transport failure (Unavailable) on `client`: the target may have
  // restarted on another tensor port, so the next call probes again.
  void ForgetDataPlaneOn(TensorDataClient* client, const absl::Status& s);
  void RecvOverDataPlane(TensorDataClient* client, CallOptions* opts,
                         const RecvTensorRequest* request,
                         RecvTensorValue* value, StatusCallback done);
  void RunOverDataPlane(TensorDataClient* client, CallOptions* opts,
                        const RunGraphRequest* request,
                        RunGraphResponse* response, StatusCallback done);

  // The gRPC call of each RPC.
#define COHORT_RUNTIME_GRPC_CALL_METHOD_(Name)                     \
  void Grpc##Name(CallOptions* opts, const Name##Request* request, \
                  Name##Response* response, StatusCallback done);
  COHORT_WORKER_RPCS(COHORT_RUNTIME_GRPC_CALL_METHOD_)
#undef COHORT_RUNTIME_GRPC_CALL_METHOD_

  struct Target {
    std::string task;
    std::string address;
  };
  struct Call {
    grpc::ClientContext context;
    // The thread inside this call's cancel callback (TryCancel), if any:
    // gRPC may complete the call inline there.
    std::atomic<std::thread::id> cancelling{};
  };

  // Token, deadline and cancellation of one call.
  std::shared_ptr<Call> StartCall(CallOptions* opts) const;
  static absl::Status Convert(const grpc::Status& status, const Target& target,
                              const char* rpc);

  const std::shared_ptr<const Target> target_;
  const std::unique_ptr<WorkerService::Stub> stub_;
  const rpc::TransportSecurity security_;

  mutable absl::Mutex data_mu_;
  DataPlane data_plane_ ABSL_GUARDED_BY(data_mu_) = DataPlane::kUnknown;
  // The client in use (kAvailable), one of data_clients_.
  TensorDataClient* data_client_ ABSL_GUARDED_BY(data_mu_) = nullptr;
  // Every client made, kept for this worker's life: a call's `done` runs on
  // its client's thread, so a client is never destroyed while in use. One
  // per tensor address the peer had (a restart on a new port adds one; a
  // re-probe that finds the same port reuses it).
  std::vector<std::unique_ptr<TensorDataClient>> data_clients_
      ABSL_GUARDED_BY(data_mu_);
};

}  // namespace cohort::runtime

#endif  // COHORT_RUNTIME_GRPC_REMOTE_WORKER_H_
