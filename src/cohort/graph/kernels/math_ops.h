// Math ops: Add (with NumPy broadcasting; the kernels engineer adds AddN,
// Sub, Mul, Div, ..., MatMul, reductions here).
//
// Add: inputs x: T, y: T; output z: T = x + y broadcast (NumPy rules);
// T in {float, double, int32, int64}. Incompatible shapes:
// InvalidArgument at graph build (when shapes are known) or at run time.
//
// Thread safety: the wrappers build into a Scope (single-threaded).
#ifndef COHORT_GRAPH_KERNELS_MATH_OPS_H_
#define COHORT_GRAPH_KERNELS_MATH_OPS_H_

#include "absl/status/status.h"
#include "cohort/graph/builder.h"
#include "cohort/graph/kernel.h"
#include "cohort/graph/op_registry.h"

namespace cohort {

absl::Status RegisterMathOps(OpRegistry* registry);
absl::Status RegisterMathKernels(KernelRegistry* registry);

namespace ops {

Output Add(const Scope& scope, Input x, Input y);

}  // namespace ops
}  // namespace cohort

#endif  // COHORT_GRAPH_KERNELS_MATH_OPS_H_
