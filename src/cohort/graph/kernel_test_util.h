// Test helpers for kernels: run one op on given input tensors without a
// session, and compare tensors.
//
//   auto out = RunKernel("Add", {Tensor::Vec<float>({1, 2}), Tensor(3.f)});
//   ASSERT_TRUE(out.ok()) << out.status();
//   ExpectTensorNear((*out)[0], Tensor::Vec<float>({4, 5}), 1e-6);
//
// RunKernel builds the node as BuildOp would (type attrs inferred from the
// inputs' dtypes, defaults added, validation and shape inference with the
// inputs' shapes), creates the kernel from the standard registries and runs
// it once on a shared test Device. It returns the node's build or run error.
//
// Thread safety: RunKernel may be called from several threads.
#ifndef COHORT_GRAPH_KERNEL_TEST_UTIL_H_
#define COHORT_GRAPH_KERNEL_TEST_UTIL_H_

#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "cohort/graph/builder.h"
#include "cohort/graph/device.h"
#include "cohort/graph/kernel.h"
#include "cohort/graph/tensor.h"

namespace cohort {

// One op argument: a tensor, or a list of tensors for "N * T" arguments.
struct KernelInput {
  KernelInput(Tensor t) : single(std::move(t)) {}  // NOLINT
  KernelInput(std::vector<Tensor> l)
      : is_list(true), list(std::move(l)) {}  // NOLINT
  bool is_list = false;
  Tensor single;
  std::vector<Tensor> list;
};

// A process-wide Device with 2 threads for kernel tests.
Device* TestDevice();

absl::StatusOr<std::vector<Tensor>> RunKernel(
    absl::string_view op, const std::vector<KernelInput>& inputs,
    const std::vector<NamedAttr>& attrs = {});

// As RunKernel on single tensors, except that the kernel's input slots hold
// the only references to `inputs`, as the executor's do for a tensor no
// other consumer, fetch or variable holds: a kernel may then forward an
// input's buffer to an output (OpKernelContext::ForwardInput). RunKernel's
// caller keeps its inputs, so there a kernel never can. Fill `inputs` with
// Owned(...) or push_back: a braced list copies its tensors and keeps the
// copies until the call returns.
template <typename... Tensors>
std::vector<Tensor> Owned(Tensors&&... tensors) {
  std::vector<Tensor> v;
  (v.push_back(std::forward<Tensors>(tensors)), ...);
  return v;
}
absl::StatusOr<std::vector<Tensor>> RunKernelOnOwnedInputs(
    absl::string_view op, std::vector<Tensor> inputs,
    const std::vector<NamedAttr>& attrs = {});

// A float tensor of `shape` with normal values (mean 0, sd 3) from `seed`,
// every 7th element 0: inputs for comparing a kernel with its formula.
Tensor RandomFloats(const TensorShape& shape, uint32_t seed);

// gtest assertion: same shape and bitwise-equal floats (a one-ulp
// difference fails, as does -0 against +0).
void ExpectSameFloatBits(const Tensor& got, const Tensor& want);

// gtest assertions: same dtype and shape, values equal / within `tol`
// (absolute + relative for floating types).
void ExpectTensorEqual(const Tensor& actual, const Tensor& expected);
void ExpectTensorNear(const Tensor& actual, const Tensor& expected, double tol);

}  // namespace cohort

#endif  // COHORT_GRAPH_KERNEL_TEST_UTIL_H_
