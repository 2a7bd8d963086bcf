// Reusable elementwise kernels: write a functor, get a kernel with NumPy
// broadcasting, scalar fast paths and multithreading for large tensors.
//
//   // A binary functor usable in Eigen's binaryExpr (vectorised if Eigen
//   // knows it, e.g. Eigen::internal::scalar_sum_op<T>):
//   r->Register<BinaryCwiseOp<float, float,
//   Eigen::internal::scalar_sum_op<float>>>(
//       KernelDefBuilder("Add").TypeConstraint<float>("T"));
//
// BinaryCwiseOp<T, OutT, F>: inputs 0 and 1 of dtype T, output 0 of dtype
// OutT (bool for comparisons), out = F(x, y) with broadcasting. Errors:
// InvalidArgument "incompatible shapes for broadcasting: [2,3] and [4]".
// UnaryCwiseOp<T, OutT, F>: out = F(x) via Eigen's unaryExpr.
//
// Tensors smaller than kParallelThreshold elements are computed inline on
// the calling thread (thread-pool dispatch would cost more than the work).
//
// Thread safety: kernels are stateless; Compute may run concurrently.
#ifndef COHORT_GRAPH_KERNELS_CWISE_OPS_H_
#define COHORT_GRAPH_KERNELS_CWISE_OPS_H_

#include <type_traits>

#include "absl/status/status.h"
#include "cohort/graph/device.h"
#include "cohort/graph/kernel.h"
#include "cohort/graph/kernels/bcast.h"
#include "cohort/graph/tensor.h"

namespace cohort {

inline constexpr int64_t kParallelThreshold = 32768;

// --- Integer arithmetic that cannot trap or be undefined --------------------
// Signed overflow is undefined behaviour in C++ (and INT_MIN / -1 raises
// SIGFPE on x86): a graph's int32/int64 values come from its author, so
// integer kernels compute in two's complement through the unsigned type and
// wrap, as TensorFlow's do in practice and NumPy's do. Floating-point types
// keep Eigen's vectorised functors (see WrappingOr below).

template <typename T>
using UnsignedOf = std::make_unsigned_t<T>;

template <typename T>
struct WrappingSum : Eigen::internal::binary_op_base<T, T> {
  using result_type = T;
  T operator()(const T& a, const T& b) const {
    return static_cast<T>(static_cast<UnsignedOf<T>>(a) +
                          static_cast<UnsignedOf<T>>(b));
  }
};
template <typename T>
struct WrappingDifference : Eigen::internal::binary_op_base<T, T> {
  using result_type = T;
  T operator()(const T& a, const T& b) const {
    return static_cast<T>(static_cast<UnsignedOf<T>>(a) -
                          static_cast<UnsignedOf<T>>(b));
  }
};
template <typename T>
struct WrappingProduct : Eigen::internal::binary_op_base<T, T> {
  using result_type = T;
  T operator()(const T& a, const T& b) const {
    return static_cast<T>(static_cast<UnsignedOf<T>>(a) *
                          static_cast<UnsignedOf<T>>(b));
  }
};
// Truncating division; the caller has refused zero divisors. The one
// quotient that overflows, MIN / -1, wraps to MIN (the division itself
// would trap).
template <typename T>
struct WrappingQuotient : Eigen::internal::binary_op_base<T, T> {
  using result_type = T;
  T operator()(const T& a, const T& b) const {
    if (b == -1) {
      return static_cast<T>(UnsignedOf<T>{0} - static_cast<UnsignedOf<T>>(a));
    }
    return a / b;
  }
};
template <typename T>
struct WrappingNegate {
  using result_type = T;
  T operator()(const T& a) const {
    return static_cast<T>(UnsignedOf<T>{0} - static_cast<UnsignedOf<T>>(a));
  }
};
template <typename T>
struct WrappingSquare {
  using result_type = T;
  T operator()(const T& a) const { return WrappingProduct<T>()(a, a); }
};

// `Wrapping` for integral T, `Eigen` (vectorised) otherwise.
template <typename T, typename Wrapping, typename Eigen>
using WrappingOr = std::conditional_t<std::is_integral_v<T>, Wrapping, Eigen>;

// Evaluates `out = expr` on the Eigen thread-pool device when `n` is large,
// inline otherwise.
template <typename Out, typename Expr>
void EvalMaybeParallel(OpKernelContext* ctx, int64_t n, Out out,
                       const Expr& expr) {
  if (n >= kParallelThreshold && ctx->device() != nullptr) {
    out.device(ctx->eigen_cpu_device()) = expr;
  } else {
    out = expr;
  }
}

// out = f(x, y) with broadcasting; `out` must already have
// bcast.output_shape(). Usable from kernels with more logic than
// BinaryCwiseOp.
template <typename T, typename OutT, typename F>
void BinaryBroadcastCompute(OpKernelContext* ctx, const Tensor& x,
                            const Tensor& y, const BCast& b, Tensor* out,
                            F f = F()) {
  const int64_t n = out->NumElements();
  if (n == 0) return;
  auto o = out->flat<OutT>();
  if (b.same_shape()) {
    EvalMaybeParallel(ctx, n, o, x.flat<T>().binaryExpr(y.flat<T>(), f));
    return;
  }
  if (y.NumElements() == 1) {
    EvalMaybeParallel(
        ctx, n, o,
        x.flat<T>().unaryExpr(Eigen::internal::bind2nd_op<F>(y.flat<T>()(0))));
    return;
  }
  if (x.NumElements() == 1) {
    EvalMaybeParallel(
        ctx, n, o,
        y.flat<T>().unaryExpr(Eigen::internal::bind1st_op<F>(x.flat<T>()(0))));
    return;
  }
  const int rank = static_cast<int>(b.result_shape().size());
  auto run = [&](auto rank_tag) {
    constexpr int N = decltype(rank_tag)::value;
    Eigen::array<Eigen::DenseIndex, N> xb, yb;
    for (int i = 0; i < N; ++i) {
      xb[i] = b.x_bcast()[i];
      yb[i] = b.y_bcast()[i];
    }
    auto xr = x.shaped<T, N>(b.x_reshape());
    auto yr = y.shaped<T, N>(b.y_reshape());
    auto outr = out->shaped<OutT, N>(b.result_shape());
    EvalMaybeParallel(ctx, n, outr,
                      xr.broadcast(xb).binaryExpr(yr.broadcast(yb), f));
  };
  switch (rank) {
    case 1:
      run(std::integral_constant<int, 1>());
      break;
    case 2:
      run(std::integral_constant<int, 2>());
      break;
    case 3:
      run(std::integral_constant<int, 3>());
      break;
    case 4:
      run(std::integral_constant<int, 4>());
      break;
    case 5:
      run(std::integral_constant<int, 5>());
      break;
    default: {
      // Rare: more than 5 alternating broadcast patterns; elementwise loop.
      const auto& shape = b.output_shape();
      const int r = shape.dims();
      std::vector<int64_t> xs(r, 1), ys(r, 1);
      // Strides of x/y padded to rank r, 0 where broadcast.
      auto strides = [&](const Tensor& t, std::vector<int64_t>* s) {
        int64_t stride = 1;
        for (int i = r - 1, j = t.dims() - 1; i >= 0; --i, --j) {
          int64_t d = j >= 0 ? t.dim_size(j) : 1;
          (*s)[i] = d == 1 ? 0 : stride;
          stride *= d;
        }
      };
      strides(x, &xs);
      strides(y, &ys);
      const T* xd = x.data<T>();
      const T* yd = y.data<T>();
      OutT* od = out->data<OutT>();
      std::vector<int64_t> idx(r, 0);
      for (int64_t k = 0; k < n; ++k) {
        int64_t xi = 0, yi = 0;
        for (int i = 0; i < r; ++i) {
          xi += idx[i] * xs[i];
          yi += idx[i] * ys[i];
        }
        od[k] = f(xd[xi], yd[yi]);
        for (int i = r - 1; i >= 0; --i) {
          if (++idx[i] < shape.dim_size(i)) break;
          idx[i] = 0;
        }
      }
    }
  }
}

template <typename T, typename OutT, typename F>
class BinaryCwiseOp : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    const Tensor& y = ctx->input(1);
    BCast b(x.shape(), y.shape());
    COHORT_OP_REQUIRES(ctx, b.valid(),
                       absl::InvalidArgumentError(b.ErrorMessage()));
    Tensor* out = nullptr;
    COHORT_OP_REQUIRES_OK(ctx, ctx->allocate_output(0, b.output_shape(), &out));
    BinaryBroadcastCompute<T, OutT, F>(ctx, x, y, b, out);
  }
};

template <typename T, typename OutT, typename F>
class UnaryCwiseOp : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    Tensor* out = nullptr;
    COHORT_OP_REQUIRES_OK(ctx, ctx->allocate_output(0, x.shape(), &out));
    EvalMaybeParallel(ctx, x.NumElements(), out->flat<OutT>(),
                      x.flat<T>().unaryExpr(F()));
  }
};

}  // namespace cohort

#endif  // COHORT_GRAPH_KERNELS_CWISE_OPS_H_
