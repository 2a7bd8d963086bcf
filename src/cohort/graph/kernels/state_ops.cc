#include "cohort/graph/kernels/state_ops.h"

#include "absl/strings/str_cat.h"
#include "cohort/base/status.h"
#include "cohort/graph/device.h"
#include "cohort/graph/kernels/array_ops.h"

namespace cohort {
namespace {

absl::Status ScalarShapeFn(InferenceContext* c) { return shape_fns::Scalar(c); }

absl::Status ReadShapeFn(InferenceContext* c) {
  // The declared shape lives on the VarHandleOp; unknown here.
  c->set_output(0, PartialTensorShape::UnknownRank());
  return absl::OkStatus();
}

std::string VarName(const ResourceHandle& h,
                    const std::string& default_container) {
  return absl::StrCat("variable '", h.name, "' (container '",
                      h.container.empty() ? default_container : h.container,
                      "')");
}

class VarHandleOpKernel : public OpKernel {
 public:
  explicit VarHandleOpKernel(OpKernelConstruction* ctx) : OpKernel(ctx) {
    COHORT_OP_REQUIRES_OK(ctx, ctx->GetAttr("container", &handle_.container));
    COHORT_OP_REQUIRES_OK(ctx, ctx->GetAttr("shared_name", &handle_.name));
    if (handle_.name.empty()) handle_.name = name();
    COHORT_OP_REQUIRES_OK(ctx, ctx->GetAttr("dtype", &dtype_));
    COHORT_OP_REQUIRES_OK(ctx, ctx->GetAttr("shape", &shape_));
    handle_.device = ctx->device() != nullptr ? ctx->device()->name() : "";
    handle_.type_name = Var::kTypeName;
    handle_tensor_ = Tensor(handle_);
  }
  void Compute(OpKernelContext* ctx) override {
    ResourceMgr* rm = ctx->resource_manager();
    std::function<absl::StatusOr<std::shared_ptr<Var>>()> create = [this]() {
      return std::make_shared<Var>(dtype_, shape_, handle_.name);
    };
    auto var = rm->LookupOrCreate<Var>(handle_.container, handle_.name, create);
    COHORT_OP_REQUIRES_OK(ctx, var.status());
    COHORT_OP_REQUIRES(
        ctx, (*var)->dtype() == dtype_,
        absl::InvalidArgumentError(
            absl::StrCat(VarName(handle_, rm->default_container()),
                         " exists with dtype ", DataTypeName((*var)->dtype()),
                         " but this handle declares ", DataTypeName(dtype_))));
    ctx->set_output(0, handle_tensor_);
  }

 private:
  ResourceHandle handle_;
  DataType dtype_ = DT_INVALID;
  PartialTensorShape shape_;
  Tensor handle_tensor_;
};

class ReadVariableOpKernel : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    auto var_or = LookupVariable(ctx, 0);
    COHORT_OP_REQUIRES_OK(ctx, var_or.status());
    std::shared_ptr<Var> var = *std::move(var_or);
    COHORT_OP_REQUIRES(
        ctx, var->dtype() == output_types()[0],
        absl::InvalidArgumentError(absl::StrCat(
            "variable '", var->name(), "' is ", DataTypeName(var->dtype()),
            ", read as ", DataTypeName(output_types()[0]))));
    absl::ReaderMutexLock lock(var->mu());
    COHORT_OP_REQUIRES_OK(ctx, CheckInitialized(*var));
    ctx->set_output(0, var->value());
  }
};

enum class AssignMode { kAssign, kAdd, kSub };

template <typename T>
void AddInPlace(Tensor* dst, const Tensor& v, bool subtract) {
  auto d = dst->flat<T>();
  auto s = v.flat<T>();
  if (subtract) {
    d -= s;
  } else {
    d += s;
  }
}

template <AssignMode kMode>
class AssignVariableKernel : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    const Tensor& value = ctx->input(1);
    std::shared_ptr<Var> var;
    if (kMode == AssignMode::kAssign) {
      const Tensor& ht = ctx->input(0);
      COHORT_OP_REQUIRES(
          ctx, ht.NumElements() == 1,
          absl::InvalidArgumentError("resource handle must be a scalar"));
      const ResourceHandle& h = ht.scalar<ResourceHandle>();
      DataType dtype = value.dtype();
      std::function<absl::StatusOr<std::shared_ptr<Var>>()> create = [&]() {
        return std::make_shared<Var>(dtype, PartialTensorShape(), h.name);
      };
      auto v = ctx->resource_manager()->LookupOrCreate<Var>(h.container, h.name,
                                                            create);
      COHORT_OP_REQUIRES_OK(ctx, v.status());
      var = *std::move(v);
    } else {
      auto v = LookupVariable(ctx, 0);
      COHORT_OP_REQUIRES_OK(ctx, v.status());
      var = *std::move(v);
    }
    COHORT_OP_REQUIRES(ctx, var->dtype() == value.dtype(),
                       absl::InvalidArgumentError(absl::StrCat(
                           "cannot assign a ", DataTypeName(value.dtype()),
                           " value to variable '", var->name(), "' of dtype ",
                           DataTypeName(var->dtype()))));
    absl::MutexLock lock(var->mu());
    if (kMode == AssignMode::kAssign) {
      COHORT_OP_REQUIRES(
          ctx, var->declared_shape().IsCompatibleWith(value.shape()),
          absl::InvalidArgumentError(absl::StrCat(
              "cannot assign a value of shape ", value.shape().DebugString(),
              " to variable '", var->name(), "' declared with shape ",
              var->declared_shape().DebugString())));
      var->Assign(value);
      return;
    }
    COHORT_OP_REQUIRES_OK(ctx, CheckInitialized(*var));
    COHORT_OP_REQUIRES(
        ctx, var->value().shape() == value.shape(),
        absl::InvalidArgumentError(absl::StrCat(
            "cannot ", kMode == AssignMode::kAdd ? "add" : "subtract",
            " a value of shape ", value.shape().DebugString(), " to variable '",
            var->name(), "' of shape ", var->value().shape().DebugString())));
    var->PrepareForUpdate();
    bool sub = kMode == AssignMode::kSub;
    switch (value.dtype()) {
      case DT_FLOAT:
        AddInPlace<float>(var->tensor(), value, sub);
        break;
      case DT_DOUBLE:
        AddInPlace<double>(var->tensor(), value, sub);
        break;
      case DT_INT32:
        AddInPlace<int32_t>(var->tensor(), value, sub);
        break;
      case DT_INT64:
        AddInPlace<int64_t>(var->tensor(), value, sub);
        break;
      default:
        ctx->SetStatus(absl::InvalidArgumentError(
            absl::StrCat("cannot add to a variable of dtype ",
                         DataTypeName(value.dtype()))));
    }
  }
};

class VarIsInitializedKernel : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    const Tensor& ht = ctx->input(0);
    COHORT_OP_REQUIRES(
        ctx, ht.NumElements() == 1,
        absl::InvalidArgumentError("resource handle must be a scalar"));
    const ResourceHandle& h = ht.scalar<ResourceHandle>();
    auto var = ctx->resource_manager()->Lookup<Var>(h);
    bool init = false;
    if (var.ok()) {
      absl::ReaderMutexLock lock((*var)->mu());
      init = (*var)->is_initialized();
    }
    ctx->set_output(0, Tensor(init));
  }
};

class ReportUninitializedVariablesKernel : public OpKernel {
 public:
  explicit ReportUninitializedVariablesKernel(OpKernelConstruction* ctx)
      : OpKernel(ctx) {
    COHORT_OP_REQUIRES_OK(ctx, ctx->GetAttr("names", &names_));
  }
  void Compute(OpKernelContext* ctx) override {
    COHORT_OP_REQUIRES(
        ctx, static_cast<int>(names_.size()) == ctx->num_inputs(),
        absl::InvalidArgumentError(
            absl::StrCat("ReportUninitializedVariables has ", ctx->num_inputs(),
                         " inputs but ", names_.size(), " names")));
    std::vector<const std::string*> missing;
    for (int i = 0; i < ctx->num_inputs(); ++i) {
      const Tensor& initialized = ctx->input(i);
      COHORT_OP_REQUIRES(
          ctx, initialized.NumElements() == 1,
          absl::InvalidArgumentError(absl::StrCat(
              "ReportUninitializedVariables: input ", i, " (variable '",
              names_[i], "') must be a bool scalar, got shape ",
              initialized.shape().DebugString())));
      if (!initialized.scalar<bool>()) missing.push_back(&names_[i]);
    }
    Tensor out(DT_STRING, TensorShape({static_cast<int64_t>(missing.size())}));
    auto flat = out.flat<std::string>();
    for (size_t i = 0; i < missing.size(); ++i) flat(i) = *missing[i];
    ctx->set_output(0, out);
  }

 private:
  std::vector<std::string> names_;
};

absl::Status VectorShapeFn(InferenceContext* c) {
  c->set_output(0, PartialTensorShape({-1}));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::shared_ptr<Var>> LookupVariable(OpKernelContext* ctx,
                                                    int index) {
  const Tensor& t = ctx->input(index);
  if (t.dtype() != DT_RESOURCE || t.NumElements() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("input ", index, " must be a scalar resource handle, got ",
                     t.DebugString(1)));
  }
  const ResourceHandle& h = t.scalar<ResourceHandle>();
  auto var = ctx->resource_manager()->Lookup<Var>(h);
  if (absl::IsNotFound(var.status())) {
    return absl::FailedPreconditionError(absl::StrCat(
        VarName(h, ctx->resource_manager()->default_container()),
        " is uninitialized (it does not exist on this device; was the session "
        "reset?); run its initializer first"));
  }
  return var;
}

absl::Status CheckInitialized(const Var& var) {
  if (!var.is_initialized()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "variable '", var.name(),
        "' is uninitialized; run its initializer "
        "(e.g. GlobalVariablesInitializer) or restore a checkpoint first"));
  }
  return absl::OkStatus();
}

absl::Status RegisterStateOps(OpRegistry* r) {
  COHORT_RETURN_IF_ERROR(
      r->Register(OpDefBuilder("VarHandleOp")
                      .Output("resource: resource")
                      .Attr("container: string = ''")
                      .Attr("shared_name: string = ''")
                      // Only a name for debugging.
                      .Attr("debug_name: string = ''")
                      .Attr("dtype: type")
                      .Attr("shape: shape = <unknown>")
                      .Attr("allowed_devices: list(string) "
                            "= []")
                      .RequireDefault("allowed_devices",
                                      "a variable lives on the one "
                                      "device it is placed on")
                      .SetIsStateful()
                      .SetShapeFn(ScalarShapeFn)));
  COHORT_RETURN_IF_ERROR(r->Register(OpDefBuilder("ReadVariableOp")
                                         .Input("resource: resource")
                                         .Output("value: dtype")
                                         .Attr("dtype: type")
                                         .SetIsStateful()
                                         .SetShapeFn(ReadShapeFn)));
  for (const char* op :
       {"AssignVariableOp", "AssignAddVariableOp", "AssignSubVariableOp"}) {
    OpDefBuilder b(op);
    b.Input("resource: resource")
        .Input("value: dtype")
        .Attr("dtype: type")
        .SetIsStateful()
        .SetShapeFn(shape_fns::NoOutputs);
    // Only TensorFlow's AssignVariableOp has validate_shape; true would
    // refuse a value whose shape differs from the variable's current one,
    // where cohort checks only the declared shape.
    if (absl::string_view(op) == "AssignVariableOp") {
      b.Attr("validate_shape: bool = false")
          .RequireDefault("validate_shape",
                          "an assign checks the declared shape only");
    }
    COHORT_RETURN_IF_ERROR(r->Register(b));
  }
  COHORT_RETURN_IF_ERROR(r->Register(OpDefBuilder("VarIsInitializedOp")
                                         .Input("resource: resource")
                                         .Output("is_initialized: bool")
                                         .SetIsStateful()
                                         .SetShapeFn(ScalarShapeFn)));
  COHORT_RETURN_IF_ERROR(
      r->Register(OpDefBuilder("ReportUninitializedVariables")
                      .Attr("N: int >= 0")
                      .Input("is_initialized: N * bool")
                      .Attr("names: list(string)")
                      .Output("uninitialized: string")
                      .SetShapeFn(VectorShapeFn)));
  return absl::OkStatus();
}

absl::Status RegisterStateKernels(KernelRegistry* r) {
  COHORT_RETURN_IF_ERROR(
      r->Register<VarHandleOpKernel>(KernelDefBuilder("VarHandleOp")));
  COHORT_RETURN_IF_ERROR(
      r->Register<ReadVariableOpKernel>(KernelDefBuilder("ReadVariableOp")));
  COHORT_RETURN_IF_ERROR(r->Register<AssignVariableKernel<AssignMode::kAssign>>(
      KernelDefBuilder("AssignVariableOp")));
  COHORT_RETURN_IF_ERROR(r->Register<AssignVariableKernel<AssignMode::kAdd>>(
      KernelDefBuilder("AssignAddVariableOp")));
  COHORT_RETURN_IF_ERROR(r->Register<AssignVariableKernel<AssignMode::kSub>>(
      KernelDefBuilder("AssignSubVariableOp")));
  COHORT_RETURN_IF_ERROR(r->Register<VarIsInitializedKernel>(
      KernelDefBuilder("VarIsInitializedOp")));
  COHORT_RETURN_IF_ERROR(r->Register<ReportUninitializedVariablesKernel>(
      KernelDefBuilder("ReportUninitializedVariables")));
  return absl::OkStatus();
}

namespace ops {

Output VarHandleOp(const Scope& scope, DataType dtype,
                   const PartialTensorShape& shape,
                   const std::string& container,
                   const std::string& shared_name) {
  return BuildOp(scope, "VarHandleOp", {},
                 {{"dtype", dtype},
                  {"shape", shape},
                  {"container", container},
                  {"shared_name", shared_name}})
      .output(0);
}

Output ReadVariableOp(const Scope& scope, Input resource, DataType dtype) {
  return BuildOp(scope, "ReadVariableOp", {resource.ToOutput(scope)},
                 {{"dtype", dtype}})
      .output(0);
}

namespace {
Operation Assign(const char* op, const Scope& scope, Input resource,
                 Input value) {
  Output r = resource.ToOutput(scope);
  Output v = value.ToOutput(scope);
  return BuildOp(scope, op, {r, v});
}
}  // namespace

Operation AssignVariableOp(const Scope& scope, Input resource, Input value) {
  return Assign("AssignVariableOp", scope, resource, value);
}
Operation AssignAddVariableOp(const Scope& scope, Input resource, Input value) {
  return Assign("AssignAddVariableOp", scope, resource, value);
}
Operation AssignSubVariableOp(const Scope& scope, Input resource, Input value) {
  return Assign("AssignSubVariableOp", scope, resource, value);
}
Output VarIsInitializedOp(const Scope& scope, Input resource) {
  return BuildOp(scope, "VarIsInitializedOp", {resource.ToOutput(scope)})
      .output(0);
}

Output ReportUninitializedVariables(const Scope& scope,
                                    const std::vector<Output>& is_initialized,
                                    const std::vector<std::string>& names) {
  return BuildOp(scope, "ReportUninitializedVariables",
                 {NodeInput(is_initialized)}, {{"names", names}})
      .output(0);
}

Variable MakeVariable(const Scope& scope, const std::string& name,
                      Input initial_value) {
  Variable v;
  Scope s = scope.WithNoControlDependencies();
  Output init = initial_value.ToOutput(s, DT_INVALID, name + "/initial_value");
  if (!init.valid()) return v;
  v.dtype = init.dtype();
  v.handle = VarHandleOp(s.WithOpName(name), init.dtype(), init.shape());
  if (!v.handle.valid()) return v;
  // The handle may have been renamed to stay unique ("w_1").
  std::string rel = v.handle.node_name();
  if (!scope.name_scope().empty())
    rel = rel.substr(scope.name_scope().size() + 1);
  v.value = ReadVariableOp(s.WithOpName(rel + "/read"), v.handle, v.dtype);
  v.initializer =
      AssignVariableOp(s.WithOpName(rel + "/Assign"), v.handle, init);
  if (v.initializer.valid()) scope.AddInitializer(v.initializer);
  return v;
}

Operation GlobalVariablesInitializer(const Scope& scope) {
  return NoOp(scope.WithNoControlDependencies()
                  .WithControlDependencies(scope.Initializers())
                  .WithOpName("init"));
}

Variable GetOrCreateGlobalStep(const Scope& scope) {
  Variable v;
  Operation existing = scope.FindOp("global_step");
  if (existing.valid()) {
    v.handle = existing.output(0);
    v.dtype = DT_INT64;
    v.value = scope.FindOp("global_step/read").output(0);
    v.initializer = scope.FindOp("global_step/Assign");
    return v;
  }
  // Always at the top level of the graph, like TensorFlow's.
  Scope root = Scope::RootOf(scope);
  v.dtype = DT_INT64;
  v.handle = VarHandleOp(root.WithOpName("global_step"), DT_INT64,
                         PartialTensorShape::Scalar());
  v.value =
      ReadVariableOp(root.WithOpName("global_step/read"), v.handle, DT_INT64);
  v.initializer = AssignVariableOp(root.WithOpName("global_step/Assign"),
                                   v.handle, Tensor(int64_t{0}));
  if (v.initializer.valid()) scope.AddInitializer(v.initializer);
  // TensorFlow's create_global_step adds the variable to the GLOBAL_STEP
  // collection, where training_util's GetGlobalStep looks first.
  if (v.handle.valid()) scope.AddToCollection("global_step", v.handle.op());
  return v;
}

Operation IncrementGlobalStep(const Scope& scope, const Variable& step) {
  return AssignAddVariableOp(scope, step.handle, Tensor(int64_t{1}));
}

}  // namespace ops
}  // namespace cohort
