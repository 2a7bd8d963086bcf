// The graph suite's MatMul check: what makes a wrong product a failed
// measurement instead of a GFLOP/s figure.
#include "bench/graph/graph_bench.h"

#include <limits>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort::bench {
namespace {

using ::testing::HasSubstr;

// n x n float32 inputs with values spread over [-1, 1).
void Fill(Tensor& t, int64_t seed) {
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.NumElements(); ++i) {
    p[i] = static_cast<float>(((i + 1) * seed) % 2001 - 1000) / 1000.f;
  }
}

// C = A * B in float, k innermost: a different order from the checker's
// row-wise double sums, rounded as float code rounds.
Tensor Product(const Tensor& a, const Tensor& b, int n) {
  Tensor c(DT_FLOAT, TensorShape({n, n}));
  const float* pa = a.data<float>();
  const float* pb = b.data<float>();
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) {
      float sum = 0;
      for (int k = 0; k < n; ++k) sum += pa[i * n + k] * pb[k * n + j];
      c.data<float>()[i * n + j] = sum;
    }
  }
  return c;
}

class CheckMatMulTest : public ::testing::TestWithParam<int> {};

TEST_P(CheckMatMulTest, FloatProductPasses) {
  const int n = GetParam();
  Tensor a(DT_FLOAT, TensorShape({n, n})), b(DT_FLOAT, TensorShape({n, n}));
  Fill(a, 7919);
  Fill(b, 104729);
  const Tensor c = Product(a, b, n);
  absl::Status s = CheckMatMul(a, b, c, n);
  EXPECT_TRUE(s.ok()) << s;
}

TEST_P(CheckMatMulTest, OneWrongElementFails) {
  const int n = GetParam();
  Tensor a(DT_FLOAT, TensorShape({n, n})), b(DT_FLOAT, TensorShape({n, n}));
  Fill(a, 7919);
  Fill(b, 104729);
  Tensor c = Product(a, b, n);
  // Row n - 1 is checked at every size; one element off by 0.05, about
  // 1% of a typical entry and ten times the rounding bound at n = 300.
  const int i = n - 1, j = n / 2;
  c.data<float>()[i * n + j] += 0.05f;
  absl::Status s = CheckMatMul(a, b, c, n);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.message(),
              HasSubstr(absl::StrCat("element [", i, ",", j, "]")));
}

TEST_P(CheckMatMulTest, TransposedOperandFails) {
  const int n = GetParam();
  Tensor a(DT_FLOAT, TensorShape({n, n})), b(DT_FLOAT, TensorShape({n, n}));
  Tensor bt(DT_FLOAT, TensorShape({n, n}));
  Fill(a, 7919);
  Fill(b, 104729);
  for (int r = 0; r < n; ++r) {
    for (int k = 0; k < n; ++k) {
      bt.data<float>()[k * n + r] = b.data<float>()[r * n + k];
    }
  }
  EXPECT_EQ(CheckMatMul(a, b, Product(a, bt, n), n).code(),
            absl::StatusCode::kDataLoss);
}

TEST_P(CheckMatMulTest, NanFails) {
  const int n = GetParam();
  Tensor a(DT_FLOAT, TensorShape({n, n})), b(DT_FLOAT, TensorShape({n, n}));
  Fill(a, 7919);
  Fill(b, 104729);
  Tensor c = Product(a, b, n);
  c.data<float>()[0] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(CheckMatMul(a, b, c, n).code(), absl::StatusCode::kDataLoss);
}

// 64: every row checked; 300: the sampled rows.
INSTANTIATE_TEST_SUITE_P(Sizes, CheckMatMulTest, ::testing::Values(64, 300));

TEST(CheckMatMulShapeTest, WrongShapeFails) {
  Tensor a(DT_FLOAT, TensorShape({4, 4})), b(DT_FLOAT, TensorShape({4, 4}));
  Fill(a, 3);
  Fill(b, 5);
  Tensor c(DT_FLOAT, TensorShape({4, 3}));
  absl::Status s = CheckMatMul(a, b, c, 4);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("returned shape"));
}

}  // namespace
}  // namespace cohort::bench
