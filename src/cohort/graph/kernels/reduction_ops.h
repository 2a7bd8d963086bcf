// Reductions and matrix multiplication: Sum, Mean, Max over axes, MatMul.
//
// Op semantics (TensorFlow's):
//  - Sum/Mean/Max(input: T, reduction_indices: int32, keep_dims: bool =
//    false): reduce over the listed axes (a scalar or a vector; negative
//    axes count from the end; repeats are ignored; an empty list reduces
//    nothing). keep_dims keeps reduced axes with size 1. Mean of integers
//    truncates. InvalidArgument naming the axis when it is out of range.
//    T in {float, double, int32, int64}.
//  - MatMul(a: T, b: T, transpose_a: bool = false, transpose_b: bool =
//    false): product = op(a) * op(b) for rank-2 inputs; InvalidArgument
//    "MatMul: inner dimensions do not match: a is [2,3] (transpose_a=false),
//    b is [4,5] (transpose_b=false)". Runs as an Eigen tensor contraction on
//    the device's multithreaded Eigen device. T in {float, double, int32,
//    int64}.
//
// Thread safety: kernels are stateless; wrappers build into a Scope.
#ifndef COHORT_GRAPH_KERNELS_REDUCTION_OPS_H_
#define COHORT_GRAPH_KERNELS_REDUCTION_OPS_H_

#include "absl/status/status.h"
#include "cohort/graph/builder.h"
#include "cohort/graph/kernel.h"
#include "cohort/graph/op_registry.h"

namespace cohort {

absl::Status RegisterReductionOps(OpRegistry* registry);
absl::Status RegisterReductionKernels(KernelRegistry* registry);

namespace ops {

// `axes`: an int32 scalar or vector, e.g. 1 or Tensor::Vec<int32_t>({0, 1}).
Output Sum(const Scope& scope, Input input, Input axes, bool keep_dims = false);
Output Mean(const Scope& scope, Input input, Input axes,
            bool keep_dims = false);
Output Max(const Scope& scope, Input input, Input axes, bool keep_dims = false);
Output MatMul(const Scope& scope, Input a, Input b, bool transpose_a = false,
              bool transpose_b = false);

}  // namespace ops
}  // namespace cohort

#endif  // COHORT_GRAPH_KERNELS_REDUCTION_OPS_H_
