#include "cohort/runtime/grpc_worker_service.h"

#include <chrono>
#include <utility>

#include "absl/strings/cord.h"
#include "absl/time/time.h"
#include "cohort/rpc/status_conversion.h"
#include "cohort/rpc/transport.h"
#include "cohort/runtime/call_options.h"
#include "cohort/runtime/worker_errors.h"

namespace cohort::runtime {
namespace {

// One call's reactor. It owns the CallOptions the worker sees, so the
// client's cancel reaches the worker (OnCancel) and the options live until
// gRPC is done with the call (OnDone, after Finish and after any OnCancel).
class WorkerCallReactor final : public grpc::ServerUnaryReactor {
 public:
  explicit WorkerCallReactor(const grpc::CallbackServerContext& context) {
    const auto deadline = context.deadline();
    // gRPC reports "no deadline" as the far end of system_clock.
    if (deadline != std::chrono::system_clock::time_point::max()) {
      opts_.set_deadline(absl::FromChrono(deadline));
    }
  }

  CallOptions* opts() { return &opts_; }

  void Reply(const absl::Status& status) { Finish(rpc::ToGrpcStatus(status)); }

  void OnCancel() override { opts_.StartCancel(); }
  void OnDone() override { delete this; }

 private:
  CallOptions opts_;
};

}  // namespace

GrpcWorkerService::GrpcWorkerService(WorkerInterface* worker,
                                     std::string job_token)
    : worker_(worker), job_token_(std::move(job_token)) {}

// The token is checked before the worker sees anything (§1.13). The worker
// calls `done` exactly once, and the reactor is finished from there.
#define COHORT_RUNTIME_GRPC_SERVICE_IMPL_(Name)                             \
  grpc::ServerUnaryReactor* GrpcWorkerService::Name(                        \
      grpc::CallbackServerContext* context, const Name##Request* request,   \
      Name##Response* response) {                                           \
    auto* reactor = new WorkerCallReactor(*context);                        \
    absl::Status auth = rpc::CheckJobToken(*context, job_token_);           \
    if (!auth.ok()) {                                                       \
      reactor->Reply(auth);                                                 \
      return reactor;                                                       \
    }                                                                       \
    worker_->Name##Async(                                                   \
        reactor->opts(), request, response,                                 \
        [reactor](const absl::Status& status) { reactor->Reply(status); }); \
    return reactor;                                                         \
  }
COHORT_WORKER_RPCS(COHORT_RUNTIME_GRPC_SERVICE_IMPL_)
#undef COHORT_RUNTIME_GRPC_SERVICE_IMPL_

}  // namespace cohort::runtime
