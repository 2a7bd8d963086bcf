#include "cohort/graph/kernels/elementwise_ops.h"

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

TEST(BinaryOpsTest, ValuesForEveryNumericType) {
  auto sub = RunKernel(
      "Sub", {Tensor::Vec<float>({5, 7}), Tensor::Vec<float>({1, 2})});
  ASSERT_TRUE(sub.ok()) << sub.status();
  ExpectTensorEqual((*sub)[0], Tensor::Vec<float>({4, 5}));
  auto mul = RunKernel(
      "Mul", {Tensor::Vec<double>({2, 3}), Tensor::Vec<double>({4, 5})});
  ASSERT_TRUE(mul.ok());
  ExpectTensorEqual((*mul)[0], Tensor::Vec<double>({8, 15}));
  auto div = RunKernel(
      "Div", {Tensor::Vec<int32_t>({7, -7}), Tensor::Vec<int32_t>({2, 2})});
  ASSERT_TRUE(div.ok());
  ExpectTensorEqual((*div)[0], Tensor::Vec<int32_t>({3, -3}));
  auto fdiv = RunKernel(
      "Div", {Tensor::Vec<float>({1, 3}), Tensor::Vec<float>({4, 2})});
  ASSERT_TRUE(fdiv.ok());
  ExpectTensorEqual((*fdiv)[0], Tensor::Vec<float>({0.25, 1.5}));
  auto mx = RunKernel(
      "Maximum", {Tensor::Vec<int64_t>({1, 9}), Tensor::Vec<int64_t>({5, 2})});
  ASSERT_TRUE(mx.ok());
  ExpectTensorEqual((*mx)[0], Tensor::Vec<int64_t>({5, 9}));
  auto mn = RunKernel(
      "Minimum", {Tensor::Vec<int64_t>({1, 9}), Tensor::Vec<int64_t>({5, 2})});
  ASSERT_TRUE(mn.ok());
  ExpectTensorEqual((*mn)[0], Tensor::Vec<int64_t>({1, 2}));
  auto pw = RunKernel(
      "Pow", {Tensor::Vec<double>({2, 9}), Tensor::Vec<double>({3, 0.5})});
  ASSERT_TRUE(pw.ok());
  ExpectTensorNear((*pw)[0], Tensor::Vec<double>({8, 3}), 1e-12);
}

TEST(BinaryOpsTest, NumpyBroadcasting) {
  // [2,1] op [3] -> [2,3]
  auto mul =
      RunKernel("Mul", {F({1, 2}, {2, 1}), Tensor::Vec<float>({10, 20, 30})});
  ASSERT_TRUE(mul.ok()) << mul.status();
  ExpectTensorEqual((*mul)[0], F({10, 20, 30, 20, 40, 60}, {2, 3}));
  auto sub = RunKernel("Sub", {Tensor(10.f), F({1, 2, 3, 4}, {2, 2})});
  ASSERT_TRUE(sub.ok());
  ExpectTensorEqual((*sub)[0], F({9, 8, 7, 6}, {2, 2}));
  auto mx = RunKernel("Maximum",
                      {F({1, 5, 3, 0}, {2, 2}), Tensor::Vec<float>({2, 2})});
  ASSERT_TRUE(mx.ok());
  ExpectTensorEqual((*mx)[0], F({2, 5, 3, 2}, {2, 2}));
  auto pw = RunKernel("Pow", {Tensor::Vec<float>({1, 2, 3}), Tensor(2.f)});
  ASSERT_TRUE(pw.ok());
  ExpectTensorEqual((*pw)[0], Tensor::Vec<float>({1, 4, 9}));
  auto gt = RunKernel("Greater",
                      {F({1, 5, 3, 0}, {2, 2}), Tensor::Vec<float>({2, 2})});
  ASSERT_TRUE(gt.ok());
  Tensor expected(DT_BOOL, TensorShape({2, 2}));
  bool e[] = {false, true, true, false};
  for (int i = 0; i < 4; ++i) expected.data<bool>()[i] = e[i];
  ExpectTensorEqual((*gt)[0], expected);
}

TEST(BinaryOpsTest, Comparisons) {
  auto lt =
      RunKernel("Less", {Tensor::Vec<int32_t>({1, 2, 3}), Tensor(int32_t{2})});
  ASSERT_TRUE(lt.ok());
  EXPECT_EQ((*lt)[0].DebugString(),
            Tensor::Vec<bool>({true, false, false}).DebugString());
  auto eq = RunKernel("Equal", {Tensor::Vec<double>({1, 2, 3}),
                                Tensor::Vec<double>({1, 0, 3})});
  ASSERT_TRUE(eq.ok());
  ExpectTensorEqual((*eq)[0], Tensor::Vec<bool>({true, false, true}));
}

TEST(BinaryOpsTest, ErrorsNameTheNode) {
  auto bad = RunKernel(
      "Mul", {Tensor::Vec<float>({1, 2}), Tensor::Vec<float>({1, 2, 3})});
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(bad.status()), HasSubstr("node 'op'"));
  EXPECT_THAT(Message(bad.status()), HasSubstr("[2] and [3]"));
  auto types =
      RunKernel("Sub", {Tensor::Vec<float>({1}), Tensor::Vec<double>({1})});
  EXPECT_EQ(types.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(types.status()), HasSubstr("node 'op'"));
  auto int_pow = RunKernel("Pow", {Tensor(int32_t{2}), Tensor(int32_t{2})});
  EXPECT_EQ(int_pow.status().code(), absl::StatusCode::kInvalidArgument);
  auto zero = RunKernel(
      "Div", {Tensor::Vec<int64_t>({1, 2}), Tensor::Vec<int64_t>({1, 0})});
  EXPECT_EQ(zero.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(zero.status()), HasSubstr("node 'op' (op Div)"));
  EXPECT_THAT(Message(zero.status()), HasSubstr("integer division by zero"));
}

TEST(UnaryOpsTest, Values) {
  auto neg = RunKernel("Neg", {Tensor::Vec<int32_t>({1, -2})});
  ASSERT_TRUE(neg.ok());
  ExpectTensorEqual((*neg)[0], Tensor::Vec<int32_t>({-1, 2}));
  auto sq = RunKernel("Square", {Tensor::Vec<int64_t>({3, -4})});
  ASSERT_TRUE(sq.ok());
  ExpectTensorEqual((*sq)[0], Tensor::Vec<int64_t>({9, 16}));
  auto sqrt = RunKernel("Sqrt", {Tensor::Vec<float>({4, 2.25})});
  ASSERT_TRUE(sqrt.ok());
  ExpectTensorNear((*sqrt)[0], Tensor::Vec<float>({2, 1.5}), 1e-6);
  auto ex = RunKernel("Exp", {Tensor::Vec<double>({0, 1})});
  ASSERT_TRUE(ex.ok());
  ExpectTensorNear((*ex)[0], Tensor::Vec<double>({1, std::exp(1.0)}), 1e-12);
  auto lg = RunKernel("Log", {F({1, std::exp(2.f), 10, 100}, {2, 2})});
  ASSERT_TRUE(lg.ok());
  ExpectTensorNear((*lg)[0], F({0, 2, std::log(10.f), std::log(100.f)}, {2, 2}),
                   1e-6);
  auto bad = RunKernel("Exp", {Tensor::Vec<int32_t>({1})});
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(bad.status()), HasSubstr("node 'op'"));
}

TEST(UnaryOpsTest, LargeTensorOnThePool) {
  const int64_t n = 70000;
  Tensor x(DT_FLOAT, TensorShape({n}));
  for (int64_t i = 0; i < n; ++i)
    x.data<float>()[i] = static_cast<float>(i % 100);
  auto out = RunKernel("Square", {x});
  ASSERT_TRUE(out.ok());
  for (int64_t i = 0; i < n; i += 1231) {
    ASSERT_EQ((*out)[0].data<float>()[i],
              static_cast<float>((i % 100) * (i % 100)));
  }
}

TEST(AddNTest, SumsAndChecksShapes) {
  auto out =
      RunKernel("AddN", {std::vector<Tensor>{Tensor::Vec<float>({1, 2}),
                                             Tensor::Vec<float>({10, 20}),
                                             Tensor::Vec<float>({100, 200})}});
  ASSERT_TRUE(out.ok()) << out.status();
  ExpectTensorEqual((*out)[0], Tensor::Vec<float>({111, 222}));
  auto one =
      RunKernel("AddN", {std::vector<Tensor>{Tensor::Vec<int32_t>({4})}});
  ASSERT_TRUE(one.ok());
  ExpectTensorEqual((*one)[0], Tensor::Vec<int32_t>({4}));
  auto bad = RunKernel("AddN", {std::vector<Tensor>{Tensor::Vec<float>({1, 2}),
                                                    Tensor::Vec<float>({1})}});
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(bad.status()), HasSubstr("node 'op'"));
}

TEST(SelectTest, ElementwiseAndScalarCondition) {
  auto out = RunKernel("Select", {Tensor::Vec<bool>({true, false, true}),
                                  Tensor::Vec<float>({1, 2, 3}),
                                  Tensor::Vec<float>({10, 20, 30})});
  ASSERT_TRUE(out.ok()) << out.status();
  ExpectTensorEqual((*out)[0], Tensor::Vec<float>({1, 20, 3}));
  auto scalar =
      RunKernel("Select", {Tensor(false), Tensor::Vec<int64_t>({1, 2}),
                           Tensor::Vec<int64_t>({3, 4})});
  ASSERT_TRUE(scalar.ok());
  ExpectTensorEqual((*scalar)[0], Tensor::Vec<int64_t>({3, 4}));
  auto bad = RunKernel("Select", {Tensor::Vec<bool>({true, false}),
                                  Tensor::Vec<float>({1, 2, 3}),
                                  Tensor::Vec<float>({10, 20, 30})});
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(bad.status()), HasSubstr("node 'op'"));
}

TEST(CastTest, ConvertsBetweenTypes) {
  auto f2i = RunKernel("Cast", {Tensor::Vec<float>({1.7f, -2.5f})},
                       {{"DstT", DT_INT32}});
  ASSERT_TRUE(f2i.ok()) << f2i.status();
  ExpectTensorEqual((*f2i)[0], Tensor::Vec<int32_t>({1, -2}));
  auto b2d = RunKernel("Cast", {Tensor::Vec<bool>({true, false})},
                       {{"DstT", DT_DOUBLE}});
  ASSERT_TRUE(b2d.ok());
  ExpectTensorEqual((*b2d)[0], Tensor::Vec<double>({1, 0}));
  auto i2b =
      RunKernel("Cast", {Tensor::Vec<int64_t>({0, 5})}, {{"DstT", DT_BOOL}});
  ASSERT_TRUE(i2b.ok());
  ExpectTensorEqual((*i2b)[0], Tensor::Vec<bool>({false, true}));
  auto same =
      RunKernel("Cast", {Tensor::Vec<float>({1})}, {{"DstT", DT_FLOAT}});
  ASSERT_TRUE(same.ok());
  auto bad = RunKernel("Cast", {Tensor("s")}, {{"DstT", DT_FLOAT}});
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(bad.status()), HasSubstr("node 'op'"));
}

}  // namespace
}  // namespace cohort
