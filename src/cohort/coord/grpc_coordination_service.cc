#include "cohort/coord/grpc_coordination_service.h"

#include "cohort/rpc/status_conversion.h"
#include "cohort/rpc/transport.h"

namespace cohort::coord {

GrpcCoordinationService::GrpcCoordinationService(CoordinationService* service,
                                                 std::string job_token)
    : handler_(service), job_token_(std::move(job_token)) {}

#define COHORT_COORD_GRPC_SERVICE_IMPL_(Name)                             \
  grpc::ServerUnaryReactor* GrpcCoordinationService::Name(                \
      grpc::CallbackServerContext* context, const Name##Request* request, \
      Name##Response* response) {                                         \
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();        \
    absl::Status auth = rpc::CheckJobToken(*context, job_token_);         \
    if (!auth.ok()) {                                                     \
      reactor->Finish(rpc::ToGrpcStatus(auth));                           \
      return reactor;                                                     \
    }                                                                     \
    handler_.Name(*request, response, [reactor](absl::Status status) {    \
      reactor->Finish(rpc::ToGrpcStatus(status));                         \
    });                                                                   \
    return reactor;                                                       \
  }
COHORT_COORDINATION_RPCS(COHORT_COORD_GRPC_SERVICE_IMPL_)
#undef COHORT_COORD_GRPC_SERVICE_IMPL_

}  // namespace cohort::coord
