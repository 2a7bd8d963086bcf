// Conversion of the wire form of a barrier sync (cohort.BarrierSyncRequest)
// into the coordinator's SyncRequest, shared by both transports (the gRPC
// service and the launcher's TCP server).
//
// Thread safety: stateless; thread-safe.
#ifndef COHORT_BARRIER_BARRIER_SYNC_PROTO_H_
#define COHORT_BARRIER_BARRIER_SYNC_PROTO_H_

#include "absl/status/statusor.h"
#include "cohort/barrier.pb.h"
#include "cohort/barrier/barrier_coordinator.h"

namespace cohort::barrier {

// Moves the fields of `proto` into a SyncRequest. InvalidArgument naming the
// partition when the method is neither BARRIER nor ALL_GATHER.
absl::StatusOr<SyncRequest> SyncRequestFromProto(
    cohort::BarrierSyncRequest proto);

}  // namespace cohort::barrier

#endif  // COHORT_BARRIER_BARRIER_SYNC_PROTO_H_
