#include "cohort/graph/kernels/vector_loops.h"

#include <algorithm>

#include "cohort/graph/kernel.h"
#include "unsupported/Eigen/CXX11/Tensor"

// The same bits from every clone (file comment of the header): without
// this, the AVX2 and AVX-512 clones would fuse a * b + c into one FMA where
// the baseline rounds twice.
#pragma clang fp contract(off)

// One clone per vector width; the loader picks the widest the CPU has.
// Not under ThreadSanitizer: the loader runs the clones' resolver before
// TSan's runtime is up, and the instrumented resolver crashes the program.
#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define COHORT_VECTOR_CLONES
#endif
#endif
#ifndef COHORT_VECTOR_CLONES
#define COHORT_VECTOR_CLONES \
  __attribute__((target_clones("avx512f", "avx2", "default")))
#endif

namespace cohort {
namespace vector_loops {

COHORT_VECTOR_CLONES
// In place (out == x, out == g) each loop runs a copy of itself that names
// one array for the read and the write: the vectoriser's runtime overlap
// check between two pointers fails when they are equal and falls back to
// scalar code, ~7x slower for ReluGrad's data-dependent select.

void Relu(const float* x, float* out, int64_t begin, int64_t end) {
  if (x == out) {
    for (int64_t i = begin; i < end; ++i) out[i] = out[i] > 0.f ? out[i] : 0.f;
    return;
  }
  for (int64_t i = begin; i < end; ++i) out[i] = x[i] > 0.f ? x[i] : 0.f;
}

COHORT_VECTOR_CLONES
void ReluGrad(const float* g, const float* y, float* out, int64_t begin,
              int64_t end) {
  if (g == out) {
    for (int64_t i = begin; i < end; ++i) out[i] = y[i] > 0.f ? out[i] : 0.f;
    return;
  }
  for (int64_t i = begin; i < end; ++i) out[i] = y[i] > 0.f ? g[i] : 0.f;
}

COHORT_VECTOR_CLONES
void AddRow(const float* x, const float* row, float* out, int64_t rows,
            int64_t cols, int64_t begin, int64_t end) {
  if (x == out) {
    for (int64_t r = 0; r < rows; ++r) {
      float* o = out + r * cols;
      for (int64_t c = begin; c < end; ++c) o[c] = o[c] + row[c];
    }
    return;
  }
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    float* o = out + r * cols;
    for (int64_t c = begin; c < end; ++c) o[c] = xr[c] + row[c];
  }
}

COHORT_VECTOR_CLONES
void SumRows(const float* x, float* out, int64_t rows, int64_t cols,
             int64_t begin, int64_t end) {
  // Column blocks that stay in L1 while every row is added in: each column's
  // sum still runs in row order, so the blocking changes no bit.
  constexpr int64_t kBlock = 512;
  for (int64_t b = begin; b < end; b += kBlock) {
    const int64_t e = std::min(end, b + kBlock);
    for (int64_t c = b; c < e; ++c) out[c] = 0.f;
    for (int64_t r = 0; r < rows; ++r) {
      const float* xr = x + r * cols;
      for (int64_t c = b; c < e; ++c) out[c] += xr[c];
    }
  }
}

COHORT_VECTOR_CLONES
void GradientDescent(float* w, const float* delta, float alpha, int64_t begin,
                     int64_t end) {
  for (int64_t i = begin; i < end; ++i) w[i] -= delta[i] * alpha;
}

COHORT_VECTOR_CLONES
void Momentum(float* w, float* accum, const float* g, float lr, float momentum,
              bool nesterov, int64_t begin, int64_t end) {
  if (nesterov) {
    for (int64_t i = begin; i < end; ++i) {
      const float a = accum[i] * momentum + g[i];
      accum[i] = a;
      w[i] -= g[i] * lr + a * momentum * lr;
    }
  } else {
    for (int64_t i = begin; i < end; ++i) {
      const float a = accum[i] * momentum + g[i];
      accum[i] = a;
      w[i] -= a * lr;
    }
  }
}

}  // namespace vector_loops

void ParallelLoop(OpKernelContext* ctx, int64_t n, double bytes_per_element,
                  const std::function<void(int64_t, int64_t)>& fn) {
  // Below this much memory traffic, handing pieces to the pool costs more
  // than the loop.
  constexpr double kInlineBytes = 256 << 10;
  if (n <= 0) return;
  if (n * bytes_per_element < kInlineBytes || ctx == nullptr ||
      ctx->device() == nullptr) {
    fn(0, n);
    return;
  }
  // Eigen sizes the pieces from the cost: memory traffic, ~1 cycle each.
  ctx->eigen_cpu_device().parallelFor(
      n, Eigen::TensorOpCost(bytes_per_element, 0, 1),
      [&fn](Eigen::Index begin, Eigen::Index end) { fn(begin, end); });
}

}  // namespace cohort
