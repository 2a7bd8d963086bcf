#include "cohort/graph/kernel_test_util.h"

#include <cmath>
#include <cstring>
#include <random>

#include "absl/strings/str_cat.h"
#include "cohort/graph/kernels/array_ops.h"
#include "cohort/graph/standard_registries.h"
#include "gtest/gtest.h"

namespace cohort {

Device* TestDevice() {
  static Device* device =
      new Device("/job:localhost/replica:0/task:0/device:CPU:0", 2);
  return device;
}

namespace {

// RunKernel's body: `inputs` move into the kernel's slots, so they hold the
// only references unless the caller kept some.
absl::StatusOr<std::vector<Tensor>> RunKernelOn(
    absl::string_view op, std::vector<KernelInput> inputs,
    const std::vector<NamedAttr>& attrs) {
  Scope root = Scope::NewRootScope();
  std::vector<NodeInput> node_inputs;
  std::vector<Tensor> flat;
  int k = 0;
  auto placeholder = [&](Tensor& t) {
    auto p = ops::Placeholder(root.WithOpName(absl::StrCat("input", k++)),
                              t.dtype(), t.shape());
    flat.push_back(std::move(t));
    return p;
  };
  for (auto& in : inputs) {
    if (in.is_list) {
      std::vector<Output> list;
      for (auto& t : in.list) list.push_back(placeholder(t));
      node_inputs.emplace_back(std::move(list));
    } else {
      node_inputs.emplace_back(placeholder(in.single));
    }
  }
  Operation node = BuildOp(root.WithOpName("op"), op, node_inputs, attrs);
  if (!root.ok()) return root.status();
  auto kernel = StandardKernelRegistry()->CreateKernel(
      node.node_def(), node.op_def(), TestDevice());
  if (!kernel.ok()) return kernel.status();
  OpKernelContext::Params params;
  params.op_kernel = kernel->get();
  params.device = TestDevice();
  params.inputs = flat.data();
  params.num_inputs = static_cast<int>(flat.size());
  params.step_id = 1;
  OpKernelContext ctx(&params);
  (*kernel)->Compute(&ctx);
  if (!ctx.status().ok()) return AttachNodeName(ctx.status(), node.node_def());
  std::vector<Tensor> out;
  for (int i = 0; i < ctx.num_outputs(); ++i) {
    Tensor& t = (*ctx.outputs())[i];
    if (!t.IsInitialized()) {
      return absl::InternalError(
          absl::StrCat("kernel left output ", i, " unset"));
    }
    if (t.dtype() != kernel->get()->output_types()[i]) {
      return absl::InternalError(absl::StrCat(
          "kernel output ", i, " is ", DataTypeName(t.dtype()), ", declared ",
          DataTypeName(kernel->get()->output_types()[i])));
    }
    out.push_back(std::move(t));
  }
  return out;
}

}  // namespace

absl::StatusOr<std::vector<Tensor>> RunKernel(
    absl::string_view op, const std::vector<KernelInput>& inputs,
    const std::vector<NamedAttr>& attrs) {
  return RunKernelOn(op, inputs, attrs);
}

absl::StatusOr<std::vector<Tensor>> RunKernelOnOwnedInputs(
    absl::string_view op, std::vector<Tensor> inputs,
    const std::vector<NamedAttr>& attrs) {
  std::vector<KernelInput> owned;
  for (Tensor& t : inputs) owned.emplace_back(std::move(t));
  inputs.clear();
  return RunKernelOn(op, std::move(owned), attrs);
}

void ExpectTensorEqual(const Tensor& actual, const Tensor& expected) {
  EXPECT_TRUE(actual.Equals(expected))
      << "actual:   " << actual.DebugString(20)
      << "\nexpected: " << expected.DebugString(20);
}

void ExpectTensorNear(const Tensor& actual, const Tensor& expected,
                      double tol) {
  ASSERT_EQ(DataTypeName(actual.dtype()), DataTypeName(expected.dtype()));
  ASSERT_EQ(actual.shape().DebugString(), expected.shape().DebugString());
  auto check = [&](auto type_tag) {
    using T = decltype(type_tag);
    auto a = actual.span<T>();
    auto e = expected.span<T>();
    for (size_t i = 0; i < a.size(); ++i) {
      double av = static_cast<double>(a[i]), ev = static_cast<double>(e[i]);
      EXPECT_LE(std::abs(av - ev), tol + tol * std::abs(ev))
          << "element " << i << ": " << av << " vs expected " << ev
          << "\nactual:   " << actual.DebugString(20)
          << "\nexpected: " << expected.DebugString(20);
    }
  };
  switch (actual.dtype()) {
    case DT_FLOAT:
      check(float());
      break;
    case DT_DOUBLE:
      check(double());
      break;
    case DT_INT32:
      check(int32_t());
      break;
    case DT_INT64:
      check(int64_t());
      break;
    default:
      ExpectTensorEqual(actual, expected);
  }
}

Tensor RandomFloats(const TensorShape& shape, uint32_t seed) {
  Tensor t(DT_FLOAT, shape);
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.f, 3.f);
  float* d = t.data<float>();
  for (int64_t i = 0; i < t.NumElements(); ++i)
    d[i] = i % 7 == 3 ? 0.f : normal(rng);
  return t;
}

void ExpectSameFloatBits(const Tensor& got, const Tensor& want) {
  ASSERT_EQ(got.dtype(), DT_FLOAT);
  ASSERT_EQ(want.dtype(), DT_FLOAT);
  ASSERT_EQ(got.shape(), want.shape());
  const float* g = got.data<float>();
  const float* w = want.data<float>();
  for (int64_t i = 0; i < got.NumElements(); ++i) {
    ASSERT_EQ(std::memcmp(g + i, w + i, sizeof(float)), 0)
        << "element " << i << ": got " << g[i] << ", want " << w[i];
  }
}

}  // namespace cohort
