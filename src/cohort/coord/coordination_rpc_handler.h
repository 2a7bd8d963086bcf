// CoordinationRpcHandler: maps the wire messages of coordination.proto onto
// a CoordinationService. Transport-agnostic: the gRPC service and the local
// client both call it, so both behave identically.
//
// Each method returns at once and calls `done` exactly once (possibly
// inline, possibly later from another thread) after filling `response`.
// Every non-OK status it passes to `done` carries the service-error payload
// (IsServiceError), so clients can tell it from a transport failure.
//
// Thread safety: thread-safe.
#ifndef COHORT_COORD_COORDINATION_RPC_HANDLER_H_
#define COHORT_COORD_COORDINATION_RPC_HANDLER_H_

#include "cohort/coord/coordination_client.h"
#include "cohort/coord/coordination_service.h"
#include "cohort/coordination.pb.h"

namespace cohort::coord {

TaskId FromProto(const CoordinatedTask& task);
CoordinatedTask ToProto(const TaskId& task);
void ToProto(const TaskStateSnapshot& snapshot, TaskStateInfo* info);
// What GetJobStatus answers for `status`.
void ToProto(const JobStatus& status, GetJobStatusResponse* response);

class CoordinationRpcHandler {
 public:
  // `service` is not owned and must outlive the handler.
  explicit CoordinationRpcHandler(CoordinationService* service);

#define COHORT_COORD_HANDLER_METHOD_(Name)                          \
  void Name(const Name##Request& request, Name##Response* response, \
            StatusCallback done);
  COHORT_COORDINATION_RPCS(COHORT_COORD_HANDLER_METHOD_)
#undef COHORT_COORD_HANDLER_METHOD_

 private:
  // Adds the service-error payload to statuses that lack it.
  absl::Status Mark(absl::Status status) const;
  absl::Time DeadlineFromMs(int64_t timeout_ms) const;

  CoordinationService* const service_;
  Env* const env_;
};

}  // namespace cohort::coord

#endif  // COHORT_COORD_COORDINATION_RPC_HANDLER_H_
