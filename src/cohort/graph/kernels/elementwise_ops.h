// Elementwise math ops (besides Add, which lives in math_ops.h): binary ops
// with NumPy broadcasting, unary ops, AddN, comparisons, Select and Cast.
//
// Op semantics (TensorFlow's):
//  - Sub, Mul, Div, Maximum, Minimum: z = f(x, y) with NumPy broadcasting;
//    T in {float, double, int32, int64}. Integer Div truncates toward zero
//    and fails with InvalidArgument "integer division by zero" when y has a
//    zero. Pow: T in {float, double}.
//  - Neg, Square: T in {float, double, int32, int64}; Sqrt, Exp, Log:
//    T in {float, double} (Sqrt/Log of negatives give NaN as in NumPy).
//  - AddN: inputs N * T of one shape (no broadcasting); InvalidArgument
//    naming the offending input's index and shape otherwise.
//  - Greater, Less, Equal: bool output, NumPy broadcasting.
//  - Select(condition: bool, t: T, e: T): t and e have one shape; the
//    condition has that shape or is a scalar. T may be any numeric type or
//    bool.
//  - Cast(x: SrcT) -> DstT: value conversion between float, double, int32,
//    int64 and bool (non-zero -> true; true -> 1). Float -> int truncates.
//
// Incompatible shapes: InvalidArgument at graph build when shapes are known
// ("node 'y' (op Mul): incompatible shapes for broadcasting: [2,3] and [4]"),
// otherwise at run time with the same message prefixed by the node.
//
// Thread safety: kernels are stateless; wrappers build into a Scope
// (single-threaded, see builder.h).
#ifndef COHORT_GRAPH_KERNELS_ELEMENTWISE_OPS_H_
#define COHORT_GRAPH_KERNELS_ELEMENTWISE_OPS_H_

#include <vector>

#include "absl/status/status.h"
#include "cohort/graph/builder.h"
#include "cohort/graph/kernel.h"
#include "cohort/graph/op_registry.h"

namespace cohort {

absl::Status RegisterElementwiseOps(OpRegistry* registry);
absl::Status RegisterElementwiseKernels(KernelRegistry* registry);

namespace ops {

Output Sub(const Scope& scope, Input x, Input y);
Output Mul(const Scope& scope, Input x, Input y);
Output Div(const Scope& scope, Input x, Input y);
Output Pow(const Scope& scope, Input x, Input y);
Output Maximum(const Scope& scope, Input x, Input y);
Output Minimum(const Scope& scope, Input x, Input y);
Output Greater(const Scope& scope, Input x, Input y);
Output Less(const Scope& scope, Input x, Input y);
Output Equal(const Scope& scope, Input x, Input y);
Output Neg(const Scope& scope, Input x);
Output Square(const Scope& scope, Input x);
Output Sqrt(const Scope& scope, Input x);
Output Exp(const Scope& scope, Input x);
Output Log(const Scope& scope, Input x);
Output AddN(const Scope& scope, const std::vector<Output>& inputs);
Output Select(const Scope& scope, Input condition, Input t, Input e);
Output Cast(const Scope& scope, Input x, DataType dst_type);

}  // namespace ops
}  // namespace cohort

#endif  // COHORT_GRAPH_KERNELS_ELEMENTWISE_OPS_H_
