#include "cohort/graph/kernels/math_ops.h"

#include <algorithm>

#include "cohort/base/status.h"
#include "cohort/graph/kernels/cwise_ops.h"
#include "cohort/graph/kernels/vector_loops.h"

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

// Float Add: a bias added to every row (x [..., n] + y [n], the layer's
// MatMul + bias) runs the vectorised row loop; every other shape takes the
// general broadcasting path.
class FloatAddOp : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    const Tensor& y = ctx->input(1);
    const bool bias_add = x.dims() >= 2 && y.dims() == 1 &&
                          y.dim_size(0) == x.dim_size(x.dims() - 1) &&
                          y.dim_size(0) > 0;
    Tensor* out = nullptr;
    if (!bias_add) {
      BCast b(x.shape(), y.shape());
      COHORT_OP_REQUIRES(ctx, b.valid(),
                         absl::InvalidArgumentError(b.ErrorMessage()));
      COHORT_OP_REQUIRES_OK(ctx,
                            ctx->allocate_output(0, b.output_shape(), &out));
      BinaryBroadcastCompute<float, float,
                             Eigen::internal::scalar_sum_op<float>>(ctx, x, y,
                                                                    b, out);
      return;
    }
    const int64_t cols = y.dim_size(0);
    const int64_t n = x.NumElements();
    const float* xd = x.data<float>();
    const float* yd = y.data<float>();
    // In place over x when x is this kernel's alone (x is empty after that;
    // y cannot be x: a [n] bias is not the [..., n] x).
    COHORT_OP_REQUIRES_OK(
        ctx, ctx->forward_input_or_allocate_output(0, 0, x.shape(), &out));
    float* od = out->data<float>();
    ParallelLoop(ctx, n, 12, [&](int64_t begin, int64_t end) {
      // Pieces of the flat index, cut into whole rows' column ranges.
      for (int64_t i = begin; i < end;) {
        const int64_t r = i / cols;
        const int64_t c = i % cols;
        const int64_t stop = std::min(end - r * cols, cols);
        vector_loops::AddRow(xd + r * cols, yd, od + r * cols, 1, cols, c,
                             stop);
        i = r * cols + stop;
      }
    });
  }
};

// Integer addition wraps instead of overflowing (cwise_ops.h).
template <typename T>
absl::Status RegisterAdd(KernelRegistry* r) {
  using Sum = WrappingOr<T, WrappingSum<T>, Eigen::internal::scalar_sum_op<T>>;
  return r->Register<BinaryCwiseOp<T, T, Sum>>(
      KernelDefBuilder("Add").TypeConstraint<T>("T"));
}

}  // namespace

absl::Status RegisterMathKernels(KernelRegistry* r) {
  COHORT_RETURN_IF_ERROR(r->Register<FloatAddOp>(
      KernelDefBuilder("Add").TypeConstraint<float>("T")));
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
