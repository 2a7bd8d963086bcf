// GrpcMasterService: serves a Master over gRPC (MasterService in
// master.proto) for GrpcSession and `cohort run`.
//
// Every call checks the job token first (Unauthenticated, nothing done).
// Master calls block (discovery, steps), so each runs on a pool thread,
// never on a gRPC thread; at most kMaxCallsInFlight run at once and
// more are refused with ResourceExhausted (calls that release resources,
// CloseSession, Reset and ReleaseCallable, are admitted beyond it). A client
// that cancels its call (or whose deadline passes) cancels the step it was
// running.
//
// Thread safety: thread-safe. Shutdown() must run before the grpc::Server
// is destroyed: it refuses new calls and waits for running ones (the
// Master must have been stopped first so that they end).
#ifndef COHORT_RUNTIME_GRPC_MASTER_SERVICE_H_
#define COHORT_RUNTIME_GRPC_MASTER_SERVICE_H_

#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "cohort/master.grpc.pb.h"
#include "cohort/runtime/master.h"
#include "cohort/runtime/worker_thread_pool.h"

namespace cohort::runtime {

#define COHORT_MASTER_RPCS(X) \
  X(CreateSession)            \
  X(ExtendSession)            \
  X(RunStep)                  \
  X(CloseSession)             \
  X(ListDevices)              \
  X(Reset)                    \
  X(MakeCallable)             \
  X(RunCallable)              \
  X(ReleaseCallable)

class GrpcMasterService final : public MasterService::CallbackService {
 public:
  static constexpr int kMaxCallsInFlight = 1024;

  // `master` is not owned. An empty `job_token` accepts every caller.
  GrpcMasterService(Master* master, std::string job_token);
  ~GrpcMasterService() override;  // Shutdown()

  void Shutdown();

#define COHORT_RUNTIME_GRPC_MASTER_METHOD_(Name)                       \
  grpc::ServerUnaryReactor* Name(grpc::CallbackServerContext* context, \
                                 const Name##Request* request,         \
                                 Name##Response* response) override;
  COHORT_MASTER_RPCS(COHORT_RUNTIME_GRPC_MASTER_METHOD_)
#undef COHORT_RUNTIME_GRPC_MASTER_METHOD_

 private:
  class Call;

  // Admits a call (false when shut down or, unless `control`, too many
  // run).
  bool Enter(bool control);
  void Leave();

  Master* const master_;
  const std::string job_token_;

  StepThreadPool pool_;  // Runs the calls (they block).

  absl::Mutex mu_;
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
  int in_flight_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace cohort::runtime

#endif  // COHORT_RUNTIME_GRPC_MASTER_SERVICE_H_
