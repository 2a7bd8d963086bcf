#include "cohort/graph/kernels/shape_ops.h"

#include "cohort/graph/kernel_test_util.h"
#include "cohort/graph/kernels/array_ops.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort {
namespace {

using ::testing::HasSubstr;

Tensor I(std::vector<int32_t> v, TensorShape s) {
  return *Tensor::FromVector<int32_t>(v, s);
}
Tensor F(std::vector<float> v, TensorShape s) {
  return *Tensor::FromVector<float>(v, s);
}
std::string Message(const absl::Status& s) { return std::string(s.message()); }

TEST(ReshapeTest, InfersMinusOneAndSharesTheBuffer) {
  Tensor x = F({1, 2, 3, 4, 5, 6}, {2, 3});
  auto out = RunKernel("Reshape", {x, Tensor::Vec<int32_t>({3, -1})});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0].shape().DebugString(), "[3,2]");
  EXPECT_TRUE((*out)[0].SharesBufferWith(x));
  auto bad = RunKernel("Reshape", {x, Tensor::Vec<int32_t>({4, 2})});
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(bad.status()), HasSubstr("node 'op' (op Reshape)"));
  EXPECT_THAT(Message(bad.status()), HasSubstr("6 elements"));
}

TEST(ReshapeTest, ShapeFunctionUsesConstants) {
  Scope root = Scope::NewRootScope();
  auto x = ops::Placeholder(root, DT_FLOAT, {4, 6});
  auto y = ops::Reshape(root, x, Tensor::Vec<int32_t>({-1, 3}));
  ASSERT_TRUE(root.ok()) << root.status();
  EXPECT_EQ(y.shape().DebugString(), "[8,3]");
  ops::Reshape(root.WithOpName("bad"), x, Tensor::Vec<int32_t>({5, 5}));
  EXPECT_FALSE(root.ok());
  EXPECT_THAT(Message(root.status()), HasSubstr("node 'bad' (op Reshape)"));
}

TEST(ShapeSizeTest, Values) {
  Tensor x(DT_DOUBLE, TensorShape({2, 5, 1}));
  auto shape = RunKernel("Shape", {x});
  ASSERT_TRUE(shape.ok());
  ExpectTensorEqual((*shape)[0], Tensor::Vec<int32_t>({2, 5, 1}));
  auto shape64 = RunKernel("Shape", {x}, {{"out_type", DT_INT64}});
  ASSERT_TRUE(shape64.ok());
  ExpectTensorEqual((*shape64)[0], Tensor::Vec<int64_t>({2, 5, 1}));
  auto size = RunKernel("Size", {x});
  ASSERT_TRUE(size.ok());
  ExpectTensorEqual((*size)[0], Tensor(int32_t{10}));
}

TEST(FillTest, FillsAndValidates) {
  auto out =
      RunKernel("Fill", {Tensor::Vec<int32_t>({2, 2}), Tensor(int64_t{7})});
  ASSERT_TRUE(out.ok()) << out.status();
  ExpectTensorEqual((*out)[0], Tensor::Filled<int64_t>(TensorShape({2, 2}), 7));
  auto bad = RunKernel("Fill",
                       {Tensor::Vec<int32_t>({2}), Tensor::Vec<float>({1, 2})});
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(bad.status()), HasSubstr("node 'op'"));
  auto neg = RunKernel("Fill", {Tensor::Vec<int32_t>({-2}), Tensor(1.f)});
  EXPECT_EQ(neg.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ZerosOnesLikeTest, Values) {
  auto z = RunKernel("ZerosLike", {F({1, 2, 3, 4}, {2, 2})});
  ASSERT_TRUE(z.ok());
  ExpectTensorEqual((*z)[0], Tensor::Filled<float>(TensorShape({2, 2}), 0));
  auto o = RunKernel("OnesLike", {Tensor::Vec<int32_t>({5, 6})});
  ASSERT_TRUE(o.ok());
  ExpectTensorEqual((*o)[0], Tensor::Vec<int32_t>({1, 1}));
  auto s = RunKernel("ZerosLike", {Tensor("x")});
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ConcatTest, AlongEachAxis) {
  Tensor a = I({1, 2, 3, 4}, {2, 2});
  Tensor b = I({5, 6}, {2, 1});
  auto out =
      RunKernel("ConcatV2", {std::vector<Tensor>{a, b}, Tensor(int32_t{1})});
  ASSERT_TRUE(out.ok()) << out.status();
  ExpectTensorEqual((*out)[0], I({1, 2, 5, 3, 4, 6}, {2, 3}));
  auto rows = RunKernel("ConcatV2", {std::vector<Tensor>{a, I({7, 8}, {1, 2})},
                                     Tensor(int32_t{-2})});
  ASSERT_TRUE(rows.ok());
  ExpectTensorEqual((*rows)[0], I({1, 2, 3, 4, 7, 8}, {3, 2}));
  auto bad =
      RunKernel("ConcatV2", {std::vector<Tensor>{a, b}, Tensor(int32_t{0})});
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(bad.status()), HasSubstr("node 'op' (op ConcatV2)"));
  auto axis =
      RunKernel("ConcatV2", {std::vector<Tensor>{a, a}, Tensor(int32_t{2})});
  EXPECT_EQ(axis.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(SliceTest, BlocksAndErrors) {
  Tensor x = I({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, {3, 4});
  auto out = RunKernel("Slice", {x, Tensor::Vec<int32_t>({1, 1}),
                                 Tensor::Vec<int32_t>({2, -1})});
  ASSERT_TRUE(out.ok()) << out.status();
  ExpectTensorEqual((*out)[0], I({6, 7, 8, 10, 11, 12}, {2, 3}));
  auto bad = RunKernel(
      "Slice", {x, Tensor::Vec<int32_t>({2, 0}), Tensor::Vec<int32_t>({2, 1})});
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(bad.status()), HasSubstr("node 'op' (op Slice)"));
  EXPECT_THAT(Message(bad.status()), HasSubstr("dimension 0"));
}

TEST(SliceGradTest, PlacesTheBlockInZeros) {
  auto out =
      RunKernel("SliceGrad", {Tensor::Vec<int32_t>({2, 3}),
                              Tensor::Vec<int32_t>({1, 1}), F({5, 6}, {1, 2})});
  ASSERT_TRUE(out.ok()) << out.status();
  ExpectTensorEqual((*out)[0], F({0, 0, 0, 0, 5, 6}, {2, 3}));
}

TEST(GradientHelpersTest, BroadcastGradientArgsReducedShapeConcatOffset) {
  auto r = RunKernel("BroadcastGradientArgs",
                     {Tensor::Vec<int32_t>({2, 3}), Tensor::Vec<int32_t>({3})});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)[0].NumElements(), 0);
  ExpectTensorEqual((*r)[1], Tensor::Vec<int32_t>({0}));
  auto bad = RunKernel("BroadcastGradientArgs", {Tensor::Vec<int32_t>({2, 3}),
                                                 Tensor::Vec<int32_t>({4})});
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  auto red = RunKernel("ReducedShape", {Tensor::Vec<int32_t>({2, 3, 4}),
                                        Tensor::Vec<int32_t>({0, -1})});
  ASSERT_TRUE(red.ok());
  ExpectTensorEqual((*red)[0], Tensor::Vec<int32_t>({1, 3, 1}));
  auto off = RunKernel(
      "ConcatOffset",
      {Tensor(int32_t{1}), std::vector<Tensor>{Tensor::Vec<int32_t>({2, 2}),
                                               Tensor::Vec<int32_t>({2, 5})}});
  ASSERT_TRUE(off.ok()) << off.status();
  ExpectTensorEqual((*off)[0], Tensor::Vec<int32_t>({0, 0}));
  ExpectTensorEqual((*off)[1], Tensor::Vec<int32_t>({0, 2}));
}

}  // namespace
}  // namespace cohort
