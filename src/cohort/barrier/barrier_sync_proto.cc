#include "cohort/barrier/barrier_sync_proto.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace cohort::barrier {

absl::StatusOr<SyncRequest> SyncRequestFromProto(
    cohort::BarrierSyncRequest proto) {
  SyncRequest request;
  switch (proto.method()) {
    case cohort::ALL_GATHER:
      request.method = SyncMethod::kAllGather;
      break;
    case cohort::BARRIER:
      request.method = SyncMethod::kBarrier;
      break;
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          "barrier sync request from partition ", proto.partition_id(),
          " has no method (BARRIER or ALL_GATHER)"));
  }
  request.num_tasks = proto.num_tasks();
  request.stage_id = proto.stage_id();
  request.stage_attempt = proto.stage_attempt();
  request.task_attempt_id = proto.task_attempt_id();
  request.barrier_epoch = proto.barrier_epoch();
  request.partition_id = proto.partition_id();
  request.message = std::move(*proto.mutable_message());
  return request;
}

}  // namespace cohort::barrier
