#include "cohort/graph/kernels/training_ops.h"

#include <cmath>
#include <memory>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "cohort/base/status.h"
#include "cohort/graph/kernels/vector_loops.h"
#include "cohort/graph/resource_mgr.h"

namespace cohort {
namespace {

absl::StatusOr<std::shared_ptr<Var>> LookupVar(OpKernelContext* ctx,
                                               int input) {
  const Tensor& h = ctx->input(input);
  if (h.dtype() != DT_RESOURCE || h.NumElements() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("input ", input, " must be a scalar resource handle"));
  }
  if (ctx->resource_manager() == nullptr) {
    return absl::FailedPreconditionError("the kernel runs without a device");
  }
  return ctx->resource_manager()->Lookup<Var>(h.scalar<ResourceHandle>());
}

// Checks `var` (locked) against the update `grad`.
absl::Status CheckVar(Var* var, const std::string& name, const Tensor& grad)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(var->mu()) {
  if (!var->is_initialized()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "variable '", name, "' is not initialised; run its initializer first"));
  }
  if (var->tensor()->dtype() != grad.dtype()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "variable '", name, "' is ", DataTypeName(var->tensor()->dtype()),
        " but grad is ", DataTypeName(grad.dtype())));
  }
  if (var->tensor()->shape() != grad.shape()) {
    return absl::InvalidArgumentError(
        absl::StrCat("variable '", name, "' has shape ",
                     var->tensor()->shape().DebugString(),
                     " but grad has shape ", grad.shape().DebugString()));
  }
  var->PrepareForUpdate();
  return absl::OkStatus();
}

std::string VarName(OpKernelContext* ctx, int input) {
  return ctx->input(input).scalar<ResourceHandle>().name;
}

absl::Status ScalarInput(OpKernelContext* ctx, int input, const char* what) {
  if (ctx->input(input).dims() != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " must be a scalar, got shape ",
                     ctx->input(input).shape().DebugString()));
  }
  return absl::OkStatus();
}

template <typename T>
class ApplyGradientDescentOp : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    auto var = LookupVar(ctx, 0);
    COHORT_OP_REQUIRES_OK(ctx, var.status());
    COHORT_OP_REQUIRES_OK(ctx, ScalarInput(ctx, 1, "alpha"));
    const T alpha = ctx->input(1).scalar<T>();
    const Tensor& delta = ctx->input(2);
    Var* v = var->get();
    absl::MutexLock lock(v->mu());
    COHORT_OP_REQUIRES_OK(ctx, CheckVar(v, VarName(ctx, 0), delta));
    if constexpr (std::is_same_v<T, float>) {
      float* w = v->tensor()->data<float>();
      const float* d = delta.data<float>();
      ParallelLoop(ctx, delta.NumElements(), 12,
                   [&](int64_t begin, int64_t end) {
                     vector_loops::GradientDescent(w, d, alpha, begin, end);
                   });
    } else {
      auto w = v->tensor()->flat<T>();
      w -= delta.flat<T>() * alpha;
    }
  }
};

template <typename T>
class ApplyMomentumOp : public OpKernel {
 public:
  explicit ApplyMomentumOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    COHORT_OP_REQUIRES_OK(ctx, ctx->GetAttr("use_nesterov", &nesterov_));
  }
  void Compute(OpKernelContext* ctx) override {
    auto var = LookupVar(ctx, 0);
    COHORT_OP_REQUIRES_OK(ctx, var.status());
    auto accum = LookupVar(ctx, 1);
    COHORT_OP_REQUIRES_OK(ctx, accum.status());
    COHORT_OP_REQUIRES_OK(ctx, ScalarInput(ctx, 2, "lr"));
    COHORT_OP_REQUIRES_OK(ctx, ScalarInput(ctx, 4, "momentum"));
    const T lr = ctx->input(2).scalar<T>();
    const Tensor& grad = ctx->input(3);
    const T momentum = ctx->input(4).scalar<T>();
    Var* v = var->get();
    Var* a = accum->get();
    COHORT_OP_REQUIRES(
        ctx, v != a,
        absl::InvalidArgumentError("var and accum are one variable"));
    absl::MutexLock lock_v(v->mu());
    absl::MutexLock lock_a(a->mu());
    COHORT_OP_REQUIRES_OK(ctx, CheckVar(v, VarName(ctx, 0), grad));
    COHORT_OP_REQUIRES_OK(ctx, CheckVar(a, VarName(ctx, 1), grad));
    if constexpr (std::is_same_v<T, float>) {
      // One pass over the three arrays instead of Eigen's two.
      float* w = v->tensor()->data<float>();
      float* acc = a->tensor()->data<float>();
      const float* g = grad.data<float>();
      const bool nesterov = nesterov_;
      ParallelLoop(ctx, grad.NumElements(), 20,
                   [&](int64_t begin, int64_t end) {
                     vector_loops::Momentum(w, acc, g, lr, momentum, nesterov,
                                            begin, end);
                   });
    } else {
      auto w = v->tensor()->flat<T>();
      auto acc = a->tensor()->flat<T>();
      auto g = grad.flat<T>();
      acc = acc * momentum + g;
      if (nesterov_) {
        w -= g * lr + acc * momentum * lr;
      } else {
        w -= acc * lr;
      }
    }
  }

 private:
  bool nesterov_ = false;
};

template <typename T>
class ApplyAdamOp : public OpKernel {
 public:
  explicit ApplyAdamOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    COHORT_OP_REQUIRES_OK(ctx, ctx->GetAttr("use_nesterov", &nesterov_));
  }
  void Compute(OpKernelContext* ctx) override {
    auto var = LookupVar(ctx, 0);
    COHORT_OP_REQUIRES_OK(ctx, var.status());
    auto m_var = LookupVar(ctx, 1);
    COHORT_OP_REQUIRES_OK(ctx, m_var.status());
    auto v_var = LookupVar(ctx, 2);
    COHORT_OP_REQUIRES_OK(ctx, v_var.status());
    const char* names[] = {"beta1_power", "beta2_power", "lr",
                           "beta1",       "beta2",       "epsilon"};
    for (int i = 0; i < 6; ++i) {
      COHORT_OP_REQUIRES_OK(ctx, ScalarInput(ctx, 3 + i, names[i]));
    }
    const T beta1_power = ctx->input(3).scalar<T>();
    const T beta2_power = ctx->input(4).scalar<T>();
    const T lr = ctx->input(5).scalar<T>();
    const T beta1 = ctx->input(6).scalar<T>();
    const T beta2 = ctx->input(7).scalar<T>();
    const T epsilon = ctx->input(8).scalar<T>();
    const Tensor& grad = ctx->input(9);
    Var* w_v = var->get();
    Var* m_v = m_var->get();
    Var* v_v = v_var->get();
    COHORT_OP_REQUIRES(
        ctx, w_v != m_v && w_v != v_v && m_v != v_v,
        absl::InvalidArgumentError("var, m and v must be distinct"));
    absl::MutexLock lock_w(w_v->mu());
    absl::MutexLock lock_m(m_v->mu());
    absl::MutexLock lock_v(v_v->mu());
    COHORT_OP_REQUIRES_OK(ctx, CheckVar(w_v, VarName(ctx, 0), grad));
    COHORT_OP_REQUIRES_OK(ctx, CheckVar(m_v, VarName(ctx, 1), grad));
    COHORT_OP_REQUIRES_OK(ctx, CheckVar(v_v, VarName(ctx, 2), grad));
    auto w = w_v->tensor()->flat<T>();
    auto m = m_v->tensor()->flat<T>();
    auto v = v_v->tensor()->flat<T>();
    auto g = grad.flat<T>();
    const T lr_t = lr * std::sqrt(T(1) - beta2_power) / (T(1) - beta1_power);
    m += (g - m) * (T(1) - beta1);
    v += (g.square() - v) * (T(1) - beta2);
    if (nesterov_) {
      w -= ((m * beta1 + g * (T(1) - beta1)) * lr_t) / (v.sqrt() + epsilon);
    } else {
      w -= (m * lr_t) / (v.sqrt() + epsilon);
    }
  }

 private:
  bool nesterov_ = false;
};

template <typename T>
absl::Status RegisterTyped(KernelRegistry* r) {
  auto def = [](const char* op) {
    return KernelDefBuilder(op).TypeConstraint("T", DataTypeToEnum<T>::value);
  };
  COHORT_RETURN_IF_ERROR(
      r->Register<ApplyGradientDescentOp<T>>(def("ApplyGradientDescent")));
  COHORT_RETURN_IF_ERROR(r->Register<ApplyGradientDescentOp<T>>(
      def("ResourceApplyGradientDescent")));
  COHORT_RETURN_IF_ERROR(r->Register<ApplyMomentumOp<T>>(def("ApplyMomentum")));
  COHORT_RETURN_IF_ERROR(r->Register<ApplyAdamOp<T>>(def("ApplyAdam")));
  return absl::OkStatus();
}

}  // namespace

absl::Status RegisterTrainingOps(OpRegistry* r) {
  // cohort's ApplyGradientDescent takes a resource variable, which is what
  // TensorFlow calls ResourceApplyGradientDescent (its ApplyGradientDescent
  // takes a reference variable cohort does not have); both names run the
  // same kernel so GraphDefs TensorFlow wrote with resource variables load.
  for (const char* name :
       {"ApplyGradientDescent", "ResourceApplyGradientDescent"}) {
    COHORT_RETURN_IF_ERROR(r->Register(OpDefBuilder(name)
                                           .Input("var: resource")
                                           .Input("alpha: T")
                                           .Input("delta: T")
                                           .Attr("T: {float, double}")
                                           .Attr("use_locking: bool = false")
                                           .SetIsStateful()
                                           .SetShapeFn(shape_fns::NoOutputs)));
  }
  COHORT_RETURN_IF_ERROR(r->Register(OpDefBuilder("ApplyMomentum")
                                         .Input("var: resource")
                                         .Input("accum: resource")
                                         .Input("lr: T")
                                         .Input("grad: T")
                                         .Input("momentum: T")
                                         .Attr("T: {float, double}")
                                         .Attr("use_locking: bool = false")
                                         .Attr("use_nesterov: bool = false")
                                         .SetIsStateful()
                                         .SetShapeFn(shape_fns::NoOutputs)));
  COHORT_RETURN_IF_ERROR(r->Register(OpDefBuilder("ApplyAdam")
                                         .Input("var: resource")
                                         .Input("m: resource")
                                         .Input("v: resource")
                                         .Input("beta1_power: T")
                                         .Input("beta2_power: T")
                                         .Input("lr: T")
                                         .Input("beta1: T")
                                         .Input("beta2: T")
                                         .Input("epsilon: T")
                                         .Input("grad: T")
                                         .Attr("T: {float, double}")
                                         .Attr("use_locking: bool = false")
                                         .Attr("use_nesterov: bool = false")
                                         .SetIsStateful()
                                         .SetShapeFn(shape_fns::NoOutputs)));
  return absl::OkStatus();
}

absl::Status RegisterTrainingKernels(KernelRegistry* r) {
  COHORT_RETURN_IF_ERROR(RegisterTyped<float>(r));
  COHORT_RETURN_IF_ERROR(RegisterTyped<double>(r));
  return absl::OkStatus();
}

namespace ops {

Operation ApplyGradientDescent(const Scope& s, Input var, Input alpha,
                               Input delta) {
  Output d = delta.ToOutput(s);
  return BuildOp(s, "ApplyGradientDescent",
                 {var.ToOutput(s), alpha.ToOutput(s, d.dtype()), d});
}

Operation ApplyMomentum(const Scope& s, Input var, Input accum, Input lr,
                        Input grad, Input momentum, bool use_nesterov) {
  Output g = grad.ToOutput(s);
  return BuildOp(s, "ApplyMomentum",
                 {var.ToOutput(s), accum.ToOutput(s), lr.ToOutput(s, g.dtype()),
                  g, momentum.ToOutput(s, g.dtype())},
                 {{"use_nesterov", use_nesterov}});
}

Operation ApplyAdam(const Scope& s, Input var, Input m, Input v,
                    Input beta1_power, Input beta2_power, Input lr, Input beta1,
                    Input beta2, Input epsilon, Input grad, bool use_nesterov) {
  Output g = grad.ToOutput(s);
  const DataType t = g.dtype();
  return BuildOp(s, "ApplyAdam",
                 {var.ToOutput(s), m.ToOutput(s), v.ToOutput(s),
                  beta1_power.ToOutput(s, t), beta2_power.ToOutput(s, t),
                  lr.ToOutput(s, t), beta1.ToOutput(s, t), beta2.ToOutput(s, t),
                  epsilon.ToOutput(s, t), g},
                 {{"use_nesterov", use_nesterov}});
}

}  // namespace ops
}  // namespace cohort
