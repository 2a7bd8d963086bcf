#include "cohort/graph/kernels/math_ops.h"

#include "cohort/graph/kernel_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort {
namespace {

using ::testing::HasSubstr;

Tensor Mat(std::initializer_list<float> v, TensorShape s) {
  return *Tensor::FromVector<float>(std::vector<float>(v), s);
}

TEST(AddTest, SameShape) {
  auto out = RunKernel(
      "Add", {Tensor::Vec<float>({1, 2}), Tensor::Vec<float>({10, 20})});
  ASSERT_TRUE(out.ok()) << out.status();
  ExpectTensorEqual((*out)[0], Tensor::Vec<float>({11, 22}));
}

TEST(AddTest, ScalarEitherSide) {
  auto a = RunKernel("Add", {Tensor::Vec<int64_t>({1, 2}), Tensor(int64_t{5})});
  ASSERT_TRUE(a.ok());
  ExpectTensorEqual((*a)[0], Tensor::Vec<int64_t>({6, 7}));
  auto b = RunKernel("Add", {Tensor(2.0), Tensor::Vec<double>({1, 2})});
  ASSERT_TRUE(b.ok());
  ExpectTensorEqual((*b)[0], Tensor::Vec<double>({3, 4}));
}

TEST(AddTest, NumpyBroadcasting) {
  // [2,1] + [3] -> [2,3]
  auto out = RunKernel("Add", {Mat({1, 2}, TensorShape({2, 1})),
                               Tensor::Vec<float>({10, 20, 30})});
  ASSERT_TRUE(out.ok()) << out.status();
  ExpectTensorEqual((*out)[0],
                    Mat({11, 21, 31, 12, 22, 32}, TensorShape({2, 3})));
  // [2,1,2] + [3,1] -> [2,3,2]
  auto out3 = RunKernel("Add", {Mat({1, 2, 3, 4}, TensorShape({2, 1, 2})),
                                Mat({10, 20, 30}, TensorShape({3, 1}))});
  ASSERT_TRUE(out3.ok()) << out3.status();
  ExpectTensorEqual((*out3)[0],
                    Mat({11, 12, 21, 22, 31, 32, 13, 14, 23, 24, 33, 34},
                        TensorShape({2, 3, 2})));
}

TEST(AddTest, ManyAlternatingBroadcastDims) {
  // Rank 6 with alternating patterns exercises the generic loop.
  TensorShape xs({2, 1, 2, 1, 2, 1}), ys({1, 2, 1, 2, 1, 2});
  Tensor x(DT_INT32, xs), y(DT_INT32, ys);
  for (int i = 0; i < 8; ++i) x.flat<int32_t>()(i) = i * 100;
  for (int i = 0; i < 8; ++i) y.flat<int32_t>()(i) = i;
  auto out = RunKernel("Add", {x, y});
  ASSERT_TRUE(out.ok()) << out.status();
  const Tensor& o = (*out)[0];
  EXPECT_EQ(o.shape().DebugString(), "[2,2,2,2,2,2]");
  auto ot = o.tensor<int32_t, 6>();
  auto xt = x.tensor<int32_t, 6>();
  auto yt = y.tensor<int32_t, 6>();
  for (int a = 0; a < 2; ++a)
    for (int b = 0; b < 2; ++b)
      for (int c = 0; c < 2; ++c)
        for (int d = 0; d < 2; ++d)
          for (int e = 0; e < 2; ++e)
            for (int f = 0; f < 2; ++f)
              ASSERT_EQ(ot(a, b, c, d, e, f),
                        xt(a, 0, c, 0, e, 0) + yt(0, b, 0, d, 0, f));
}

TEST(AddTest, LargeTensorUsesThePoolAndIsCorrect) {
  const int64_t n = 100000;
  Tensor x(DT_FLOAT, TensorShape({n})), y(DT_FLOAT, TensorShape({n}));
  for (int64_t i = 0; i < n; ++i) {
    x.flat<float>()(i) = i;
    y.flat<float>()(i) = 2 * i;
  }
  auto out = RunKernel("Add", {x, y});
  ASSERT_TRUE(out.ok());
  for (int64_t i = 0; i < n; i += 997)
    ASSERT_EQ((*out)[0].flat<float>()(i), 3 * i);
}

TEST(AddTest, Errors) {
  auto bad = RunKernel(
      "Add", {Tensor::Vec<float>({1, 2}), Tensor::Vec<float>({1, 2, 3})});
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("[2] and [3]"));
  auto str = RunKernel("Add", {Tensor("a"), Tensor("b")});
  EXPECT_EQ(str.status().code(), absl::StatusCode::kInvalidArgument);
  auto bools = RunKernel("Add", {Tensor(true), Tensor(false)});
  EXPECT_EQ(bools.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(AddTest, BiasAddedToEveryRowMatchesTheElementwiseSum) {
  // Rank 2 and 3, large enough for the test device's pool; the row loop
  // must give the bits of x + y element by element.
  for (const TensorShape& shape :
       {TensorShape({300, 1000}), TensorShape({2, 150, 1000})}) {
    const Tensor x = RandomFloats(shape, 1);
    const Tensor bias = RandomFloats(TensorShape({1000}), 2);
    Tensor want(DT_FLOAT, shape);
    for (int64_t i = 0; i < x.NumElements(); ++i)
      want.data<float>()[i] = x.data<float>()[i] + bias.data<float>()[i % 1000];
    auto out = RunKernel("Add", {x, bias});
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_FALSE((*out)[0].SharesBufferWith(x));
    ExpectSameFloatBits((*out)[0], want);
    // An x that is the kernel's alone gets the sum written over it.
    Tensor mine = x.DeepCopy();
    const float* where = mine.data<float>();
    auto in_place = RunKernelOnOwnedInputs("Add", Owned(std::move(mine), bias));
    ASSERT_TRUE(in_place.ok()) << in_place.status();
    EXPECT_EQ((*in_place)[0].data<float>(), where);
    ExpectSameFloatBits((*in_place)[0], want);
  }
}

}  // namespace
}  // namespace cohort
