#include "cohort/graph/kernels/array_ops.h"

#include "absl/strings/str_cat.h"
#include "cohort/base/status.h"
#include "cohort/graph/device.h"

namespace cohort {
namespace {

absl::Status ConstShape(InferenceContext* c) {
  Tensor value;
  COHORT_RETURN_IF_ERROR(c->GetAttr("value", &value));
  DataType dtype;
  COHORT_RETURN_IF_ERROR(c->GetAttr("dtype", &dtype));
  if (value.dtype() != dtype) {
    return c->InvalidArgument(
        absl::StrCat("value is ", DataTypeName(value.dtype()), " but dtype is ",
                     DataTypeName(dtype)));
  }
  c->set_output(0, value.shape());
  return absl::OkStatus();
}

absl::Status PlaceholderShape(InferenceContext* c) {
  PartialTensorShape shape;
  COHORT_RETURN_IF_ERROR(c->GetAttr("shape", &shape));
  c->set_output(0, shape);
  return absl::OkStatus();
}

class ConstOp : public OpKernel {
 public:
  explicit ConstOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    // The value lives as long as the kernel, and a few bytes of GraphDef
    // may declare up to 1 GiB (one value broadcast to a shape): it is
    // charged to the device's budget like the tensors steps make.
    auto attr = ctx->def().attr().find("value");
    if (attr == ctx->def().attr().end() || !attr->second.has_tensor() ||
        ctx->device() == nullptr) {
      COHORT_OP_REQUIRES_OK(ctx, ctx->GetAttr("value", &value_));
    } else {
      auto value = Tensor::FromProto(attr->second.tensor(),
                                     ctx->device()->memory_budget(), "value");
      COHORT_OP_REQUIRES_OK(ctx, value.status());
      value_ = *std::move(value);
    }
    DataType dtype;
    COHORT_OP_REQUIRES_OK(ctx, ctx->GetAttr("dtype", &dtype));
    COHORT_OP_REQUIRES(ctx, value_.dtype() == dtype,
                       absl::InvalidArgumentError(absl::StrCat(
                           "value is ", DataTypeName(value_.dtype()),
                           " but attr dtype is ", DataTypeName(dtype))));
  }
  // Shares the constant's buffer; consumers must not write to inputs.
  void Compute(OpKernelContext* ctx) override { ctx->set_output(0, value_); }

 private:
  Tensor value_;
};

class PlaceholderOp : public OpKernel {
 public:
  explicit PlaceholderOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    DataType dtype;
    COHORT_OP_REQUIRES_OK(ctx, ctx->GetAttr("dtype", &dtype));
    PartialTensorShape shape;
    COHORT_OP_REQUIRES_OK(ctx, ctx->GetAttr("shape", &shape));
    what_ = absl::StrCat(DataTypeName(dtype), ", shape ", shape.DebugString());
  }
  // Only runs when not fed: feeding replaces the node's output.
  void Compute(OpKernelContext* ctx) override {
    ctx->SetStatus(absl::InvalidArgumentError(absl::StrCat(
        "you must feed a value for placeholder '", name(), "' (", what_, ")")));
  }

 private:
  std::string what_;
};

class IdentityOp : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    ctx->set_output(0, ctx->input(0));
  }
};

class NoOpKernel : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {}
};

}  // namespace

absl::Status RegisterArrayOps(OpRegistry* r) {
  COHORT_RETURN_IF_ERROR(r->Register(OpDefBuilder("Const")
                                         .Output("output: dtype")
                                         .Attr("value: tensor")
                                         .Attr("dtype: type")
                                         .SetShapeFn(ConstShape)));
  COHORT_RETURN_IF_ERROR(r->Register(OpDefBuilder("Placeholder")
                                         .Output("output: dtype")
                                         .Attr("dtype: type")
                                         .Attr("shape: shape = <unknown>")
                                         .SetShapeFn(PlaceholderShape)));
  COHORT_RETURN_IF_ERROR(r->Register(OpDefBuilder("Identity")
                                         .Input("input: T")
                                         .Output("output: T")
                                         .Attr("T: type")
                                         .SetShapeFn(shape_fns::Unchanged)));
  COHORT_RETURN_IF_ERROR(
      r->Register(OpDefBuilder("NoOp").SetShapeFn(shape_fns::NoOutputs)));
  return absl::OkStatus();
}

absl::Status RegisterArrayKernels(KernelRegistry* r) {
  COHORT_RETURN_IF_ERROR(r->Register<ConstOp>(KernelDefBuilder("Const")));
  COHORT_RETURN_IF_ERROR(
      r->Register<PlaceholderOp>(KernelDefBuilder("Placeholder")));
  COHORT_RETURN_IF_ERROR(r->Register<IdentityOp>(KernelDefBuilder("Identity")));
  COHORT_RETURN_IF_ERROR(r->Register<NoOpKernel>(KernelDefBuilder("NoOp")));
  return absl::OkStatus();
}

namespace ops {

Output Const(const Scope& scope, const Tensor& value) {
  return BuildOp(scope, "Const", {},
                 {{"value", value}, {"dtype", value.dtype()}})
      .output(0);
}

Output Const(const Scope& scope, const Input& value) {
  if (value.tensor().has_value()) return Const(scope, *value.tensor());
  return value.ToOutput(scope);
}

Output Placeholder(const Scope& scope, DataType dtype,
                   const PartialTensorShape& shape) {
  return BuildOp(scope, "Placeholder", {}, {{"dtype", dtype}, {"shape", shape}})
      .output(0);
}

Output Identity(const Scope& scope, Input x) {
  return BuildOp(scope, "Identity", {x.ToOutput(scope)}).output(0);
}

Operation NoOp(const Scope& scope) { return BuildOp(scope, "NoOp", {}); }

}  // namespace ops
}  // namespace cohort
