// Shape and array-manipulation ops: Reshape, Shape, Size, Fill, ZerosLike,
// OnesLike, Concat, Slice, and the helpers gradients build with
// (BroadcastGradientArgs, ReducedShape, ConcatOffset, SliceGrad).
//
// Op semantics (TensorFlow's; shapes, axes and offsets are int32 tensors):
//  - Reshape(tensor: T, shape: int32): same elements, new shape; one -1 in
//    `shape` is inferred. InvalidArgument "cannot reshape a tensor of 6
//    elements (shape [2,3]) into shape [4,2]" on a count mismatch. Shares
//    the input's buffer.
//  - Shape(input: T) -> out_type (int32 or int64): the dimensions.
//  - Size(input: T) -> int32 scalar: the element count.
//  - Fill(dims: int32, value: T): a tensor of shape `dims` filled with the
//    scalar `value`.
//  - ZerosLike(x: T), OnesLike(x: T): same shape, all 0 / all 1.
//  - ConcatV2(values: N * T, axis: int32): joins along `axis` (negative
//    counts from the end); all other dimensions must agree. TensorFlow's
//    name and input order (its legacy Concat, axis first, is not
//    registered); ops::Concat builds it.
//  - Slice(input: T, begin: int32, size: int32): the block starting at
//    `begin` of extent `size` (-1 = to the end of that dimension).
//    InvalidArgument naming the dimension when out of range.
//  - BroadcastGradientArgs(s0, s1) -> (r0, r1): the axes to sum each
//    operand's gradient over (see bcast.h).
//  - ReducedShape(input_shape, axes): input_shape with the axes set to 1
//    (the keep_dims shape of a reduction).
//  - ConcatOffset(axis, shapes: N * int32) -> N offsets: where each Concat
//    input starts in the output.
//  - SliceGrad(shape, begin, dy: T): zeros of `shape` with dy placed at
//    `begin` (the gradient of Slice).
//
// T for the data-moving ops is any numeric type or bool (Reshape, Shape,
// Size accept every type).
//
// Thread safety: kernels are stateless; wrappers build into a Scope.
#ifndef COHORT_GRAPH_KERNELS_SHAPE_OPS_H_
#define COHORT_GRAPH_KERNELS_SHAPE_OPS_H_

#include <vector>

#include "absl/status/status.h"
#include "cohort/graph/builder.h"
#include "cohort/graph/kernel.h"
#include "cohort/graph/op_registry.h"

namespace cohort {

absl::Status RegisterShapeOps(OpRegistry* registry);
absl::Status RegisterShapeKernels(KernelRegistry* registry);

namespace ops {

Output Reshape(const Scope& scope, Input tensor, Input shape);
Output Shape(const Scope& scope, Input input, DataType out_type = DT_INT32);
Output Size(const Scope& scope, Input input);
Output Fill(const Scope& scope, Input dims, Input value);
Output ZerosLike(const Scope& scope, Input x);
Output OnesLike(const Scope& scope, Input x);
Output Concat(const Scope& scope, const std::vector<Output>& values,
              Input axis);
Output Slice(const Scope& scope, Input input, Input begin, Input size);

// Gradient helpers.
struct BroadcastGradientArgsOutputs {
  Output r0, r1;
};
BroadcastGradientArgsOutputs BroadcastGradientArgs(const Scope& scope, Input s0,
                                                   Input s1);
Output ReducedShape(const Scope& scope, Input input_shape, Input axes);
std::vector<Output> ConcatOffset(const Scope& scope, Input axis,
                                 const std::vector<Output>& shapes);
Output SliceGrad(const Scope& scope, Input shape, Input begin, Input dy);

}  // namespace ops
}  // namespace cohort

#endif  // COHORT_GRAPH_KERNELS_SHAPE_OPS_H_
