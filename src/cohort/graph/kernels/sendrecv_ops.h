// Send and Recv: move a tensor between devices (and, with the distributed
// runtime, tasks) through the step's Rendezvous (rendezvous.h).
//
//  - Send(tensor: T; tensor_name, send_device, send_device_incarnation,
//    recv_device): leaves the tensor under the key
//    Rendezvous::CreateKey(send_device, incarnation, recv_device,
//    tensor_name, 0, 0). Never blocks.
//  - Recv(; tensor_type, same attrs) -> tensor: an async kernel that
//    completes when the matching Send ran (in this or another executor
//    sharing the rendezvous), or fails with the rendezvous' abort status
//    (Cancelled / DeadlineExceeded / the step's first error). A received
//    tensor of another dtype is InvalidArgument.
// Both fail with FailedPrecondition when the step has no rendezvous.
//
// Thread safety: the wrappers build into a Scope (single-threaded).
#ifndef COHORT_GRAPH_KERNELS_SENDRECV_OPS_H_
#define COHORT_GRAPH_KERNELS_SENDRECV_OPS_H_

#include <string>

#include "absl/status/status.h"
#include "cohort/graph/builder.h"
#include "cohort/graph/kernel.h"
#include "cohort/graph/op_registry.h"

namespace cohort {

absl::Status RegisterSendRecvOps(OpRegistry* registry);
absl::Status RegisterSendRecvKernels(KernelRegistry* registry);

namespace ops {

Operation Send(const Scope& scope, Input tensor, const std::string& tensor_name,
               const std::string& send_device, const std::string& recv_device,
               int64_t send_device_incarnation = 0);
Output Recv(const Scope& scope, DataType dtype, const std::string& tensor_name,
            const std::string& send_device, const std::string& recv_device,
            int64_t send_device_incarnation = 0);

}  // namespace ops
}  // namespace cohort

#endif  // COHORT_GRAPH_KERNELS_SENDRECV_OPS_H_
