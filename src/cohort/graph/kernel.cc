#include "cohort/graph/kernel.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/notification.h"
#include "cohort/base/status.h"
#include "cohort/graph/device.h"

namespace cohort {

OpKernel::OpKernel(OpKernelConstruction* ctx)
    : def_(ctx->def()),
      input_types_(ctx->input_types()),
      output_types_(ctx->output_types()) {}

void AsyncOpKernel::Compute(OpKernelContext* ctx) {
  absl::Notification n;
  ComputeAsync(ctx, [&n]() { n.Notify(); });
  n.WaitForNotification();
}

OpKernelContext::OpKernelContext(const Params* params)
    : params_(params), outputs_(params->op_kernel->num_outputs()) {}

bool OpKernelContext::ForwardInput(int i, Tensor* out) {
  // The slots are the executor's, written only by it between kernels; the
  // Params view is const so that kernels do not write them by accident.
  Tensor& slot = const_cast<Tensor&>(params_->inputs[i]);
  if (!slot.RefCountIsOne()) return false;
  *out = std::move(slot);
  slot = Tensor();
  return true;
}

namespace {

// Names the tensor in an allocation error; built only on failure, so the
// fast path formats nothing.
absl::Status AllocationError(const absl::Status& s, absl::string_view kind,
                             int index, DataType dtype,
                             const TensorShape& shape) {
  return absl::Status(
      s.code(), absl::StrCat(kind, index >= 0 ? absl::StrCat(" ", index) : "",
                             " (", DataTypeName(dtype), " ",
                             shape.DebugString(), ")", s.message()));
}

}  // namespace

absl::Status OpKernelContext::allocate_output(int index,
                                              const TensorShape& shape,
                                              Tensor** out) {
  if (index < 0 || index >= num_outputs()) {
    return absl::InvalidArgumentError(absl::StrCat("allocate_output(", index,
                                                   ") but the op has ",
                                                   num_outputs(), " outputs"));
  }
  const DataType dtype = expected_output_dtype(index);
  auto t = Tensor::Allocate(dtype, shape, params_->memory_budget, "");
  if (!t.ok())
    return AllocationError(t.status(), "output", index, dtype, shape);
  outputs_[index] = *std::move(t);
  *out = &outputs_[index];
  return absl::OkStatus();
}

absl::Status OpKernelContext::forward_input_or_allocate_output(
    int input, int output, TensorShape shape, Tensor** out) {
  if (output >= 0 && output < num_outputs() && input >= 0 &&
      input < num_inputs()) {
    const Tensor& in = params_->inputs[input];
    Tensor taken;
    if (in.IsInitialized() && in.dtype() == expected_output_dtype(output) &&
        in.NumElements() == shape.num_elements() &&
        ForwardInput(input, &taken)) {
      absl::StatusOr<Tensor> reshaped = taken.Reshaped(shape);
      if (!reshaped.ok()) return reshaped.status();  // Counts match: never.
      outputs_[output] = *std::move(reshaped);
      *out = &outputs_[output];
      return absl::OkStatus();
    }
  }
  return allocate_output(output, shape, out);
}

absl::Status OpKernelContext::allocate_temp(DataType dtype,
                                            const TensorShape& shape,
                                            Tensor* out) {
  auto t = Tensor::Allocate(dtype, shape, params_->memory_budget, "");
  if (!t.ok()) {
    return AllocationError(t.status(), "a scratch tensor", -1, dtype, shape);
  }
  *out = *std::move(t);
  return absl::OkStatus();
}

ResourceMgr* OpKernelContext::resource_manager() const {
  return params_->device->resource_manager();
}

const Eigen::ThreadPoolDevice& OpKernelContext::eigen_cpu_device() const {
  return params_->device->eigen_cpu_device();
}

std::string KernelDef::DebugString() const {
  std::string s = absl::StrCat(op, " [", device_type, "]");
  for (const auto& [attr, type] : type_constraints) {
    absl::StrAppend(&s, " ", attr, "=", DataTypeName(type));
  }
  return s;
}

absl::Status KernelRegistry::Register(const KernelDefBuilder& def,
                                      KernelFactory factory) {
  absl::MutexLock lock(&mu_);
  auto& list = kernels_[def.def().op];
  auto sorted = [](std::vector<std::pair<std::string, DataType>> v) {
    std::sort(v.begin(), v.end());
    return v;
  };
  for (const auto& e : list) {
    if (e.def.device_type == def.def().device_type &&
        sorted(e.def.type_constraints) == sorted(def.def().type_constraints)) {
      return absl::AlreadyExistsError(absl::StrCat(
          "kernel ", def.def().DebugString(), " is already registered"));
    }
  }
  list.push_back(Entry{def.def(), std::move(factory)});
  return absl::OkStatus();
}

const KernelRegistry::Entry* KernelRegistry::Find(
    const NodeDef& node, absl::string_view device_type) const {
  auto it = kernels_.find(node.op());
  if (it == kernels_.end()) return nullptr;
  for (const auto& e : it->second) {
    if (e.def.device_type != device_type) continue;
    bool match = true;
    for (const auto& [attr, type] : e.def.type_constraints) {
      auto a = node.attr().find(attr);
      if (a == node.attr().end() ||
          a->second.value_case() != AttrValue::kType ||
          a->second.type() != type) {
        match = false;
        break;
      }
    }
    if (match) return &e;
  }
  return nullptr;
}

bool KernelRegistry::HasKernel(const NodeDef& node,
                               absl::string_view device_type) const {
  absl::ReaderMutexLock lock(&mu_);
  return Find(node, device_type) != nullptr;
}

absl::StatusOr<std::unique_ptr<OpKernel>> KernelRegistry::CreateKernel(
    const NodeDef& node, const OpDef& op_def, Device* device,
    absl::string_view device_type) const {
  KernelFactory factory;
  {
    absl::ReaderMutexLock lock(&mu_);
    const Entry* e = Find(node, device_type);
    if (e == nullptr) {
      std::vector<std::string> have;
      auto it = kernels_.find(node.op());
      if (it != kernels_.end()) {
        for (const auto& k : it->second) have.push_back(k.def.DebugString());
      }
      std::string attrs;
      for (const auto& a : op_def.attrs) {
        if (a.type != "type") continue;
        auto v = node.attr().find(a.name);
        if (v != node.attr().end()) {
          absl::StrAppend(&attrs, " ", a.name, "=",
                          AttrValueDebugString(v->second));
        }
      }
      return absl::InvalidArgumentError(absl::StrCat(
          "no ", device_type, " kernel for ", NodeDebugName(node), " with",
          attrs.empty() ? " no type attrs" : attrs, "; registered: ",
          have.empty() ? "none (was its Register...Kernels function called?)"
                       : absl::StrJoin(have, ", ")));
    }
    factory = e->factory;
  }
  std::vector<DataType> in, out;
  COHORT_RETURN_IF_ERROR(InOutTypesForNode(node, op_def, &in, &out));
  OpKernelConstruction ctx(&node, &op_def, std::move(in), std::move(out),
                           device);
  std::unique_ptr<OpKernel> kernel = factory(&ctx);
  if (!ctx.status().ok()) return AttachNodeName(ctx.status(), node);
  if (kernel == nullptr) {
    return absl::InternalError(absl::StrCat(
        "kernel factory for ", NodeDebugName(node), " returned null"));
  }
  return kernel;
}

std::vector<KernelDef> KernelRegistry::ListKernels() const {
  std::vector<KernelDef> out;
  absl::ReaderMutexLock lock(&mu_);
  for (const auto& [op, list] : kernels_) {
    for (const auto& e : list) out.push_back(e.def);
  }
  std::sort(out.begin(), out.end(), [](const KernelDef& a, const KernelDef& b) {
    return a.DebugString() < b.DebugString();
  });
  return out;
}

}  // namespace cohort
