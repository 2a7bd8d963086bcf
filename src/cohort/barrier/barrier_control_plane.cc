#include "cohort/barrier/barrier_control_plane.h"

#include <utility>

#include "absl/strings/match.h"
#include "cohort/barrier/barrier_framed_handler.h"
#include "cohort/barrier/barrier_grpc_service.h"
#include "cohort/coord/framed_coordination.h"

namespace cohort::barrier {

absl::Status ServeBarriers(std::shared_ptr<BarrierCoordinator> coordinator,
                           coord::CoordinationServerOptions& options) {
  if (coordinator == nullptr) {
    return absl::InvalidArgumentError(
        "ServeBarriers: no barrier coordinator given");
  }
  for (const coord::FramedService& f : options.framed_services) {
    if (f.identity == kBarrierTcpIdentity) {
      return absl::InvalidArgumentError(
          "ServeBarriers: these coordination server options already serve a "
          "barrier coordinator; a job has one");
    }
  }
  // Each service keeps the coordinator alive (the deleter holds it): the
  // server may outlive the caller's reference, never the coordinator.
  BarrierCoordinator* raw = coordinator.get();
  options.grpc_services.push_back(std::shared_ptr<BarrierGrpcService>(
      new BarrierGrpcService(raw, options.security.job_token),
      [coordinator](BarrierGrpcService* s) { delete s; }));
  options.framed_services.push_back(coord::FramedService{
      kBarrierTcpIdentity,
      std::shared_ptr<BarrierFramedHandler>(
          new BarrierFramedHandler(raw),
          [coordinator](BarrierFramedHandler* h) { delete h; })});
  // Barriers are round trips: the framed path is the fast one (ignored with
  // TLS, where the tasks use gRPC).
  options.serve_framed = true;
  return absl::OkStatus();
}

BarrierEndpoints BarrierEndpointsOf(const coord::CoordinationServer& server) {
  BarrierEndpoints at;
  at.grpc = server.target();
  std::string framed = server.framed_target();
  if (absl::StartsWith(framed, coord::kFramedTargetPrefix)) {
    at.tcp = framed.substr(sizeof(coord::kFramedTargetPrefix) - 1);
  }
  return at;
}

}  // namespace cohort::barrier
