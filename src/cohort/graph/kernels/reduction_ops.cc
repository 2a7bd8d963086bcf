#include "cohort/graph/kernels/reduction_ops.h"

#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cohort/base/status.h"
#include "cohort/graph/device.h"
#include "cohort/graph/kernels/blas.h"
#include "cohort/graph/kernels/cwise_ops.h"
#include "cohort/graph/kernels/vector_loops.h"

namespace cohort {
namespace {

// Normalised reduction axes of a rank-`rank` input: reduced[i] is true for
// reduced axes.
absl::Status ReductionAxes(const Tensor& axes, int rank,
                           std::vector<bool>* reduced) {
  if (axes.dtype() != DT_INT32 || axes.dims() > 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "reduction_indices must be an int32 scalar or vector, got ",
        DataTypeName(axes.dtype()), " ", axes.shape().DebugString()));
  }
  reduced->assign(rank, false);
  for (int32_t a : axes.span<int32_t>()) {
    if (a < -rank || a >= rank) {
      return absl::InvalidArgumentError(
          absl::StrCat("reduction axis ", a,
                       " is out of range for an input of rank ", rank));
    }
    (*reduced)[a < 0 ? a + rank : a] = true;
  }
  return absl::OkStatus();
}

enum class ReduceKind { kSum, kMean, kMax };

// Sum for integer types: wraps in two's complement (cwise_ops.h) where
// Eigen's SumReducer would overflow, which is undefined behaviour a graph's
// data could reach. No packet access: integer sums are rare.
template <typename T>
struct WrappingSumReducer {
  static constexpr bool PacketAccess = false;
  static constexpr bool IsStateful = false;
  void reduce(const T t, T* accum) const {
    *accum = WrappingSum<T>()(*accum, t);
  }
  T initialize() const { return T(0); }
  T finalize(const T accum) const { return accum; }
};

// Eigen's SumReducer for floating point, the wrapping one for integers.
template <typename T>
using SumReducerFor =
    std::conditional_t<std::is_integral_v<T>, WrappingSumReducer<T>,
                       Eigen::internal::SumReducer<T>>;

template <typename T, typename Reducer, int N, int K>
void EigenReduce(OpKernelContext* ctx, const Tensor& in,
                 const std::vector<int64_t>& collapsed, bool first_reduced,
                 Tensor* out) {
  Eigen::array<Eigen::DenseIndex, K> axes;
  int k = 0;
  for (int i = 0; i < N; ++i) {
    if ((i % 2 == 0) == first_reduced) axes[k++] = i;
  }
  auto x = in.shaped<T, N>(collapsed);
  Eigen::DSizes<Eigen::DenseIndex, 1> flat(out->NumElements());
  EvalMaybeParallel(ctx, in.NumElements(), out->flat<T>(),
                    x.reduce(axes, Reducer()).reshape(flat));
}

template <typename T, typename Reducer>
void Reduce(OpKernelContext* ctx, const Tensor& in,
            const std::vector<bool>& reduced, Tensor* out) {
  // Collapse runs of adjacent axes that are all reduced or all kept;
  // size-1 axes join any run.
  std::vector<int64_t> collapsed;
  std::vector<bool> kinds;
  for (int i = 0; i < in.dims(); ++i) {
    int64_t d = in.dim_size(i);
    if (d == 1) continue;
    if (!kinds.empty() && kinds.back() == reduced[i]) {
      collapsed.back() *= d;
    } else {
      collapsed.push_back(d);
      kinds.push_back(reduced[i]);
    }
  }
  const int n = static_cast<int>(collapsed.size());
  if (n == 0 || (n == 1 && !kinds[0])) {  // Nothing to reduce: copy.
    // (ReductionOp shares the input's buffer instead; this keeps Reduce
    // whole for any other caller.)
    std::copy_n(in.data<T>(), in.NumElements(), out->data<T>());
    return;
  }
  const bool fr = kinds[0];
  if constexpr (std::is_same_v<T, float> &&
                std::is_same_v<Reducer, Eigen::internal::SumReducer<float>>) {
    // The leading axes reduced, the trailing kept: a bias's gradient. The
    // column loop sums each column in row order, vectorised across columns
    // (Eigen's strided reduction of this shape is ~20x slower).
    if (n == 2 && fr) {
      const int64_t rows = collapsed[0], cols = collapsed[1];
      const float* x = in.data<float>();
      float* o = out->data<float>();
      ParallelLoop(ctx, cols, 4.0 * rows, [&](int64_t begin, int64_t end) {
        vector_loops::SumRows(x, o, rows, cols, begin, end);
      });
      return;
    }
  }
  if (n == 1) return EigenReduce<T, Reducer, 1, 1>(ctx, in, collapsed, fr, out);
  if (n == 2) return EigenReduce<T, Reducer, 2, 1>(ctx, in, collapsed, fr, out);
  if (n == 3 && fr)
    return EigenReduce<T, Reducer, 3, 2>(ctx, in, collapsed, fr, out);
  if (n == 3) return EigenReduce<T, Reducer, 3, 1>(ctx, in, collapsed, fr, out);
  if (n == 4) return EigenReduce<T, Reducer, 4, 2>(ctx, in, collapsed, fr, out);
  // Rare (five or more alternating runs): a scalar loop.
  std::vector<int64_t> idx(n, 0), out_strides(n, 0);
  int64_t stride = 1;
  for (int i = n - 1; i >= 0; --i) {
    if (!kinds[i]) {
      out_strides[i] = stride;
      stride *= collapsed[i];
    }
  }
  T* o = out->data<T>();
  std::vector<bool> seen(out->NumElements(), false);
  Reducer reducer;
  const T* x = in.data<T>();
  for (int64_t j = 0; j < in.NumElements(); ++j) {
    int64_t oi = 0;
    for (int i = 0; i < n; ++i) oi += idx[i] * out_strides[i];
    if (!seen[oi]) {
      o[oi] = reducer.initialize();
      seen[oi] = true;
    }
    reducer.reduce(x[j], &o[oi]);
    for (int i = n - 1; i >= 0; --i) {
      if (++idx[i] < collapsed[i]) break;
      idx[i] = 0;
    }
  }
}

template <typename T, ReduceKind kKind>
class ReductionOp : public OpKernel {
 public:
  explicit ReductionOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    COHORT_OP_REQUIRES_OK(ctx, ctx->GetAttr("keep_dims", &keep_dims_));
  }
  void Compute(OpKernelContext* ctx) override {
    const Tensor& in = ctx->input(0);
    std::vector<bool> reduced;
    COHORT_OP_REQUIRES_OK(ctx,
                          ReductionAxes(ctx->input(1), in.dims(), &reduced));
    TensorShape out_shape;
    int64_t count = 1;
    for (int i = 0; i < in.dims(); ++i) {
      if (reduced[i]) {
        count *= in.dim_size(i);
        if (keep_dims_) out_shape.AddDim(1);
      } else {
        out_shape.AddDim(in.dim_size(i));
      }
    }
    if (kKind == ReduceKind::kMax) {
      COHORT_OP_REQUIRES(ctx, count > 0 || out_shape.num_elements() == 0,
                         absl::InvalidArgumentError(absl::StrCat(
                             "Max over an empty set of elements (input shape ",
                             in.shape().DebugString(), ")")));
    }
    if (count == 1) {
      // Nothing is reduced (no axes, or only axes of size 1): every
      // reduction is the identity, so the output shares the input's buffer
      // as TensorFlow's does. A broadcast Add's gradient sums its
      // full-shaped side over no axes each step; a copy there cost a pass
      // over the activations.
      absl::StatusOr<Tensor> same = in.Reshaped(out_shape);
      COHORT_OP_REQUIRES_OK(ctx, same.status());
      ctx->set_output(0, *std::move(same));
      return;
    }
    Tensor* out = nullptr;
    COHORT_OP_REQUIRES_OK(ctx, ctx->allocate_output(0, out_shape, &out));
    if (out->NumElements() == 0) return;
    if (in.NumElements() == 0) {  // Sum/Mean of nothing.
      out->flat<T>().setConstant(T(0));
      if (kKind == ReduceKind::kMean && std::is_floating_point<T>::value) {
        out->flat<T>().setConstant(std::numeric_limits<T>::quiet_NaN());
      }
      return;
    }
    if (kKind == ReduceKind::kMax) {
      Reduce<T, Eigen::internal::MaxReducer<T>>(ctx, in, reduced, out);
    } else {
      Reduce<T, SumReducerFor<T>>(ctx, in, reduced, out);
      if (kKind == ReduceKind::kMean && count != 1) {
        auto o = out->flat<T>();
        o = o / static_cast<T>(count);
      }
    }
  }

 private:
  bool keep_dims_ = false;
};

template <typename T>
class MatMulOp : public OpKernel {
 public:
  explicit MatMulOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    COHORT_OP_REQUIRES_OK(ctx, ctx->GetAttr("transpose_a", &transpose_a_));
    COHORT_OP_REQUIRES_OK(ctx, ctx->GetAttr("transpose_b", &transpose_b_));
    set_expensive(true);
  }
  void Compute(OpKernelContext* ctx) override {
    const Tensor& a = ctx->input(0);
    const Tensor& b = ctx->input(1);
    COHORT_OP_REQUIRES(
        ctx, a.dims() == 2 && b.dims() == 2,
        absl::InvalidArgumentError(absl::StrCat(
            "MatMul needs rank-2 inputs, got a ", a.shape().DebugString(),
            " and b ", b.shape().DebugString())));
    const int ka = transpose_a_ ? 0 : 1;
    const int kb = transpose_b_ ? 1 : 0;
    COHORT_OP_REQUIRES(
        ctx, a.dim_size(ka) == b.dim_size(kb),
        absl::InvalidArgumentError(absl::StrCat(
            "MatMul: inner dimensions do not match: a is ",
            a.shape().DebugString(),
            " (transpose_a=", transpose_a_ ? "true" : "false", "), b is ",
            b.shape().DebugString(),
            " (transpose_b=", transpose_b_ ? "true" : "false", ")")));
    const int64_t m = a.dim_size(1 - ka), n = b.dim_size(1 - kb),
                  k = a.dim_size(ka);
    Tensor* out = nullptr;
    COHORT_OP_REQUIRES_OK(ctx,
                          ctx->allocate_output(0, TensorShape({m, n}), &out));
    if (out->NumElements() == 0) return;
    auto o = out->matrix<T>();
    if (k == 0) {
      o.setZero();
      return;
    }
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
      // The machine's BLAS (kernels/blas.h) where there is one: Eigen's
      // contraction runs SSE2 code in this build.
      const Blas* blas = Blas::Get();
      if (blas != nullptr && Blas::FitsInt(m, n, k)) {
        blas->Gemm(transpose_a_, transpose_b_, m, n, k, a.data<T>(),
                   a.dim_size(1), b.data<T>(), b.dim_size(1), out->data<T>(),
                   n);
        return;
      }
    }
    if constexpr (std::is_integral_v<T>) {
      // Integer MatMul wraps (cwise_ops.h) instead of overflowing inside
      // Eigen's contraction; it is rare enough for a plain loop.
      const T* x = a.data<T>();
      const T* y = b.data<T>();
      const int64_t lda = a.dim_size(1), ldb = b.dim_size(1);
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
          T acc = 0;
          for (int64_t p = 0; p < k; ++p) {
            const T av = transpose_a_ ? x[p * lda + i] : x[i * lda + p];
            const T bv = transpose_b_ ? y[j * ldb + p] : y[p * ldb + j];
            acc = WrappingSum<T>()(acc, WrappingProduct<T>()(av, bv));
          }
          o(i, j) = acc;
        }
      }
      return;
    }
    Eigen::array<Eigen::IndexPair<Eigen::DenseIndex>, 1> dims;
    dims[0] = Eigen::IndexPair<Eigen::DenseIndex>(ka, kb);
    auto expr = a.matrix<T>().contract(b.matrix<T>(), dims);
    if (m * n * k >= 32768 && ctx->device() != nullptr) {
      o.device(ctx->eigen_cpu_device()) = expr;
    } else {
      o = expr;
    }
  }

 private:
  bool transpose_a_ = false;
  bool transpose_b_ = false;
};

absl::Status ReductionShape(InferenceContext* c) {
  bool keep_dims = false;
  COHORT_RETURN_IF_ERROR(c->GetAttr("keep_dims", &keep_dims));
  const PartialTensorShape& in = c->input(0);
  const Tensor* axes = c->input_tensor(1);
  if (in.unknown_rank()) {
    c->set_output(0, PartialTensorShape::UnknownRank());
    return absl::OkStatus();
  }
  if (axes == nullptr) {
    c->set_output(0, keep_dims ? PartialTensorShape::UnknownDims(in.dims())
                               : PartialTensorShape::UnknownRank());
    return absl::OkStatus();
  }
  std::vector<bool> reduced;
  absl::Status s = ReductionAxes(*axes, in.dims(), &reduced);
  if (!s.ok()) return c->InvalidArgument(s.message());
  std::vector<int64_t> dims;
  for (int i = 0; i < in.dims(); ++i) {
    if (!reduced[i]) {
      dims.push_back(in.dim_size(i));
    } else if (keep_dims) {
      dims.push_back(1);
    }
  }
  c->set_output(0, PartialTensorShape(absl::Span<const int64_t>(dims)));
  return absl::OkStatus();
}

absl::Status MatMulShape(InferenceContext* c) {
  bool ta = false, tb = false;
  COHORT_RETURN_IF_ERROR(c->GetAttr("transpose_a", &ta));
  COHORT_RETURN_IF_ERROR(c->GetAttr("transpose_b", &tb));
  PartialTensorShape a, b;
  COHORT_RETURN_IF_ERROR(c->WithRank(c->input(0), 2, &a));
  COHORT_RETURN_IF_ERROR(c->WithRank(c->input(1), 2, &b));
  const int64_t ka = a.dim_size(ta ? 0 : 1), kb = b.dim_size(tb ? 1 : 0);
  if (ka >= 0 && kb >= 0 && ka != kb) {
    return c->InvalidArgument(absl::StrCat(
        "MatMul: inner dimensions do not match: a is ", a.DebugString(),
        " (transpose_a=", ta ? "true" : "false", "), b is ", b.DebugString(),
        " (transpose_b=", tb ? "true" : "false", ")"));
  }
  c->set_output(
      0, PartialTensorShape({a.dim_size(ta ? 1 : 0), b.dim_size(tb ? 0 : 1)}));
  return absl::OkStatus();
}

template <typename T>
absl::Status RegisterTyped(KernelRegistry* r) {
  auto def = [](const char* op) {
    return KernelDefBuilder(op).TypeConstraint("T", DataTypeToEnum<T>::value);
  };
  COHORT_RETURN_IF_ERROR(
      (r->Register<ReductionOp<T, ReduceKind::kSum>>(def("Sum"))));
  COHORT_RETURN_IF_ERROR(
      (r->Register<ReductionOp<T, ReduceKind::kMean>>(def("Mean"))));
  COHORT_RETURN_IF_ERROR(
      (r->Register<ReductionOp<T, ReduceKind::kMax>>(def("Max"))));
  COHORT_RETURN_IF_ERROR(r->Register<MatMulOp<T>>(def("MatMul")));
  return absl::OkStatus();
}

}  // namespace

// Why an index attr (Tidx) must stay int32: the kernels read the axes as
// int32.
constexpr char kInt32Indices[] = "the kernels read int32 axes";

absl::Status RegisterReductionOps(OpRegistry* r) {
  for (const char* name : {"Sum", "Mean", "Max"}) {
    COHORT_RETURN_IF_ERROR(
        r->Register(OpDefBuilder(name)
                        .Input("input: T")
                        .Input("reduction_indices: Tidx")
                        .Output("output: T")
                        .Attr("T: {float, double, int32, int64}")
                        .Attr("keep_dims: bool = false")
                        .Attr("Tidx: {int32, int64} = int32")
                        .RequireDefault("Tidx", kInt32Indices)
                        .SetShapeFn(ReductionShape)));
  }
  COHORT_RETURN_IF_ERROR(
      r->Register(OpDefBuilder("MatMul")
                      .Input("a: T")
                      .Input("b: T")
                      .Output("product: T")
                      .Attr("T: {float, double, int32, int64}")
                      .Attr("transpose_a: bool = false")
                      .Attr("transpose_b: bool = false")
                      // Hints TensorFlow sets on MatMuls of a gradient (for
                      // its TF32 policy); they never change the product.
                      .Attr("grad_a: bool = false")
                      .Attr("grad_b: bool = false")
                      .SetShapeFn(MatMulShape)));
  return absl::OkStatus();
}

absl::Status RegisterReductionKernels(KernelRegistry* r) {
  COHORT_RETURN_IF_ERROR(RegisterTyped<float>(r));
  COHORT_RETURN_IF_ERROR(RegisterTyped<double>(r));
  COHORT_RETURN_IF_ERROR(RegisterTyped<int32_t>(r));
  COHORT_RETURN_IF_ERROR(RegisterTyped<int64_t>(r));
  return absl::OkStatus();
}

namespace ops {
namespace {
Output Reduction(const Scope& s, const char* op, const Input& input,
                 const Input& axes, bool keep_dims) {
  return BuildOp(s, op, {input.ToOutput(s), axes.ToOutput(s, DT_INT32)},
                 {{"keep_dims", keep_dims}})
      .output(0);
}
}  // namespace

Output Sum(const Scope& s, Input input, Input axes, bool keep_dims) {
  return Reduction(s, "Sum", input, axes, keep_dims);
}
Output Mean(const Scope& s, Input input, Input axes, bool keep_dims) {
  return Reduction(s, "Mean", input, axes, keep_dims);
}
Output Max(const Scope& s, Input input, Input axes, bool keep_dims) {
  return Reduction(s, "Max", input, axes, keep_dims);
}

Output MatMul(const Scope& s, Input a, Input b, bool transpose_a,
              bool transpose_b) {
  Output ao = a.ToOutput(s);
  return BuildOp(s, "MatMul", {ao, b.ToOutput(s, ao.dtype())},
                 {{"transpose_a", transpose_a}, {"transpose_b", transpose_b}})
      .output(0);
}

}  // namespace ops
}  // namespace cohort
