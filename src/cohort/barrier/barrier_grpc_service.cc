#include "cohort/barrier/barrier_grpc_service.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "cohort/barrier/barrier_sync_proto.h"
#include "cohort/rpc/status_conversion.h"
#include "cohort/rpc/transport.h"

namespace cohort::barrier {
namespace {

// One parked Sync RPC. Finish() is called exactly once: by the coordinator's
// `done` (which it calls exactly once). OnCancel withdraws the request, which
// makes the coordinator call `done` with Cancelled when it was still pending.
class SyncReactor final : public grpc::ServerUnaryReactor {
 public:
  SyncReactor(BarrierCoordinator* coordinator,
              cohort::BarrierSyncResponse* response)
      : coordinator_(coordinator),
        response_(response),
        request_id_(coordinator->NewRequestId()) {}

  void Start(const cohort::BarrierSyncRequest& proto) {
    absl::StatusOr<SyncRequest> request = SyncRequestFromProto(proto);
    if (!request.ok()) {
      Finish(rpc::ToGrpcStatus(request.status()));
      return;
    }
    coordinator_->Sync(request_id_, *std::move(request),
                       [this](absl::StatusOr<SyncResult> result) {
                         Complete(std::move(result));
                       });
    bool cancelled;
    {
      absl::MutexLock lock(&mu_);
      started_ = true;
      cancelled = cancelled_;
    }
    // OnCancel ran before the request was parked: withdraw it now.
    if (cancelled) coordinator_->Cancel(request_id_);
  }

  void OnCancel() override {
    bool started;
    {
      absl::MutexLock lock(&mu_);
      cancelled_ = true;
      started = started_;
    }
    if (started) coordinator_->Cancel(request_id_);
  }

  void OnDone() override { delete this; }

 private:
  void Complete(absl::StatusOr<SyncResult> result) {
    if (!result.ok()) {
      Finish(rpc::ToGrpcStatus(result.status()));
      return;
    }
    auto* messages = response_->mutable_messages();
    messages->Reserve(static_cast<int>(result->size()));
    for (std::string& m : *result) messages->Add(std::move(m));
    Finish(grpc::Status::OK);
  }

  BarrierCoordinator* const coordinator_;
  cohort::BarrierSyncResponse* const response_;
  const uint64_t request_id_;
  absl::Mutex mu_;
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace

grpc::ServerUnaryReactor* BarrierGrpcService::Sync(
    grpc::CallbackServerContext* context,
    const cohort::BarrierSyncRequest* request,
    cohort::BarrierSyncResponse* response) {
  absl::Status auth = rpc::CheckJobToken(*context, job_token_);
  if (!auth.ok()) {
    // Refused before the coordinator sees anything of the request.
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(rpc::ToGrpcStatus(auth));
    return reactor;
  }
  auto* reactor = new SyncReactor(coordinator_, response);
  reactor->Start(*request);
  return reactor;
}

}  // namespace cohort::barrier
