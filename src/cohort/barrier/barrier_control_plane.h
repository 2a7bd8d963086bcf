// Barriers on the job's coordination server: the launcher's one control
// plane. ServeBarriers adds a BarrierCoordinator's gRPC service and framed
// handler to a CoordinationServer's options, so that one server (one gRPC
// port, one framed port, one job token) serves both the coordination service
// and Spark-style barriers, and no barrier server of its own is started.
//
//   auto coordinator =
//       std::make_shared<BarrierCoordinator>(env, options.barrier_timeout);
//   coord::CoordinationServerOptions co;
//   co.address = absl::StrCat(host, ":0");
//   co.security = security;               // before ServeBarriers: its token
//   co.service.jobs = ...;
//   COHORT_RETURN_IF_ERROR(ServeBarriers(coordinator, co));
//   COHORT_ASSIGN_OR_RETURN(auto server,
//                           coord::CoordinationServer::Start(std::move(co)));
//   BarrierEndpoints at = BarrierEndpointsOf(*server);
//   // tasks: COHORT_BARRIER_ADDRESS=at.grpc,
//   //        COHORT_BARRIER_TCP_ADDRESS=at.tcp (empty with TLS: gRPC only)
//   ...
//   coordinator->CloseGang(...);          // before Stop: see below
//   server->Stop();
//
// The server holds the services, and they hold the coordinator, so the
// coordinator lives as long as either the caller or the server needs it.
// Close (or clear) the open gangs before stopping the server: a sync still
// parked on gRPC then ends at once, instead of at the server's one-second
// shutdown deadline.
//
// Clients are unchanged: BarrierTaskContext dials the framed address with
// kBarrierTcpIdentity, which routes its connection to the barrier handler
// (rpc/framed_server.h, "Several services, one port"); gRPC routes by
// service name. A wrong token is refused on both, before the coordinator
// sees anything.
//
// Thread safety: thread-safe.
#ifndef COHORT_BARRIER_BARRIER_CONTROL_PLANE_H_
#define COHORT_BARRIER_BARRIER_CONTROL_PLANE_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "cohort/barrier/barrier_coordinator.h"
#include "cohort/coord/coordination_server.h"

namespace cohort::barrier {

// Adds `coordinator`'s services to `options` (gRPC, and the framed handler,
// turning serve_framed on), checking options.security's job token. Call
// after options.security is final. InvalidArgument when `coordinator` is
// null or `options` already serves a barrier coordinator.
absl::Status ServeBarriers(std::shared_ptr<BarrierCoordinator> coordinator,
                           coord::CoordinationServerOptions& options);

// Where the tasks reach the barriers of a server started with ServeBarriers.
struct BarrierEndpoints {
  std::string grpc;  // "host:port" (COHORT_BARRIER_ADDRESS)
  // "host:port" of the framed path (COHORT_BARRIER_TCP_ADDRESS); empty when
  // the server has none (TLS): the tasks then use gRPC.
  std::string tcp;
};
BarrierEndpoints BarrierEndpointsOf(const coord::CoordinationServer& server);

}  // namespace cohort::barrier

#endif  // COHORT_BARRIER_BARRIER_CONTROL_PLANE_H_
