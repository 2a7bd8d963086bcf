// TensorFlow's collective ops, as the multi-worker mirrored strategy emits
// them, over the process's collective groups (graph/collective.h):
//   CollectiveReduce(input) -> data     SUM (merge_op "Add"), then final_op
//                                        "Id" or "Div" (the mean)
//   CollectiveBcastSend(input) -> data  the root's side of a broadcast
//   CollectiveBcastRecv() -> data       every other member's side (`shape`)
//   CollectiveGather(input) -> data     every member's input, by rank,
//                                        along the first dimension
// Attrs as TensorFlow's: T, group_size, group_key, instance_key,
// communication_hint (ignored) and timeout_seconds (0: 10 minutes; every
// call has a deadline). Reduce also takes subdiv_offsets and wait_for,
// accepted and ignored. The group is found by group_key; its size must be
// group_size. Members must run the same instances in the same order (add
// control dependencies between collectives of one graph): a member that
// runs another instance fails every member with an error naming both.
//
// Errors: InvalidArgument for attrs cohort does not support (merge_op other
// than "Add", final_op other than "Id"/"Div", group_size that differs from
// the group's, types other than float/double for Reduce); FailedPrecondition
// when no group has the key; the group's errors otherwise.
#ifndef COHORT_GRAPH_KERNELS_COLLECTIVE_OPS_H_
#define COHORT_GRAPH_KERNELS_COLLECTIVE_OPS_H_

#include <string>

#include "absl/status/status.h"
#include "cohort/graph/builder.h"
#include "cohort/graph/kernel.h"
#include "cohort/graph/op_registry.h"

namespace cohort {

absl::Status RegisterCollectiveOps(OpRegistry* registry);
absl::Status RegisterCollectiveKernels(KernelRegistry* registry);

namespace ops {

// final_op "Div" gives the mean. communication_hint "ring": the group the
// runtime forms for this op's key uses the TCP ring even on one host.
Output CollectiveReduce(const Scope& scope, Input input, int64_t group_size,
                        int64_t group_key, int64_t instance_key,
                        const std::string& final_op = "Id",
                        float timeout_seconds = 0,
                        const std::string& communication_hint = "auto");
Output CollectiveBcastSend(const Scope& scope, Input input, int64_t group_size,
                           int64_t group_key, int64_t instance_key,
                           const TensorShape& shape);
Output CollectiveBcastRecv(const Scope& scope, DataType dtype,
                           int64_t group_size, int64_t group_key,
                           int64_t instance_key, const TensorShape& shape);
Output CollectiveGather(const Scope& scope, Input input, int64_t group_size,
                        int64_t group_key, int64_t instance_key,
                        const TensorShape& shape);

}  // namespace ops
}  // namespace cohort

#endif  // COHORT_GRAPH_KERNELS_COLLECTIVE_OPS_H_
