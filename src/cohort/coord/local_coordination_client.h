// LocalCoordinationClient: a CoordinationClient that calls a service in the
// same process directly (no network), through the same CoordinationRpcHandler
// as the gRPC service. Used by the in-process test harness and by a task
// that hosts the service itself.
//
// CallOptions::timeout is not enforced here (blocking requests carry their
// own timeout, which the service enforces); cancellation of a parked
// PollForError is honoured by answering it Cancelled locally.
//
// Thread safety: thread-safe.
#ifndef COHORT_COORD_LOCAL_COORDINATION_CLIENT_H_
#define COHORT_COORD_LOCAL_COORDINATION_CLIENT_H_

#include <memory>

#include "cohort/coord/coordination_client.h"
#include "cohort/coord/coordination_rpc_handler.h"

namespace cohort::coord {

class LocalCoordinationClient : public CoordinationClient {
 public:
  // `service` is not owned and must outlive every call's completion.
  explicit LocalCoordinationClient(CoordinationService* service);

#define COHORT_COORD_LOCAL_METHOD_(Name)                                   \
  void Name##Async(const Name##Request& request, Name##Response* response, \
                   const CallOptions& options, StatusCallback done) override;
  COHORT_COORDINATION_RPCS(COHORT_COORD_LOCAL_METHOD_)
#undef COHORT_COORD_LOCAL_METHOD_

 private:
  CoordinationRpcHandler handler_;
};

}  // namespace cohort::coord

#endif  // COHORT_COORD_LOCAL_COORDINATION_CLIENT_H_
