#include "cohort/graph/kernels/nn_ops.h"

#include <cmath>

#include "cohort/graph/kernel_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort {
namespace {

using ::testing::HasSubstr;

Tensor F(std::vector<float> v, TensorShape s) {
  return *Tensor::FromVector<float>(v, s);
}
std::string Message(const absl::Status& s) { return std::string(s.message()); }

TEST(ActivationTest, Values) {
  auto relu = RunKernel("Relu", {Tensor::Vec<float>({-1, 0, 2})});
  ASSERT_TRUE(relu.ok());
  ExpectTensorEqual((*relu)[0], Tensor::Vec<float>({0, 0, 2}));
  auto sig = RunKernel("Sigmoid", {Tensor::Vec<double>({0, 2})});
  ASSERT_TRUE(sig.ok());
  ExpectTensorNear((*sig)[0],
                   Tensor::Vec<double>({0.5, 1 / (1 + std::exp(-2.0))}), 1e-12);
  auto tanh = RunKernel("Tanh", {Tensor::Vec<float>({0, 1})});
  ASSERT_TRUE(tanh.ok());
  ExpectTensorNear((*tanh)[0], Tensor::Vec<float>({0, std::tanh(1.f)}), 1e-6);
  auto bad = RunKernel("Relu", {Tensor::Vec<int32_t>({1})});
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(bad.status()), HasSubstr("node 'op'"));
}

TEST(ReluGradTest, PassesGradientsWherePositive) {
  auto small = RunKernel("ReluGrad", {Tensor::Vec<float>({1, 2, 3, 4}),
                                      Tensor::Vec<float>({-1, 0, 0.5, 7})});
  ASSERT_TRUE(small.ok()) << small.status();
  ExpectTensorEqual((*small)[0], Tensor::Vec<float>({0, 0, 3, 4}));
  auto dbl = RunKernel(
      "ReluGrad", {Tensor::Vec<double>({1, 2}), Tensor::Vec<double>({2, -2})});
  ASSERT_TRUE(dbl.ok()) << dbl.status();
  ExpectTensorEqual((*dbl)[0], Tensor::Vec<double>({1, 0}));
  // Large enough for the test device's pool: every element checked.
  const Tensor g = RandomFloats(TensorShape({500, 1000}), 4);
  const Tensor y = RandomFloats(TensorShape({500, 1000}), 5);
  Tensor want(DT_FLOAT, g.shape());
  for (int64_t i = 0; i < g.NumElements(); ++i) {
    want.data<float>()[i] = y.data<float>()[i] > 0 ? g.data<float>()[i] : 0.f;
  }
  auto big = RunKernel("ReluGrad", {g, y});
  ASSERT_TRUE(big.ok()) << big.status();
  ExpectSameFloatBits((*big)[0], want);
  auto bad = RunKernel(
      "ReluGrad", {Tensor::Vec<float>({1, 2}), Tensor::Vec<float>({1, 2, 3})});
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
}

// Relu and ReluGrad write over an input that is theirs alone (the
// executor's slot holds its only reference), and never over one that
// another holder still sees. Large enough for the test device's pool.
TEST(ReluTest, AnUnsharedInputIsWrittenInPlaceASharedOneIsLeftAlone) {
  const TensorShape shape({500, 1000});
  const Tensor x = RandomFloats(shape, 6);
  const Tensor g = RandomFloats(shape, 7);
  Tensor relu(DT_FLOAT, shape), grad(DT_FLOAT, shape);
  for (int64_t i = 0; i < x.NumElements(); ++i) {
    const float xi = x.data<float>()[i];
    relu.data<float>()[i] = xi > 0 ? xi : 0.f;
    grad.data<float>()[i] = xi > 0 ? g.data<float>()[i] : 0.f;
  }

  Tensor mine = x.DeepCopy();
  const float* where = mine.data<float>();
  auto in_place = RunKernelOnOwnedInputs("Relu", Owned(std::move(mine)));
  ASSERT_TRUE(in_place.ok()) << in_place.status();
  EXPECT_EQ((*in_place)[0].data<float>(), where);
  ExpectSameFloatBits((*in_place)[0], relu);

  const Tensor kept = x.DeepCopy();
  auto copied = RunKernel("Relu", {kept});
  ASSERT_TRUE(copied.ok()) << copied.status();
  EXPECT_FALSE((*copied)[0].SharesBufferWith(kept));
  ExpectSameFloatBits((*copied)[0], relu);
  ExpectSameFloatBits(kept, x);

  Tensor gradients = g.DeepCopy();
  where = gradients.data<float>();
  auto grad_in_place =
      RunKernelOnOwnedInputs("ReluGrad", Owned(std::move(gradients), x));
  ASSERT_TRUE(grad_in_place.ok()) << grad_in_place.status();
  EXPECT_EQ((*grad_in_place)[0].data<float>(), where);
  ExpectSameFloatBits((*grad_in_place)[0], grad);

  const Tensor kept_g = g.DeepCopy();
  auto grad_copied = RunKernel("ReluGrad", {kept_g, x});
  ASSERT_TRUE(grad_copied.ok()) << grad_copied.status();
  EXPECT_FALSE((*grad_copied)[0].SharesBufferWith(kept_g));
  ExpectSameFloatBits((*grad_copied)[0], grad);
  ExpectSameFloatBits(kept_g, g);
}

TEST(SoftmaxTest, RowsSumToOneAndLargeLogitsAreStable) {
  auto out = RunKernel("Softmax", {F({1, 2, 3, 1000, 1000, 1000}, {2, 3})});
  ASSERT_TRUE(out.ok()) << out.status();
  float e1 = std::exp(1.f), e2 = std::exp(2.f), e3 = std::exp(3.f),
        s = e1 + e2 + e3;
  ExpectTensorNear(
      (*out)[0], F({e1 / s, e2 / s, e3 / s, 1 / 3.f, 1 / 3.f, 1 / 3.f}, {2, 3}),
      1e-6);
  auto scalar = RunKernel("Softmax", {Tensor(1.f)});
  EXPECT_EQ(scalar.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(scalar.status()), HasSubstr("node 'op'"));
}

TEST(CrossEntropyTest, DenseLabels) {
  Tensor logits = F({0, 0, std::log(2.f), 5, 5, 5}, {2, 3});
  Tensor labels = F({0, 0, 1, 1, 0, 0}, {2, 3});
  auto out = RunKernel("SoftmaxCrossEntropyWithLogits", {logits, labels});
  ASSERT_TRUE(out.ok()) << out.status();
  // Row 0: softmax = [1/4, 1/4, 1/2]; row 1 uniform.
  ExpectTensorNear((*out)[0],
                   Tensor::Vec<float>({std::log(2.f), std::log(3.f)}), 1e-6);
  ExpectTensorNear((*out)[1],
                   F({0.25, 0.25, -0.5, 1 / 3.f - 1, 1 / 3.f, 1 / 3.f}, {2, 3}),
                   1e-6);
  auto bad =
      RunKernel("SoftmaxCrossEntropyWithLogits", {logits, F({1, 0}, {1, 2})});
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(bad.status()), HasSubstr("node 'op'"));
}

TEST(CrossEntropyTest, SparseLabels) {
  Tensor logits = F({0, 0, std::log(2.f), 5, 5, 5}, {2, 3});
  auto out = RunKernel("SparseSoftmaxCrossEntropyWithLogits",
                       {logits, Tensor::Vec<int32_t>({2, 0})});
  ASSERT_TRUE(out.ok()) << out.status();
  ExpectTensorNear((*out)[0],
                   Tensor::Vec<float>({std::log(2.f), std::log(3.f)}), 1e-6);
  ExpectTensorNear((*out)[1],
                   F({0.25, 0.25, -0.5, 1 / 3.f - 1, 1 / 3.f, 1 / 3.f}, {2, 3}),
                   1e-6);
  auto out64 = RunKernel("SparseSoftmaxCrossEntropyWithLogits",
                         {logits, Tensor::Vec<int64_t>({2, 0})});
  ASSERT_TRUE(out64.ok());
  auto bad = RunKernel("SparseSoftmaxCrossEntropyWithLogits",
                       {logits, Tensor::Vec<int32_t>({2, 3})});
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(
      Message(bad.status()),
      HasSubstr("label 3 at position 1 is outside the valid range [0, 3)"));
  EXPECT_THAT(Message(bad.status()), HasSubstr("node 'op'"));
  auto shape = RunKernel("SparseSoftmaxCrossEntropyWithLogits",
                         {logits, Tensor::Vec<int32_t>({1})});
  EXPECT_EQ(shape.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace cohort
