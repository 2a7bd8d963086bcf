// Array ops: Const, Placeholder, Identity, NoOp (and, from the kernels
// engineer, Reshape, Shape, Fill, ZerosLike, OnesLike, Concat, Slice, ...).
//
// Op semantics (TensorFlow's):
//  - Const: attrs value: tensor, dtype: type; output the value.
//  - Placeholder: attrs dtype: type, shape: shape = <unknown>; must be fed.
//    Running it unfed fails with InvalidArgument "you must feed a value for
//    placeholder 'x' (float, shape [?,3])".
//  - Identity: output = input (shares the buffer).
//  - NoOp: no inputs or outputs; used as a target that groups control deps.
//
// Thread safety: the wrappers build into a Scope (single-threaded).
#ifndef COHORT_GRAPH_KERNELS_ARRAY_OPS_H_
#define COHORT_GRAPH_KERNELS_ARRAY_OPS_H_

#include "absl/status/status.h"
#include "cohort/graph/builder.h"
#include "cohort/graph/kernel.h"
#include "cohort/graph/op_registry.h"

namespace cohort {

absl::Status RegisterArrayOps(OpRegistry* registry);
absl::Status RegisterArrayKernels(KernelRegistry* registry);

namespace ops {

Output Const(const Scope& scope, const Tensor& value);
// Const from a literal: Const(s, 1.0f), Const(s, {1.f, 2.f}).
Output Const(const Scope& scope, const Input& value);
Output Placeholder(const Scope& scope, DataType dtype,
                   const PartialTensorShape& shape = PartialTensorShape());
Output Identity(const Scope& scope, Input x);
Operation NoOp(const Scope& scope);

}  // namespace ops
}  // namespace cohort

#endif  // COHORT_GRAPH_KERNELS_ARRAY_OPS_H_
