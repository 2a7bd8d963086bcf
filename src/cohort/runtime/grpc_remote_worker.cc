#include "cohort/runtime/grpc_remote_worker.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "cohort/rpc/status_conversion.h"
#include "cohort/runtime/worker_errors.h"

namespace cohort::runtime {

GrpcRemoteWorker::GrpcRemoteWorker(std::string task, std::string address,
                                   std::shared_ptr<grpc::Channel> channel,
                                   rpc::TransportSecurity security)
    : target_(std::make_shared<const Target>(
          Target{std::move(task), std::move(address)})),
      stub_(WorkerService::NewStub(channel)),
      security_(std::move(security)) {}

std::shared_ptr<GrpcRemoteWorker::Call> GrpcRemoteWorker::StartCall(
    CallOptions* opts) const {
  auto call = std::make_shared<Call>();
  rpc::AttachJobToken(&call->context, security_);
  if (opts == nullptr) return call;
  const absl::Time deadline = opts->deadline();
  if (deadline != absl::InfiniteFuture()) {
    call->context.set_deadline(absl::ToChronoTime(deadline));
  }
  // Weak: the cancel callback may outlive the call (StartCancel can be
  // running while the call completes). TryCancel before the call starts is
  // fine: gRPC cancels it as soon as it starts.
  std::weak_ptr<Call> weak = call;
  opts->SetCancelCallback([weak] {
    if (auto live = weak.lock()) {
      live->cancelling.store(std::this_thread::get_id());
      live->context.TryCancel();
      live->cancelling.store(std::thread::id());
    }
  });
  return call;
}

absl::Status GrpcRemoteWorker::Convert(const grpc::Status& grpc_status,
                                       const Target& target, const char* rpc) {
  absl::Status s = rpc::FromGrpcStatus(grpc_status);
  if (s.ok()) return s;
  // The remote worker answered: pass its status on untouched.
  if (rpc::AnsweredByService(grpc_status)) return s;
  const std::string where =
      absl::StrCat(rpc, " to ", target.task, " (", target.address, ")");
  switch (s.code()) {
    case absl::StatusCode::kCancelled:
      return absl::CancelledError(
          absl::StrCat(where, " was cancelled: ", s.message()));
    case absl::StatusCode::kDeadlineExceeded:
      return absl::DeadlineExceededError(absl::StrCat(
          where, " did not finish before its deadline: ", s.message()));
    case absl::StatusCode::kResourceExhausted:
    case absl::StatusCode::kUnimplemented:
    case absl::StatusCode::kUnauthenticated:
    case absl::StatusCode::kPermissionDenied:
    case absl::StatusCode::kInvalidArgument:
      // Retrying would not help; say so through the code.
      return absl::Status(
          s.code(), absl::StrCat(where, " failed in transport: ", s.message()));
    default:
      // Connection refused, reset, DNS, TLS handshake, and the Unknown or
      // Internal gRPC reports for a peer that died mid-call: the task is
      // not there now. Unavailable = retry or recover (DESIGN.md).
      return absl::UnavailableError(absl::StrCat(
          target.task, " (", target.address, ") is unavailable: ", s.message(),
          ". Additional GRPC error information from remote target ",
          target.task));
  }
}

// The response and request belong to the caller until `done`; the call's
// context is released before `done` runs, not when gRPC frees the callback.
#define COHORT_RUNTIME_GRPC_REMOTE_IMPL_(Name)                              \
  void GrpcRemoteWorker::Name##Async(                                       \
      CallOptions* opts, const Name##Request* request,                      \
      Name##Response* response, StatusCallback done) {                      \
    std::shared_ptr<Call> call = StartCall(opts);                           \
    grpc::ClientContext* context = &call->context;                          \
    stub_->async()->Name(                                                   \
        context, request, response,                                         \
        [call = std::move(call), opts, target = target_,                    \
         done = std::move(done)](grpc::Status status) mutable {             \
          /* Wait for a cancel callback on another thread, so the */        \
          /* caller may free opts after done; not when gRPC completes */    \
          /* the call inline in that callback: it would wait for itself. */ \
          if (opts != nullptr &&                                            \
              call->cancelling.load() != std::this_thread::get_id()) {      \
            opts->ClearCancelCallback();                                    \
          }                                                                 \
          call.reset();                                                     \
          done(Convert(status, *target, #Name));                            \
        });                                                                 \
  }
COHORT_WORKER_RPCS(COHORT_RUNTIME_GRPC_REMOTE_IMPL_)
#undef COHORT_RUNTIME_GRPC_REMOTE_IMPL_

}  // namespace cohort::runtime
