#include "cohort/graph/kernels/elementwise_ops.h"

#include <cmath>
#include <functional>
#include <limits>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "cohort/base/status.h"
#include "cohort/graph/kernels/cwise_ops.h"

namespace cohort {
namespace {

// --- Functors (scalar-only where Eigen has no suitable one) -----------------

template <typename T>
struct PowFunctor : Eigen::internal::binary_op_base<T, T> {
  using result_type = T;
  T operator()(const T& a, const T& b) const { return std::pow(a, b); }
};

template <typename T, typename Cmp>
struct CmpFunctor : Eigen::internal::binary_op_base<T, T> {
  using result_type = bool;
  bool operator()(const T& a, const T& b) const { return Cmp()(a, b); }
};

template <typename T>
using GreaterFunctor = CmpFunctor<T, std::greater<T>>;
template <typename T>
using LessFunctor = CmpFunctor<T, std::less<T>>;
template <typename T>
using EqualFunctor = CmpFunctor<T, std::equal_to<T>>;

// A float that does not fit the integer type it is cast to (1e300 to
// int32, NaN) is undefined behaviour in C++ (x86 happens to give INT_MIN).
// Such values saturate to the type's range and NaN gives 0, as Java and
// Rust define the conversion, so a graph's data cannot reach UB.
template <typename Src, typename Dst>
struct CastFunctor {
  using result_type = Dst;
  Dst operator()(const Src& a) const {
    if constexpr (std::is_floating_point_v<Src> && std::is_integral_v<Dst> &&
                  !std::is_same_v<Dst, bool>) {
      if (std::isnan(a)) return Dst{0};
      // The limits as Src: max() rounds up to a power of two for the wide
      // types, so ">=" is the test for "does not fit".
      if (a >= static_cast<Src>(std::numeric_limits<Dst>::max())) {
        return std::numeric_limits<Dst>::max();
      }
      if (a <= static_cast<Src>(std::numeric_limits<Dst>::lowest())) {
        return std::numeric_limits<Dst>::lowest();
      }
    }
    return static_cast<Dst>(a);
  }
};

// --- Kernels -----------------------------------------------------------------

// Integer division: rejects zero divisors (InvalidArgument, as TensorFlow
// does) and wraps MIN / -1 to MIN instead of trapping (WrappingQuotient).
template <typename T>
class IntDivOp : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    const Tensor& y = ctx->input(1);
    BCast b(x.shape(), y.shape());
    COHORT_OP_REQUIRES(ctx, b.valid(),
                       absl::InvalidArgumentError(b.ErrorMessage()));
    for (T v : y.span<T>()) {
      COHORT_OP_REQUIRES(ctx, v != 0,
                         absl::InvalidArgumentError(absl::StrCat(
                             "integer division by zero: divisor of shape ",
                             y.shape().DebugString(), " has a zero element")));
    }
    Tensor* out = nullptr;
    COHORT_OP_REQUIRES_OK(ctx, ctx->allocate_output(0, b.output_shape(), &out));
    BinaryBroadcastCompute<T, T, WrappingQuotient<T>>(ctx, x, y, b, out);
  }
};

template <typename T>
class AddNOp : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    const Tensor& first = ctx->input(0);
    for (int i = 1; i < ctx->num_inputs(); ++i) {
      COHORT_OP_REQUIRES(ctx, ctx->input(i).shape() == first.shape(),
                         absl::InvalidArgumentError(absl::StrCat(
                             "AddN inputs must have one shape: input 0 is ",
                             first.shape().DebugString(), " but input ", i,
                             " is ", ctx->input(i).shape().DebugString())));
    }
    if (ctx->num_inputs() == 1) {
      ctx->set_output(0, first);
      return;
    }
    Tensor* out = nullptr;
    COHORT_OP_REQUIRES_OK(ctx, ctx->allocate_output(0, first.shape(), &out));
    const int64_t n = first.NumElements();
    auto o = out->flat<T>();
    using Sum =
        WrappingOr<T, WrappingSum<T>, Eigen::internal::scalar_sum_op<T>>;
    EvalMaybeParallel(
        ctx, n, o, first.flat<T>().binaryExpr(ctx->input(1).flat<T>(), Sum()));
    for (int i = 2; i < ctx->num_inputs(); ++i) {
      EvalMaybeParallel(ctx, n, o,
                        o.binaryExpr(ctx->input(i).flat<T>(), Sum()));
    }
  }
};

template <typename T>
class SelectOp : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    const Tensor& c = ctx->input(0);
    const Tensor& t = ctx->input(1);
    const Tensor& e = ctx->input(2);
    COHORT_OP_REQUIRES(
        ctx, t.shape() == e.shape(),
        absl::InvalidArgumentError(absl::StrCat(
            "'t' and 'e' must have one shape, got ", t.shape().DebugString(),
            " and ", e.shape().DebugString())));
    if (c.dims() == 0) {
      ctx->set_output(0, c.scalar<bool>() ? t : e);
      return;
    }
    COHORT_OP_REQUIRES(
        ctx, c.shape() == t.shape(),
        absl::InvalidArgumentError(absl::StrCat(
            "condition has shape ", c.shape().DebugString(),
            " but 't' and 'e' have shape ", t.shape().DebugString(),
            "; the condition must match or be a scalar")));
    Tensor* out = nullptr;
    COHORT_OP_REQUIRES_OK(ctx, ctx->allocate_output(0, t.shape(), &out));
    EvalMaybeParallel(ctx, t.NumElements(), out->flat<T>(),
                      c.flat<bool>().select(t.flat<T>(), e.flat<T>()));
  }
};

template <typename Src, typename Dst>
class CastOp : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    if (std::is_same<Src, Dst>::value) {
      ctx->set_output(0, x);
      return;
    }
    Tensor* out = nullptr;
    COHORT_OP_REQUIRES_OK(ctx, ctx->allocate_output(0, x.shape(), &out));
    EvalMaybeParallel(ctx, x.NumElements(), out->flat<Dst>(),
                      x.flat<Src>().unaryExpr(CastFunctor<Src, Dst>()));
  }
};

// --- Registration helpers
// ------------------------------------------------------

absl::Status RegisterBinary(OpRegistry* r, const char* name,
                            const char* types) {
  return r->Register(OpDefBuilder(name)
                         .Input("x: T")
                         .Input("y: T")
                         .Output("z: T")
                         .Attr(absl::StrCat("T: ", types))
                         .SetShapeFn(shape_fns::BroadcastBinaryOp));
}

absl::Status RegisterUnary(OpRegistry* r, const char* name, const char* types) {
  return r->Register(OpDefBuilder(name)
                         .Input("x: T")
                         .Output("y: T")
                         .Attr(absl::StrCat("T: ", types))
                         .SetShapeFn(shape_fns::Unchanged));
}

absl::Status RegisterComparison(OpRegistry* r, const char* name) {
  OpDefBuilder b(name);
  b.Input("x: T")
      .Input("y: T")
      .Output("z: bool")
      .Attr("T: {float, double, int32, int64}")
      .SetShapeFn(shape_fns::BroadcastBinaryOp);
  // TensorFlow's Equal and NotEqual (not Greater or Less) carry this attr;
  // false asks for a scalar false on shapes that do not broadcast, where
  // cohort's kernel fails the step.
  if (absl::string_view(name) == "Equal") {
    b.Attr("incompatible_shape_error: bool = true")
        .RequireDefault("incompatible_shape_error",
                        "shapes that do not broadcast fail the step");
  }
  return r->Register(b);
}

absl::Status AddNShape(InferenceContext* c) {
  PartialTensorShape s = c->input(0);
  for (int i = 1; i < c->num_inputs(); ++i) {
    COHORT_RETURN_IF_ERROR(c->Merge(s, c->input(i), &s));
  }
  c->set_output(0, s);
  return absl::OkStatus();
}

absl::Status SelectShape(InferenceContext* c) {
  PartialTensorShape s;
  COHORT_RETURN_IF_ERROR(c->Merge(c->input(1), c->input(2), &s));
  const PartialTensorShape& cond = c->input(0);
  if (!cond.unknown_rank() && cond.dims() != 0) {
    COHORT_RETURN_IF_ERROR(c->Merge(s, cond, &s));
  }
  c->set_output(0, s);
  return absl::OkStatus();
}

template <typename K>
absl::Status Reg(KernelRegistry* r, const char* op, DataType t) {
  return r->Register<K>(KernelDefBuilder(op).TypeConstraint("T", t));
}

template <typename T>
absl::Status RegisterNumericKernels(KernelRegistry* r) {
  namespace ei = Eigen::internal;
  const DataType t = DataTypeToEnum<T>::value;
  // Integer arithmetic wraps (cwise_ops.h).
  using Sub = WrappingOr<T, WrappingDifference<T>, ei::scalar_difference_op<T>>;
  using Mul = WrappingOr<T, WrappingProduct<T>, ei::scalar_product_op<T>>;
  using Neg = WrappingOr<T, WrappingNegate<T>, ei::scalar_opposite_op<T>>;
  using Square = WrappingOr<T, WrappingSquare<T>, ei::scalar_square_op<T>>;
  COHORT_RETURN_IF_ERROR((Reg<BinaryCwiseOp<T, T, Sub>>(r, "Sub", t)));
  COHORT_RETURN_IF_ERROR((Reg<BinaryCwiseOp<T, T, Mul>>(r, "Mul", t)));
  COHORT_RETURN_IF_ERROR(
      (Reg<BinaryCwiseOp<T, T, ei::scalar_max_op<T, T>>>(r, "Maximum", t)));
  COHORT_RETURN_IF_ERROR(
      (Reg<BinaryCwiseOp<T, T, ei::scalar_min_op<T, T>>>(r, "Minimum", t)));
  COHORT_RETURN_IF_ERROR(
      (Reg<BinaryCwiseOp<T, bool, GreaterFunctor<T>>>(r, "Greater", t)));
  COHORT_RETURN_IF_ERROR(
      (Reg<BinaryCwiseOp<T, bool, LessFunctor<T>>>(r, "Less", t)));
  COHORT_RETURN_IF_ERROR(
      (Reg<BinaryCwiseOp<T, bool, EqualFunctor<T>>>(r, "Equal", t)));
  COHORT_RETURN_IF_ERROR((Reg<UnaryCwiseOp<T, T, Neg>>(r, "Neg", t)));
  COHORT_RETURN_IF_ERROR((Reg<UnaryCwiseOp<T, T, Square>>(r, "Square", t)));
  COHORT_RETURN_IF_ERROR((Reg<AddNOp<T>>(r, "AddN", t)));
  COHORT_RETURN_IF_ERROR((Reg<SelectOp<T>>(r, "Select", t)));
  return absl::OkStatus();
}

template <typename T>
absl::Status RegisterFloatKernels(KernelRegistry* r) {
  namespace ei = Eigen::internal;
  const DataType t = DataTypeToEnum<T>::value;
  COHORT_RETURN_IF_ERROR(
      (Reg<BinaryCwiseOp<T, T, ei::scalar_quotient_op<T>>>(r, "Div", t)));
  COHORT_RETURN_IF_ERROR(
      (Reg<BinaryCwiseOp<T, T, PowFunctor<T>>>(r, "Pow", t)));
  COHORT_RETURN_IF_ERROR(
      (Reg<UnaryCwiseOp<T, T, ei::scalar_sqrt_op<T>>>(r, "Sqrt", t)));
  COHORT_RETURN_IF_ERROR(
      (Reg<UnaryCwiseOp<T, T, ei::scalar_exp_op<T>>>(r, "Exp", t)));
  COHORT_RETURN_IF_ERROR(
      (Reg<UnaryCwiseOp<T, T, ei::scalar_log_op<T>>>(r, "Log", t)));
  return absl::OkStatus();
}

template <typename Src, typename Dst>
absl::Status RegisterCast(KernelRegistry* r) {
  return r->Register<CastOp<Src, Dst>>(
      KernelDefBuilder("Cast")
          .TypeConstraint("SrcT", DataTypeToEnum<Src>::value)
          .TypeConstraint("DstT", DataTypeToEnum<Dst>::value));
}

template <typename Src>
absl::Status RegisterCastsFrom(KernelRegistry* r) {
  COHORT_RETURN_IF_ERROR((RegisterCast<Src, float>(r)));
  COHORT_RETURN_IF_ERROR((RegisterCast<Src, double>(r)));
  COHORT_RETURN_IF_ERROR((RegisterCast<Src, int32_t>(r)));
  COHORT_RETURN_IF_ERROR((RegisterCast<Src, int64_t>(r)));
  COHORT_RETURN_IF_ERROR((RegisterCast<Src, bool>(r)));
  return absl::OkStatus();
}

constexpr char kNumeric[] = "{float, double, int32, int64}";
constexpr char kFloat[] = "{float, double}";

}  // namespace

absl::Status RegisterElementwiseOps(OpRegistry* r) {
  for (const char* name : {"Sub", "Mul", "Div", "Maximum", "Minimum"}) {
    COHORT_RETURN_IF_ERROR(RegisterBinary(r, name, kNumeric));
  }
  COHORT_RETURN_IF_ERROR(RegisterBinary(r, "Pow", kFloat));
  for (const char* name : {"Neg", "Square"}) {
    COHORT_RETURN_IF_ERROR(RegisterUnary(r, name, kNumeric));
  }
  for (const char* name : {"Sqrt", "Exp", "Log"}) {
    COHORT_RETURN_IF_ERROR(RegisterUnary(r, name, kFloat));
  }
  for (const char* name : {"Greater", "Less", "Equal"}) {
    COHORT_RETURN_IF_ERROR(RegisterComparison(r, name));
  }
  COHORT_RETURN_IF_ERROR(
      r->Register(OpDefBuilder("AddN")
                      .Input("inputs: N * T")
                      .Output("sum: T")
                      .Attr("T: {float, double, int32, int64}")
                      .SetShapeFn(AddNShape)));
  COHORT_RETURN_IF_ERROR(
      r->Register(OpDefBuilder("Select")
                      .Input("condition: bool")
                      .Input("t: T")
                      .Input("e: T")
                      .Output("output: T")
                      .Attr("T: {float, double, int32, int64, bool}")
                      .SetShapeFn(SelectShape)));
  COHORT_RETURN_IF_ERROR(
      r->Register(OpDefBuilder("Cast")
                      .Input("x: SrcT")
                      .Output("y: DstT")
                      .Attr("SrcT: {float, double, int32, int64, bool}")
                      .Attr("DstT: {float, double, int32, int64, bool}")
                      // TensorFlow's Truncate=true drops mantissa bits
                      // instead of rounding a narrowing float conversion.
                      .Attr("Truncate: bool = false")
                      .RequireDefault("Truncate",
                                      "casts round to nearest, they do not "
                                      "truncate")
                      .SetShapeFn(shape_fns::Unchanged)));
  return absl::OkStatus();
}

absl::Status RegisterElementwiseKernels(KernelRegistry* r) {
  COHORT_RETURN_IF_ERROR(RegisterNumericKernels<float>(r));
  COHORT_RETURN_IF_ERROR(RegisterNumericKernels<double>(r));
  COHORT_RETURN_IF_ERROR(RegisterNumericKernels<int32_t>(r));
  COHORT_RETURN_IF_ERROR(RegisterNumericKernels<int64_t>(r));
  COHORT_RETURN_IF_ERROR(RegisterFloatKernels<float>(r));
  COHORT_RETURN_IF_ERROR(RegisterFloatKernels<double>(r));
  COHORT_RETURN_IF_ERROR((Reg<IntDivOp<int32_t>>(r, "Div", DT_INT32)));
  COHORT_RETURN_IF_ERROR((Reg<IntDivOp<int64_t>>(r, "Div", DT_INT64)));
  COHORT_RETURN_IF_ERROR((Reg<SelectOp<bool>>(r, "Select", DT_BOOL)));
  COHORT_RETURN_IF_ERROR(RegisterCastsFrom<float>(r));
  COHORT_RETURN_IF_ERROR(RegisterCastsFrom<double>(r));
  COHORT_RETURN_IF_ERROR(RegisterCastsFrom<int32_t>(r));
  COHORT_RETURN_IF_ERROR(RegisterCastsFrom<int64_t>(r));
  COHORT_RETURN_IF_ERROR(RegisterCastsFrom<bool>(r));
  return absl::OkStatus();
}

namespace ops {
namespace {

Output Binary(const Scope& s, const char* op, const Input& x, const Input& y) {
  Output xo = x.ToOutput(s);
  Output yo = y.ToOutput(s, xo.dtype());
  return BuildOp(s, op, {xo, yo}).output(0);
}

Output Unary(const Scope& s, const char* op, const Input& x) {
  return BuildOp(s, op, {x.ToOutput(s)}).output(0);
}

}  // namespace

Output Sub(const Scope& s, Input x, Input y) { return Binary(s, "Sub", x, y); }
Output Mul(const Scope& s, Input x, Input y) { return Binary(s, "Mul", x, y); }
Output Div(const Scope& s, Input x, Input y) { return Binary(s, "Div", x, y); }
Output Pow(const Scope& s, Input x, Input y) { return Binary(s, "Pow", x, y); }
Output Maximum(const Scope& s, Input x, Input y) {
  return Binary(s, "Maximum", x, y);
}
Output Minimum(const Scope& s, Input x, Input y) {
  return Binary(s, "Minimum", x, y);
}
Output Greater(const Scope& s, Input x, Input y) {
  return Binary(s, "Greater", x, y);
}
Output Less(const Scope& s, Input x, Input y) {
  return Binary(s, "Less", x, y);
}
Output Equal(const Scope& s, Input x, Input y) {
  return Binary(s, "Equal", x, y);
}
Output Neg(const Scope& s, Input x) { return Unary(s, "Neg", x); }
Output Square(const Scope& s, Input x) { return Unary(s, "Square", x); }
Output Sqrt(const Scope& s, Input x) { return Unary(s, "Sqrt", x); }
Output Exp(const Scope& s, Input x) { return Unary(s, "Exp", x); }
Output Log(const Scope& s, Input x) { return Unary(s, "Log", x); }

Output AddN(const Scope& s, const std::vector<Output>& inputs) {
  return BuildOp(s, "AddN", {inputs}).output(0);
}

Output Select(const Scope& s, Input condition, Input t, Input e) {
  Output c = condition.ToOutput(s);
  Output to = t.ToOutput(s);
  Output eo = e.ToOutput(s, to.dtype());
  return BuildOp(s, "Select", {c, to, eo}).output(0);
}

Output Cast(const Scope& s, Input x, DataType dst_type) {
  return BuildOp(s, "Cast", {x.ToOutput(s)}, {{"DstT", dst_type}}).output(0);
}

}  // namespace ops
}  // namespace cohort
