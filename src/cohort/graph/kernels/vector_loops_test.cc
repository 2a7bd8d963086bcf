// The vector loops against the plain scalar expressions of their contract,
// bit for bit (a clone that fused a multiply-add, reordered a sum or wrote
// outside its range fails), and ParallelLoop's cover of [0, n).
#include "cohort/graph/kernels/vector_loops.h"

#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace cohort {
namespace {

// Values of both signs and many magnitudes, zeros included.
std::vector<float> Random(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.f, 3.f);
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = i % 7 == 3 ? 0.f : normal(rng);
  return v;
}

// Bitwise equality, so -0 vs +0 and one-ulp differences fail.
void ExpectSameBits(const std::vector<float>& got,
                    const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(std::memcmp(&got[i], &want[i], sizeof(float)), 0)
        << "element " << i << ": got " << got[i] << ", want " << want[i];
  }
}

// Sizes around the vector widths (8, 16) and a large odd one; the ranges
// leave elements on both sides untouched.
const int64_t kSizes[] = {1, 7, 16, 17, 1000, 4099};

TEST(VectorLoopsTest, ReluAndReluGradMatchTheScalarExpressions) {
  for (int64_t n : kSizes) {
    const auto x = Random(n, 1), g = Random(n, 2);
    const int64_t begin = n / 5, end = n - n / 7;
    std::vector<float> relu(n, -9.f), grad(n, -9.f);
    std::vector<float> want_relu(n, -9.f), want_grad(n, -9.f);
    for (int64_t i = begin; i < end; ++i) {
      want_relu[i] = x[i] > 0.f ? x[i] : 0.f;
      want_grad[i] = x[i] > 0.f ? g[i] : 0.f;
    }
    vector_loops::Relu(x.data(), relu.data(), begin, end);
    vector_loops::ReluGrad(g.data(), x.data(), grad.data(), begin, end);
    ExpectSameBits(relu, want_relu);
    ExpectSameBits(grad, want_grad);
    // In place: the same bits inside the range, the input outside it.
    auto relu_here = x, grad_here = g;
    vector_loops::Relu(relu_here.data(), relu_here.data(), begin, end);
    vector_loops::ReluGrad(grad_here.data(), x.data(), grad_here.data(), begin,
                           end);
    for (int64_t i = 0; i < n; ++i) {
      if (i < begin || i >= end) want_relu[i] = x[i], want_grad[i] = g[i];
    }
    ExpectSameBits(relu_here, want_relu);
    ExpectSameBits(grad_here, want_grad);
  }
}

TEST(VectorLoopsTest, AddRowAndSumRowsMatchTheScalarExpressions) {
  for (int64_t cols : kSizes) {
    const int64_t rows = 5;
    const auto x = Random(rows * cols, 3), row = Random(cols, 4);
    const int64_t begin = cols / 3, end = cols - cols / 4;
    std::vector<float> sum(cols, -9.f), want_sum(cols, -9.f);
    std::vector<float> add(rows * cols, -9.f), want_add(rows * cols, -9.f);
    for (int64_t c = begin; c < end; ++c) {
      float s = 0.f;
      for (int64_t r = 0; r < rows; ++r) {
        s += x[r * cols + c];  // Row order, one rounding per add.
        want_add[r * cols + c] = x[r * cols + c] + row[c];
      }
      want_sum[c] = s;
    }
    vector_loops::SumRows(x.data(), sum.data(), rows, cols, begin, end);
    vector_loops::AddRow(x.data(), row.data(), add.data(), rows, cols, begin,
                         end);
    ExpectSameBits(sum, want_sum);
    ExpectSameBits(add, want_add);
    auto add_here = x;  // In place; columns outside the range keep x.
    vector_loops::AddRow(add_here.data(), row.data(), add_here.data(), rows,
                         cols, begin, end);
    for (int64_t i = 0; i < rows * cols; ++i) {
      const int64_t c = i % cols;
      if (c < begin || c >= end) want_add[i] = x[i];
    }
    ExpectSameBits(add_here, want_add);
  }
}

TEST(VectorLoopsTest, OptimizerUpdatesMatchTheScalarExpressions) {
  const float lr = 0.0123f, momentum = 0.9f;
  for (int64_t n : kSizes) {
    for (bool nesterov : {false, true}) {
      const auto g = Random(n, 5);
      auto w = Random(n, 6), accum = Random(n, 7);
      auto want_w = w, want_accum = accum;
      const int64_t begin = n / 4, end = n - n / 5;
      for (int64_t i = begin; i < end; ++i) {
        // Each product rounded before the add, as the contract says.
        const float scaled = want_accum[i] * momentum;
        want_accum[i] = scaled + g[i];
        if (nesterov) {
          const float step = g[i] * lr;
          const float extra = want_accum[i] * momentum * lr;
          want_w[i] -= step + extra;
        } else {
          const float step = want_accum[i] * lr;
          want_w[i] -= step;
        }
      }
      vector_loops::Momentum(w.data(), accum.data(), g.data(), lr, momentum,
                             nesterov, begin, end);
      ExpectSameBits(accum, want_accum);
      ExpectSameBits(w, want_w);
    }
    const auto d = Random(n, 8);
    auto w = Random(n, 9);
    auto want = w;
    for (int64_t i = 1; i < n; ++i) {
      const float step = d[i] * lr;
      want[i] -= step;
    }
    vector_loops::GradientDescent(w.data(), d.data(), lr, 1, n);
    ExpectSameBits(w, want);
  }
}

TEST(ParallelLoopTest, WithoutADeviceRunsOnePieceInline) {
  // (The pool path is covered by the kernels' tests, whose large inputs run
  // on the test device's two threads.)
  for (int64_t n : {int64_t{1000}, int64_t{1000000}}) {
    std::vector<int> seen(n, 0);
    int pieces = 0;
    ParallelLoop(nullptr, n, 12, [&](int64_t begin, int64_t end) {
      ++pieces;
      for (int64_t i = begin; i < end; ++i) ++seen[i];
    });
    EXPECT_EQ(pieces, 1);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(seen[i], 1) << i;
  }
}

}  // namespace
}  // namespace cohort
