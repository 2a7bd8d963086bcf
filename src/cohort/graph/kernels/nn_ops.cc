#include "cohort/graph/kernels/nn_ops.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "cohort/base/status.h"
#include "cohort/graph/kernels/cwise_ops.h"
#include "cohort/graph/kernels/vector_loops.h"

namespace cohort {
namespace {

template <typename T>
struct ReluFunctor {
  using result_type = T;
  T operator()(const T& x) const { return x > T(0) ? x : T(0); }
};

// Float Relu: the vectorised loop (vector_loops.h).
class FloatReluOp : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    const int64_t n = x.NumElements();
    const float* xd = x.data<float>();
    Tensor* out = nullptr;
    // In place when x is this kernel's alone (x is empty after that).
    COHORT_OP_REQUIRES_OK(
        ctx, ctx->forward_input_or_allocate_output(0, 0, x.shape(), &out));
    float* od = out->data<float>();
    ParallelLoop(ctx, n, 8, [&](int64_t begin, int64_t end) {
      vector_loops::Relu(xd, od, begin, end);
    });
  }
};

// ReluGrad(gradients, features) = gradients where features > 0, else 0.
template <typename T>
class ReluGradOp : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    const Tensor& g = ctx->input(0);
    const Tensor& y = ctx->input(1);
    COHORT_OP_REQUIRES(
        ctx, g.shape() == y.shape(),
        absl::InvalidArgumentError(absl::StrCat(
            "ReluGrad: gradients ", g.shape().DebugString(), " and features ",
            y.shape().DebugString(), " must have one shape")));
    const int64_t n = g.NumElements();
    const T* gd = g.data<T>();
    const T* yd = y.data<T>();
    Tensor* out = nullptr;
    // In place over the gradients when they are this kernel's alone.
    COHORT_OP_REQUIRES_OK(
        ctx, ctx->forward_input_or_allocate_output(0, 0, g.shape(), &out));
    T* od = out->data<T>();
    ParallelLoop(ctx, n, 3 * sizeof(T), [&](int64_t begin, int64_t end) {
      if constexpr (std::is_same_v<T, float>) {
        vector_loops::ReluGrad(gd, yd, od, begin, end);
      } else {
        for (int64_t i = begin; i < end; ++i)
          od[i] = yd[i] > T(0) ? gd[i] : T(0);
      }
    });
  }
};

template <typename T>
struct SigmoidFunctor {
  using result_type = T;
  T operator()(const T& x) const { return T(1) / (T(1) + std::exp(-x)); }
};

template <typename T>
struct TanhFunctor {
  using result_type = T;
  T operator()(const T& x) const { return std::tanh(x); }
};

// Writes softmax of `row` (length c) to `out`; returns log(sum(exp(row -
// max))) + max, the log-sum-exp.
template <typename T>
T SoftmaxRow(const T* row, int64_t c, T* out) {
  T mx = row[0];
  for (int64_t j = 1; j < c; ++j) mx = std::max(mx, row[j]);
  T sum = 0;
  for (int64_t j = 0; j < c; ++j) {
    out[j] = std::exp(row[j] - mx);
    sum += out[j];
  }
  for (int64_t j = 0; j < c; ++j) out[j] /= sum;
  return std::log(sum) + mx;
}

template <typename T>
class SoftmaxOp : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    COHORT_OP_REQUIRES(
        ctx, x.dims() >= 1,
        absl::InvalidArgumentError("logits must have rank >= 1, got a scalar"));
    Tensor* out = nullptr;
    COHORT_OP_REQUIRES_OK(ctx, ctx->allocate_output(0, x.shape(), &out));
    const int64_t c = x.dim_size(x.dims() - 1);
    if (c == 0) return;
    const int64_t rows = x.NumElements() / c;
    for (int64_t i = 0; i < rows; ++i) {
      SoftmaxRow(x.data<T>() + i * c, c, out->data<T>() + i * c);
    }
  }
};

template <typename T>
class SoftmaxXentOp : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    const Tensor& labels = ctx->input(1);
    COHORT_OP_REQUIRES(
        ctx, x.dims() == 2 && labels.shape() == x.shape(),
        absl::InvalidArgumentError(absl::StrCat(
            "features and labels must both be [batch, classes], got ",
            x.shape().DebugString(), " and ", labels.shape().DebugString())));
    const int64_t b = x.dim_size(0), c = x.dim_size(1);
    Tensor *loss = nullptr, *backprop = nullptr;
    COHORT_OP_REQUIRES_OK(ctx,
                          ctx->allocate_output(0, TensorShape({b}), &loss));
    COHORT_OP_REQUIRES_OK(ctx, ctx->allocate_output(1, x.shape(), &backprop));
    for (int64_t i = 0; i < b; ++i) {
      const T* row = x.data<T>() + i * c;
      const T* lab = labels.data<T>() + i * c;
      T* bp = backprop->data<T>() + i * c;
      T l = 0;
      if (c > 0) {
        T lse = SoftmaxRow(row, c, bp);
        for (int64_t j = 0; j < c; ++j) {
          l += lab[j] * (lse - row[j]);
          bp[j] -= lab[j];
        }
      }
      loss->data<T>()[i] = l;
    }
  }
};

template <typename T, typename L>
class SparseSoftmaxXentOp : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    const Tensor& labels = ctx->input(1);
    COHORT_OP_REQUIRES(
        ctx,
        x.dims() == 2 && labels.dims() == 1 &&
            labels.dim_size(0) == x.dim_size(0),
        absl::InvalidArgumentError(absl::StrCat(
            "features must be [batch, classes] and labels [batch], got ",
            x.shape().DebugString(), " and ", labels.shape().DebugString())));
    const int64_t b = x.dim_size(0), c = x.dim_size(1);
    for (int64_t i = 0; i < b; ++i) {
      const L label = labels.data<L>()[i];
      COHORT_OP_REQUIRES(ctx, label >= 0 && label < c,
                         absl::InvalidArgumentError(absl::StrCat(
                             "label ", label, " at position ", i,
                             " is outside the valid range [0, ", c, ")")));
    }
    Tensor *loss = nullptr, *backprop = nullptr;
    COHORT_OP_REQUIRES_OK(ctx,
                          ctx->allocate_output(0, TensorShape({b}), &loss));
    COHORT_OP_REQUIRES_OK(ctx, ctx->allocate_output(1, x.shape(), &backprop));
    for (int64_t i = 0; i < b; ++i) {
      const T* row = x.data<T>() + i * c;
      T* bp = backprop->data<T>() + i * c;
      const L label = labels.data<L>()[i];
      T lse = SoftmaxRow(row, c, bp);
      loss->data<T>()[i] = lse - row[label];
      bp[label] -= T(1);
    }
  }
};

absl::Status XentShape(InferenceContext* c) {
  PartialTensorShape x;
  COHORT_RETURN_IF_ERROR(c->WithRank(c->input(0), 2, &x));
  PartialTensorShape labels;
  if (c->op_def().name == "SoftmaxCrossEntropyWithLogits") {
    COHORT_RETURN_IF_ERROR(c->WithRank(c->input(1), 2, &labels));
    COHORT_RETURN_IF_ERROR(c->Merge(x, labels, &x));
  } else {
    COHORT_RETURN_IF_ERROR(c->WithRank(c->input(1), 1, &labels));
    PartialTensorShape batch;
    COHORT_RETURN_IF_ERROR(
        c->Merge(PartialTensorShape({x.dim_size(0)}), labels, &batch));
    x = PartialTensorShape({batch.dim_size(0), x.dim_size(1)});
  }
  c->set_output(0, PartialTensorShape({x.dim_size(0)}));
  c->set_output(1, x);
  return absl::OkStatus();
}

template <typename T>
absl::Status RegisterTyped(KernelRegistry* r) {
  auto def = [](const char* op) {
    return KernelDefBuilder(op).TypeConstraint("T", DataTypeToEnum<T>::value);
  };
  if constexpr (std::is_same_v<T, float>) {
    COHORT_RETURN_IF_ERROR(r->Register<FloatReluOp>(def("Relu")));
  } else {
    COHORT_RETURN_IF_ERROR(
        (r->Register<UnaryCwiseOp<T, T, ReluFunctor<T>>>(def("Relu"))));
  }
  COHORT_RETURN_IF_ERROR(r->Register<ReluGradOp<T>>(def("ReluGrad")));
  COHORT_RETURN_IF_ERROR(
      (r->Register<UnaryCwiseOp<T, T, SigmoidFunctor<T>>>(def("Sigmoid"))));
  COHORT_RETURN_IF_ERROR(
      (r->Register<UnaryCwiseOp<T, T, TanhFunctor<T>>>(def("Tanh"))));
  COHORT_RETURN_IF_ERROR(r->Register<SoftmaxOp<T>>(def("Softmax")));
  COHORT_RETURN_IF_ERROR(
      r->Register<SoftmaxXentOp<T>>(def("SoftmaxCrossEntropyWithLogits")));
  COHORT_RETURN_IF_ERROR((r->Register<SparseSoftmaxXentOp<T, int32_t>>(
      def("SparseSoftmaxCrossEntropyWithLogits")
          .TypeConstraint("Tlabels", DT_INT32))));
  COHORT_RETURN_IF_ERROR((r->Register<SparseSoftmaxXentOp<T, int64_t>>(
      def("SparseSoftmaxCrossEntropyWithLogits")
          .TypeConstraint("Tlabels", DT_INT64))));
  return absl::OkStatus();
}

}  // namespace

absl::Status RegisterNnOps(OpRegistry* r) {
  for (const char* name : {"Relu", "Sigmoid", "Tanh", "Softmax"}) {
    COHORT_RETURN_IF_ERROR(r->Register(OpDefBuilder(name)
                                           .Input("x: T")
                                           .Output("y: T")
                                           .Attr("T: {float, double}")
                                           .SetShapeFn(shape_fns::Unchanged)));
  }
  COHORT_RETURN_IF_ERROR(r->Register(OpDefBuilder("ReluGrad")
                                         .Input("gradients: T")
                                         .Input("features: T")
                                         .Output("backprops: T")
                                         .Attr("T: {float, double}")
                                         .SetShapeFn(shape_fns::Unchanged)));
  COHORT_RETURN_IF_ERROR(
      r->Register(OpDefBuilder("SoftmaxCrossEntropyWithLogits")
                      .Input("features: T")
                      .Input("labels: T")
                      .Output("loss: T")
                      .Output("backprop: T")
                      .Attr("T: {float, double}")
                      .SetShapeFn(XentShape)));
  COHORT_RETURN_IF_ERROR(
      r->Register(OpDefBuilder("SparseSoftmaxCrossEntropyWithLogits")
                      .Input("features: T")
                      .Input("labels: Tlabels")
                      .Output("loss: T")
                      .Output("backprop: T")
                      .Attr("T: {float, double}")
                      .Attr("Tlabels: {int32, int64} = int64")
                      .SetShapeFn(XentShape)));
  return absl::OkStatus();
}

absl::Status RegisterNnKernels(KernelRegistry* r) {
  COHORT_RETURN_IF_ERROR(RegisterTyped<float>(r));
  COHORT_RETURN_IF_ERROR(RegisterTyped<double>(r));
  return absl::OkStatus();
}

namespace ops {

Output Relu(const Scope& s, Input features) {
  return BuildOp(s, "Relu", {features.ToOutput(s)}).output(0);
}
Output ReluGrad(const Scope& s, Input gradients, Input features) {
  return BuildOp(s, "ReluGrad", {gradients.ToOutput(s), features.ToOutput(s)})
      .output(0);
}
Output Sigmoid(const Scope& s, Input x) {
  return BuildOp(s, "Sigmoid", {x.ToOutput(s)}).output(0);
}
Output Tanh(const Scope& s, Input x) {
  return BuildOp(s, "Tanh", {x.ToOutput(s)}).output(0);
}
Output Softmax(const Scope& s, Input logits) {
  return BuildOp(s, "Softmax", {logits.ToOutput(s)}).output(0);
}

CrossEntropyOutputs SoftmaxCrossEntropyWithLogits(const Scope& s,
                                                  Input features,
                                                  Input labels) {
  Output f = features.ToOutput(s);
  Operation op = BuildOp(s, "SoftmaxCrossEntropyWithLogits",
                         {f, labels.ToOutput(s, f.dtype())});
  return {op.output(0), op.output(1)};
}

CrossEntropyOutputs SparseSoftmaxCrossEntropyWithLogits(const Scope& s,
                                                        Input features,
                                                        Input labels) {
  Operation op = BuildOp(s, "SparseSoftmaxCrossEntropyWithLogits",
                         {features.ToOutput(s), labels.ToOutput(s)});
  return {op.output(0), op.output(1)};
}

}  // namespace ops
}  // namespace cohort
