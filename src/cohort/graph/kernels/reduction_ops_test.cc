#include "cohort/graph/kernels/reduction_ops.h"

#include <algorithm>

#include "cohort/graph/kernel_test_util.h"
#include "cohort/graph/kernels/blas.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort {
namespace {

using ::testing::HasSubstr;

Tensor F(std::vector<float> v, TensorShape s) {
  return *Tensor::FromVector<float>(v, s);
}
Tensor D(std::vector<double> v, TensorShape s) {
  return *Tensor::FromVector<double>(v, s);
}
std::string Message(const absl::Status& s) { return std::string(s.message()); }

// x[i][j][k] = 100 i + 10 j + k, shape [2,3,2].
Tensor Cube() {
  Tensor t(DT_INT32, TensorShape({2, 3, 2}));
  auto v = t.tensor<int32_t, 3>();
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 2; ++k) v(i, j, k) = 100 * i + 10 * j + k;
  return t;
}

TEST(ReductionTest, SumOverEachAxisCombination) {
  auto s1 = RunKernel("Sum", {Cube(), Tensor(int32_t{1})});
  ASSERT_TRUE(s1.ok()) << s1.status();
  ExpectTensorEqual((*s1)[0], *Tensor::FromVector<int32_t>(
                                  std::vector<int32_t>{30, 33, 330, 333},
                                  TensorShape({2, 2})));
  auto s02 = RunKernel("Sum", {Cube(), Tensor::Vec<int32_t>({0, -1})});
  ASSERT_TRUE(s02.ok());
  ExpectTensorEqual((*s02)[0], Tensor::Vec<int32_t>({202, 242, 282}));
  auto all = RunKernel("Sum", {Cube(), Tensor::Vec<int32_t>({0, 1, 2})});
  ASSERT_TRUE(all.ok());
  ExpectTensorEqual((*all)[0], Tensor(int32_t{726}));
  auto none = RunKernel("Sum", {Cube(), Tensor(DT_INT32, TensorShape({0}))});
  ASSERT_TRUE(none.ok());
  ExpectTensorEqual((*none)[0], Cube());
  auto keep = RunKernel("Sum", {Cube(), Tensor::Vec<int32_t>({0, 2})},
                        {{"keep_dims", true}});
  ASSERT_TRUE(keep.ok());
  EXPECT_EQ((*keep)[0].shape().DebugString(), "[1,3,1]");
}

TEST(ReductionTest, MeanAndMax) {
  auto mean =
      RunKernel("Mean", {F({1, 2, 3, 4, 5, 6}, {2, 3}), Tensor(int32_t{0})});
  ASSERT_TRUE(mean.ok());
  ExpectTensorNear((*mean)[0], Tensor::Vec<float>({2.5, 3.5, 4.5}), 1e-6);
  auto imean =
      RunKernel("Mean", {Tensor::Vec<int64_t>({1, 2}), Tensor(int32_t{0})});
  ASSERT_TRUE(imean.ok());
  ExpectTensorEqual((*imean)[0], Tensor(int64_t{1}));
  auto mx =
      RunKernel("Max", {D({1, 9, 3, 4, -5, 6}, {2, 3}), Tensor(int32_t{-1})},
                {{"keep_dims", true}});
  ASSERT_TRUE(mx.ok());
  ExpectTensorEqual((*mx)[0], D({9, 6}, {2, 1}));
}

// Reducing no axis, or only axes of size 1, is the identity: the output
// shares the input's buffer (no copy), with the reduced shape.
TEST(ReductionTest, NothingReducedSharesTheInputsBuffer) {
  const Tensor x = F({1, 2, 3, 4, 5, 6}, {2, 1, 3});
  for (const char* op : {"Sum", "Mean", "Max"}) {
    SCOPED_TRACE(op);
    auto none = RunKernel(op, {x, Tensor(DT_INT32, TensorShape({0}))});
    ASSERT_TRUE(none.ok()) << none.status();
    EXPECT_TRUE((*none)[0].SharesBufferWith(x));
    ExpectTensorEqual((*none)[0], x);
    auto unit = RunKernel(op, {x, Tensor(int32_t{1})});
    ASSERT_TRUE(unit.ok()) << unit.status();
    EXPECT_TRUE((*unit)[0].SharesBufferWith(x));
    ExpectTensorEqual((*unit)[0], F({1, 2, 3, 4, 5, 6}, {2, 3}));
    auto kept = RunKernel(op, {x, Tensor(int32_t{1})}, {{"keep_dims", true}});
    ASSERT_TRUE(kept.ok()) << kept.status();
    EXPECT_TRUE((*kept)[0].SharesBufferWith(x));
    EXPECT_EQ((*kept)[0].shape().DebugString(), "[2,1,3]");
    // An axis of more than one element is reduced into a buffer of its own.
    auto real = RunKernel(op, {x, Tensor(int32_t{0})});
    ASSERT_TRUE(real.ok()) << real.status();
    EXPECT_FALSE((*real)[0].SharesBufferWith(x));
  }
}

TEST(ReductionTest, ManyAlternatingAxesUseTheGenericLoop) {
  Tensor x(DT_FLOAT, TensorShape({2, 2, 2, 2, 2}));
  for (int i = 0; i < 32; ++i) x.data<float>()[i] = static_cast<float>(i);
  auto out = RunKernel("Sum", {x, Tensor::Vec<int32_t>({0, 2, 4})});
  ASSERT_TRUE(out.ok()) << out.status();
  // out[b][d] = sum over a, c, e of 16a + 8b + 4c + 2d + e.
  Tensor expected(DT_FLOAT, TensorShape({2, 2}));
  for (int b = 0; b < 2; ++b)
    for (int d = 0; d < 2; ++d) {
      float s = 0;
      for (int a = 0; a < 2; ++a)
        for (int c = 0; c < 2; ++c)
          for (int e = 0; e < 2; ++e) s += 16 * a + 8 * b + 4 * c + 2 * d + e;
      expected.data<float>()[b * 2 + d] = s;
    }
  ExpectTensorEqual((*out)[0], expected);
}

TEST(ReductionTest, LargeInputOnThePool) {
  Tensor x = Tensor::Filled<float>(TensorShape({300, 200}), 0.5f);
  auto out = RunKernel("Sum", {x, Tensor(int32_t{0})});
  ASSERT_TRUE(out.ok());
  ExpectTensorNear((*out)[0], Tensor::Filled<float>(TensorShape({200}), 150.f),
                   1e-4);
}

TEST(ReductionTest, ErrorsNameTheNode) {
  auto bad = RunKernel("Sum", {Cube(), Tensor(int32_t{3})});
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(bad.status()), HasSubstr("node 'op' (op Sum)"));
  EXPECT_THAT(Message(bad.status()), HasSubstr("axis 3"));
  auto types =
      RunKernel("Mean", {Tensor::Vec<bool>({true}), Tensor(int32_t{0})});
  EXPECT_EQ(types.status().code(), absl::StatusCode::kInvalidArgument);
  auto empty = RunKernel(
      "Max", {Tensor(DT_FLOAT, TensorShape({0})), Tensor(int32_t{0})});
  EXPECT_EQ(empty.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(MatMulTest, AllTransposeCombinations) {
  Tensor a = F({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor b = F({7, 8, 9, 10, 11, 12}, {3, 2});
  Tensor expected = F({58, 64, 139, 154}, {2, 2});
  Tensor at = F({1, 4, 2, 5, 3, 6}, {3, 2});
  Tensor bt = F({7, 9, 11, 8, 10, 12}, {2, 3});
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      auto out = RunKernel("MatMul", {ta ? at : a, tb ? bt : b},
                           {{"transpose_a", ta}, {"transpose_b", tb}});
      ASSERT_TRUE(out.ok()) << out.status();
      ExpectTensorEqual((*out)[0], expected);
    }
  }
  auto ints =
      RunKernel("MatMul", {Tensor::Filled<int64_t>(TensorShape({2, 3}), 2),
                           Tensor::Filled<int64_t>(TensorShape({3, 1}), 3)});
  ASSERT_TRUE(ints.ok());
  ExpectTensorEqual((*ints)[0],
                    Tensor::Filled<int64_t>(TensorShape({2, 1}), 18));
}

TEST(MatMulTest, LargeMatchesNaiveProduct) {
  const int m = 70, k = 90, n = 60;
  Tensor a(DT_DOUBLE, TensorShape({m, k})), b(DT_DOUBLE, TensorShape({k, n}));
  for (int i = 0; i < m * k; ++i) a.data<double>()[i] = (i % 7) - 3;
  for (int i = 0; i < k * n; ++i) b.data<double>()[i] = (i % 5) * 0.5;
  auto out = RunKernel("MatMul", {a, b});
  ASSERT_TRUE(out.ok());
  for (int i = 0; i < m; i += 7)
    for (int j = 0; j < n; j += 11) {
      double s = 0;
      for (int p = 0; p < k; ++p)
        s += a.data<double>()[i * k + p] * b.data<double>()[p * n + j];
      ASSERT_NEAR((*out)[0].data<double>()[i * n + j], s, 1e-9);
    }
}

// Both dtypes, every transpose combination, sizes past any small-matrix
// path, non-square: through the BLAS when one is loaded (kernels/blas.h).
TEST(MatMulTest, LargeTransposedFloatAndDoubleMatchNaiveProduct) {
  const int m = 67, k = 129, n = 33;
  for (DataType dtype : {DT_FLOAT, DT_DOUBLE}) {
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        // Stored shapes: a is k x m when transposed, b n x k.
        Tensor a(dtype, ta ? TensorShape({k, m}) : TensorShape({m, k}));
        Tensor b(dtype, tb ? TensorShape({n, k}) : TensorShape({k, n}));
        auto value = [](int i) { return ((i * 37) % 11) - 5; };
        auto at = [&](const Tensor& t, int64_t i) {
          return dtype == DT_FLOAT ? double{t.data<float>()[i]}
                                   : t.data<double>()[i];
        };
        for (int64_t i = 0; i < a.NumElements(); ++i) {
          if (dtype == DT_FLOAT) a.data<float>()[i] = value(i);
          if (dtype == DT_DOUBLE) a.data<double>()[i] = value(i) * 0.5;
        }
        for (int64_t i = 0; i < b.NumElements(); ++i) {
          if (dtype == DT_FLOAT) b.data<float>()[i] = value(i + 3);
          if (dtype == DT_DOUBLE) b.data<double>()[i] = value(i + 3) * 0.25;
        }
        auto out = RunKernel("MatMul", {a, b},
                             {{"transpose_a", ta}, {"transpose_b", tb}});
        ASSERT_TRUE(out.ok()) << out.status();
        ASSERT_EQ((*out)[0].shape(), TensorShape({m, n}));
        for (int i = 0; i < m; ++i) {
          for (int j = 0; j < n; ++j) {
            double s = 0;
            for (int p = 0; p < k; ++p) {
              s += at(a, ta ? p * m + i : i * k + p) *
                   at(b, tb ? j * k + p : p * n + j);
            }
            // Small integers (halves, quarters): exact in either dtype.
            ASSERT_EQ(at((*out)[0], i * n + j), s)
                << DataTypeName(dtype) << " ta=" << ta << " tb=" << tb
                << " at (" << i << ", " << j << ")";
          }
        }
      }
    }
  }
}

TEST(BlasTest, DescriptionSaysWhichKernelsRun) {
  const std::string description = Blas::Description();
  if (Blas::Get() != nullptr) {
    EXPECT_THAT(description, ::testing::StartsWith("openblas "));
    EXPECT_THAT(description, HasSubstr(" core; asked for "));
  } else {
    EXPECT_THAT(description, ::testing::StartsWith("eigen ("));
  }
  const std::string core = Blas::CoreTypeForThisCpu();
  EXPECT_TRUE(core.empty() || core == "Haswell" || core == "SkylakeX") << core;
}

TEST(MatMulTest, ErrorsNameTheNode) {
  auto bad = RunKernel("MatMul", {Tensor(DT_FLOAT, TensorShape({2, 3})),
                                  Tensor(DT_FLOAT, TensorShape({2, 3}))});
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(bad.status()), HasSubstr("node 'op' (op MatMul)"));
  EXPECT_THAT(Message(bad.status()), HasSubstr("inner dimensions"));
  auto rank =
      RunKernel("MatMul", {Tensor::Vec<float>({1}), Tensor::Vec<float>({1})});
  EXPECT_EQ(rank.status().code(), absl::StatusCode::kInvalidArgument);
  auto types = RunKernel("MatMul", {Tensor(DT_FLOAT, TensorShape({1, 1})),
                                    Tensor(DT_DOUBLE, TensorShape({1, 1}))});
  EXPECT_EQ(types.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(SumTest, LeadingAxesSumEachColumnInRowOrder) {
  // [300, 1000] over axis 0, and [4, 75, 1000] over axes 0 and 1 (the same
  // 300 rows): each column's sum, row by row, bit for bit, with and
  // without keep_dims; large enough for the test device's pool.
  const Tensor x2 = RandomFloats(TensorShape({300, 1000}), 3);
  Tensor want(DT_FLOAT, TensorShape({1000}));
  for (int c = 0; c < 1000; ++c) {
    float s = 0.f;
    for (int r = 0; r < 300; ++r) s += x2.data<float>()[r * 1000 + c];
    want.data<float>()[c] = s;
  }
  auto rows = RunKernel("Sum", {x2, Tensor::Vec<int32_t>({0})});
  ASSERT_TRUE(rows.ok()) << rows.status();
  ExpectSameFloatBits((*rows)[0], want);

  Tensor x3(DT_FLOAT, TensorShape({4, 75, 1000}));
  std::copy_n(x2.data<float>(), x2.NumElements(), x3.data<float>());
  auto two = RunKernel("Sum", {x3, Tensor::Vec<int32_t>({0, -2})},
                       {{"keep_dims", true}});
  ASSERT_TRUE(two.ok()) << two.status();
  Tensor want_kept(DT_FLOAT, TensorShape({1, 1, 1000}));
  std::copy_n(want.data<float>(), 1000, want_kept.data<float>());
  ExpectSameFloatBits((*two)[0], want_kept);
}

}  // namespace
}  // namespace cohort
