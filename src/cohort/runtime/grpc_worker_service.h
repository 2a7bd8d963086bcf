// GrpcWorkerService: serves a WorkerInterface (normally the task's Worker)
// over gRPC with the callback API (worker.proto's WorkerService).
//
//   Worker worker(env);
//   GrpcWorkerService service(&worker, security.job_token);
//   auto server = rpc::StartGrpcServer("127.0.0.1:0", {&service}, security);
//
// Handlers are thin (docs/architecture.md, convention 7): each checks the job
// token first (Unauthenticated, nothing read or changed), hands the call to the
// worker with a CallOptions carrying the client's deadline, and finishes its
// reactor from the worker's `done`, on whatever thread runs it. No handler
// blocks a gRPC thread: RunGraph runs on a worker step thread and
// RecvTensor waits in the rendezvous. A client cancel (or its deadline) is
// passed on as CallOptions::StartCancel().
//
// Errors keep their code, message and payloads (rpc/status_conversion.h),
// which also marks them as answered by the service, so the client can tell
// them from transport failures (rpc::AnsweredByService).
//
// Shutdown: Stop() the Worker before shutting the grpc::Server down, so
// every parked RecvTensor and running RunGraph finishes (Server::Shutdown
// waits for them).
//
// Thread safety: thread-safe.
#ifndef COHORT_RUNTIME_GRPC_WORKER_SERVICE_H_
#define COHORT_RUNTIME_GRPC_WORKER_SERVICE_H_

#include <string>

#include "cohort/runtime/worker_interface.h"
#include "cohort/worker.grpc.pb.h"

namespace cohort::runtime {

class GrpcWorkerService final : public WorkerService::CallbackService {
 public:
  // `worker` is not owned and must outlive the service. An empty
  // `job_token` accepts every caller.
  GrpcWorkerService(WorkerInterface* worker, std::string job_token);

#define COHORT_RUNTIME_GRPC_SERVICE_METHOD_(Name)                      \
  grpc::ServerUnaryReactor* Name(grpc::CallbackServerContext* context, \
                                 const Name##Request* request,         \
                                 Name##Response* response) override;
  COHORT_WORKER_RPCS(COHORT_RUNTIME_GRPC_SERVICE_METHOD_)
#undef COHORT_RUNTIME_GRPC_SERVICE_METHOD_

 private:
  WorkerInterface* const worker_;
  const std::string job_token_;
};

}  // namespace cohort::runtime

#endif  // COHORT_RUNTIME_GRPC_WORKER_SERVICE_H_
