#include "cohort/graph/kernels/math_ops.h"

#include "cohort/base/status.h"
#include "cohort/graph/kernels/cwise_ops.h"

namespace cohort {

absl::Status RegisterMathOps(OpRegistry* r) {
  COHORT_RETURN_IF_ERROR(
      r->Register(OpDefBuilder("Add")
                      .Input("x: T")
                      .Input("y: T")
                      .Output("z: T")
                      .Attr("T: {float, double, int32, int64}")
                      .SetShapeFn(shape_fns::BroadcastBinaryOp)));
  return absl::OkStatus();
}

namespace {

// Integer addition wraps instead of overflowing (cwise_ops.h).
template <typename T>
absl::Status RegisterAdd(KernelRegistry* r) {
  using Sum = WrappingOr<T, WrappingSum<T>, Eigen::internal::scalar_sum_op<T>>;
  return r->Register<BinaryCwiseOp<T, T, Sum>>(
      KernelDefBuilder("Add").TypeConstraint<T>("T"));
}

}  // namespace

absl::Status RegisterMathKernels(KernelRegistry* r) {
  COHORT_RETURN_IF_ERROR(RegisterAdd<float>(r));
  COHORT_RETURN_IF_ERROR(RegisterAdd<double>(r));
  COHORT_RETURN_IF_ERROR(RegisterAdd<int32_t>(r));
  COHORT_RETURN_IF_ERROR(RegisterAdd<int64_t>(r));
  return absl::OkStatus();
}

namespace ops {

Output Add(const Scope& scope, Input x, Input y) {
  Output xo = x.ToOutput(scope);
  Output yo = y.ToOutput(scope, xo.dtype());
  return BuildOp(scope, "Add", {xo, yo}).output(0);
}

}  // namespace ops
}  // namespace cohort
