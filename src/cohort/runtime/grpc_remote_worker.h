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
// Thread safety: thread-safe.
#ifndef COHORT_RUNTIME_GRPC_REMOTE_WORKER_H_
#define COHORT_RUNTIME_GRPC_REMOTE_WORKER_H_

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "cohort/rpc/transport.h"
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

 private:
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
};

}  // namespace cohort::runtime

#endif  // COHORT_RUNTIME_GRPC_REMOTE_WORKER_H_
