// Tensors on the worker's wire (RunGraph feeds and fetches, RecvTensor):
// TensorProto <-> Tensor with every size checked against what the message
// actually carries (docs/runtime.md).
//
// Decode rules, each an error naming `what` ("feed 'x'", "RecvTensor
// '<key>'"):
//  - dtype not a known DataType, or DT_INVALID: InvalidArgument
//    `<what>: unknown dtype <n>`;
//  - unknown rank, a negative dimension, or an element count that overflows
//    int64: InvalidArgument naming the dimension;
//  - the tensor's size in memory above `max_bytes` (default 2 GiB - 1, as
//    TensorFlow's protobuf limit): ResourceExhausted, before anything is
//    allocated;
//  - numeric/bool `tensor_content` whose length is not elements x dtype
//    size: InvalidArgument `<what>: tensor_content has <n> bytes but shape
//    [..] of <dtype> needs <m>`;
//  - the remaining rules of Tensor::FromProto (value counts, broadcast cap).
// Encode refuses (ResourceExhausted) a tensor above `max_bytes` instead of
// building a message gRPC would reject later.
//
// Thread safety: pure functions.
#ifndef COHORT_RUNTIME_WORKER_TENSOR_CODING_H_
#define COHORT_RUNTIME_WORKER_TENSOR_CODING_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "cohort/graph.pb.h"
#include "cohort/graph/tensor.h"

namespace cohort::runtime {

inline constexpr int64_t kMaxWireTensorBytes = (int64_t{1} << 31) - 1;

absl::StatusOr<Tensor> DecodeWireTensor(
    const TensorProto& proto, absl::string_view what,
    int64_t max_bytes = kMaxWireTensorBytes);

absl::Status EncodeWireTensor(const Tensor& tensor, absl::string_view what,
                              TensorProto* proto,
                              int64_t max_bytes = kMaxWireTensorBytes);

}  // namespace cohort::runtime

#endif  // COHORT_RUNTIME_WORKER_TENSOR_CODING_H_
