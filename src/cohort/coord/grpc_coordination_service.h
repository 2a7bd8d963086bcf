// GrpcCoordinationService: serves a CoordinationService over gRPC with the
// callback API.
//
// Handlers are thin: check the job token, hand the request to the
// CoordinationRpcHandler and finish the reactor from the completion
// callback. A blocking call (barrier, blocking get, watch, PollForError)
// parks its reactor inside the service state and is finished later by
// whichever thread completes it; no reaction ever blocks, and the service
// never finishes an RPC while holding its lock.
//
// Before shutting the grpc::Server down, Stop() the CoordinationService so
// every parked reactor finishes (otherwise Server::Shutdown waits for them).
//
// Thread safety: thread-safe.
#ifndef COHORT_COORD_GRPC_COORDINATION_SERVICE_H_
#define COHORT_COORD_GRPC_COORDINATION_SERVICE_H_

#include <string>

#include "cohort/coord/coordination_rpc_handler.h"
#include "cohort/coordination.grpc.pb.h"

namespace cohort::coord {

class GrpcCoordinationService final : public CoordinationRpc::CallbackService {
 public:
  // `service` is not owned. An empty `job_token` accepts every caller.
  GrpcCoordinationService(CoordinationService* service, std::string job_token);

#define COHORT_COORD_GRPC_SERVICE_METHOD_(Name)                        \
  grpc::ServerUnaryReactor* Name(grpc::CallbackServerContext* context, \
                                 const Name##Request* request,         \
                                 Name##Response* response) override;
  COHORT_COORDINATION_RPCS(COHORT_COORD_GRPC_SERVICE_METHOD_)
#undef COHORT_COORD_GRPC_SERVICE_METHOD_

 private:
  CoordinationRpcHandler handler_;
  const std::string job_token_;
};

}  // namespace cohort::coord

#endif  // COHORT_COORD_GRPC_COORDINATION_SERVICE_H_
