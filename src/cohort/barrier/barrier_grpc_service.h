// BarrierGrpcService: the gRPC face of a BarrierCoordinator (proto
// cohort.BarrierCoordinatorService). It only converts: each Sync RPC becomes
// one BarrierCoordinator::Sync whose reactor stays parked in the coordinator
// until the sync completes, fails or times out. A cancelled RPC (the task
// died or cancelled its call) withdraws its request from the sync. A call
// without the job token is answered Unauthenticated and never reaches the
// coordinator.
//
// A job serves it on its coordination server, beside the coordination
// service (barrier_control_plane.h, ServeBarriers, which registers it with
// the server's job token); there is no barrier gRPC server of its own.
//
// Thread safety: thread-safe; the coordinator must outlive the service, and
// the service the server that registers it.
#ifndef COHORT_BARRIER_BARRIER_GRPC_SERVICE_H_
#define COHORT_BARRIER_BARRIER_GRPC_SERVICE_H_

#include <string>
#include <utility>

#include "cohort/barrier.grpc.pb.h"
#include "cohort/barrier/barrier_coordinator.h"
#include "grpcpp/grpcpp.h"

namespace cohort::barrier {

class BarrierGrpcService final
    : public cohort::BarrierCoordinatorService::CallbackService {
 public:
  // An empty `job_token` accepts every caller.
  BarrierGrpcService(BarrierCoordinator* coordinator, std::string job_token)
      : coordinator_(coordinator), job_token_(std::move(job_token)) {}

  grpc::ServerUnaryReactor* Sync(
      grpc::CallbackServerContext* context,
      const cohort::BarrierSyncRequest* request,
      cohort::BarrierSyncResponse* response) override;

 private:
  BarrierCoordinator* const coordinator_;
  const std::string job_token_;
};

}  // namespace cohort::barrier

#endif  // COHORT_BARRIER_BARRIER_GRPC_SERVICE_H_
