#include "cohort/runtime/grpc_master_service.h"

#include <functional>
#include <type_traits>
#include <utility>

#include "cohort/rpc/status_conversion.h"
#include "cohort/rpc/transport.h"

namespace cohort::runtime {

// One master call: a reactor whose work runs on its own thread. gRPC's
// OnCancel (client cancel, deadline, broken connection) cancels the work
// through CallOptions.
class GrpcMasterService::Call final : public grpc::ServerUnaryReactor {
 public:
  Call(GrpcMasterService* service,
       std::function<absl::Status(CallOptions*)> work)
      : service_(service), work_(std::move(work)) {}

  void Start(StepThreadPool* pool) {
    // Master calls block for as long as a step runs, and gRPC's callback
    // threads must never block: each call runs on a pool thread. The pool
    // grows rather than queue (a Close must not wait behind the steps it
    // would cancel) and keeps its threads, so a step costs no thread
    // creation (which, with its stack release, was 12% of a step's CPU).
    pool->Schedule([this] {
      absl::Status status = work_(&opts_);
      Finish(rpc::ToGrpcStatus(status));
    });
  }

  void OnCancel() override { opts_.StartCancel(); }

  void OnDone() override {
    GrpcMasterService* service = service_;
    delete this;
    service->Leave();
  }

 private:
  GrpcMasterService* const service_;
  std::function<absl::Status(CallOptions*)> work_;
  CallOptions opts_;
};

GrpcMasterService::GrpcMasterService(Master* master, std::string job_token)
    : master_(master), job_token_(std::move(job_token)) {}

GrpcMasterService::~GrpcMasterService() { Shutdown(); }

bool GrpcMasterService::Enter(bool control) {
  absl::MutexLock lock(&mu_);
  // Calls that release resources (CloseSession, Reset, ReleaseCallable) are
  // let in above the cap: a client holding every slot with blocked steps
  // must not be able to prevent their own cleanup.
  if (shutdown_ || (!control && in_flight_ >= kMaxCallsInFlight)) {
    return false;
  }
  ++in_flight_;
  return true;
}

void GrpcMasterService::Leave() {
  absl::MutexLock lock(&mu_);
  --in_flight_;
}

void GrpcMasterService::Shutdown() {
  absl::MutexLock lock(&mu_);
  shutdown_ = true;
  mu_.Await(absl::Condition(
      +[](int* in_flight) { return *in_flight == 0; }, &in_flight_));
}

namespace {

template <typename Request>
bool IsControl(const Request*) {
  return std::is_same_v<Request, CloseSessionRequest> ||
         std::is_same_v<Request, ResetRequest> ||
         std::is_same_v<Request, ReleaseCallableRequest>;
}

}  // namespace

#define COHORT_RUNTIME_GRPC_MASTER_IMPL_(Name)                                \
  grpc::ServerUnaryReactor* GrpcMasterService::Name(                          \
      grpc::CallbackServerContext* context, const Name##Request* request,     \
      Name##Response* response) {                                             \
    absl::Status auth = rpc::CheckJobToken(*context, job_token_);             \
    if (!auth.ok() || !Enter(IsControl(request))) {                           \
      grpc::ServerUnaryReactor* reactor = context->DefaultReactor();          \
      reactor->Finish(rpc::ToGrpcStatus(                                      \
          !auth.ok() ? auth                                                   \
                     : absl::ResourceExhaustedError(                          \
                           "master: too many calls in flight, or the "        \
                           "server is stopping; retry later")));              \
      return reactor;                                                         \
    }                                                                         \
    Master* master = master_;                                                 \
    auto* call = new Call(this, [master, request, response](CallOptions* o) { \
      return InvokeMaster(master, o, *request, response);                     \
    });                                                                       \
    call->Start(&pool_);                                                      \
    return call;                                                              \
  }
COHORT_MASTER_RPCS(COHORT_RUNTIME_GRPC_MASTER_IMPL_)
#undef COHORT_RUNTIME_GRPC_MASTER_IMPL_

}  // namespace cohort::runtime
