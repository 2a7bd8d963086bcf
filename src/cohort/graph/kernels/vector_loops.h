// Vector loops: the float32 inner loops of the training step's
// memory-bound kernels (Relu and its gradient, the bias add and the bias
// gradient's column sum, the optimizers' updates), compiled three times
// (AVX-512, AVX2, and the x86-64 baseline) and chosen once, when the
// program is loaded, for the CPU it runs on (the compiler's target_clones
// and the loader's ifunc). The binary stays portable; the machine it runs
// on gets its widest vectors. (A ThreadSanitizer build compiles them once,
// for the baseline: see vector_loops.cc.)
//
// Every variant computes the same bits: floating-point contraction is off
// in these loops (no a * b + c turned into one rounded FMA on the CPUs that
// have it), and no loop reorders a sum. So tasks of a synchronous job keep
// bit-identical parameters even on hosts of different CPU generations, and
// the results equal those of the plain scalar expressions in the comments.
//
// Ranges: each function works on [begin, end) of its (flat or column)
// index, so a kernel may split one call across the intra-op pool
// (ParallelLoop) and every split gives the same result.
//
// Thread safety: pure functions of their arguments; concurrent calls on
// disjoint outputs are safe.
#ifndef COHORT_GRAPH_KERNELS_VECTOR_LOOPS_H_
#define COHORT_GRAPH_KERNELS_VECTOR_LOOPS_H_

#include <cstdint>
#include <functional>

namespace cohort {

class OpKernelContext;

namespace vector_loops {

// out[i] = x[i] > 0 ? x[i] : 0. `out` may be `x` (in place).
void Relu(const float* x, float* out, int64_t begin, int64_t end);

// out[i] = y[i] > 0 ? g[i] : 0 (TensorFlow's ReluGrad(gradients, features)
// where `y` may be Relu's input or output: both are positive at the same
// places). `out` may be `g` (in place).
void ReluGrad(const float* g, const float* y, float* out, int64_t begin,
              int64_t end);

// For a row-major [rows, cols] `x`: out[r, c] = x[r, c] + row[c], for the
// columns c in [begin, end) of every row. `out` may be `x` (in place).
void AddRow(const float* x, const float* row, float* out, int64_t rows,
            int64_t cols, int64_t begin, int64_t end);

// For a row-major [rows, cols] `x`: out[c] = x[0, c] + x[1, c] + ... (in
// row order), for the columns c in [begin, end). The reduction of leading
// axes (the gradient of a bias).
void SumRows(const float* x, float* out, int64_t rows, int64_t cols,
             int64_t begin, int64_t end);

// w[i] -= delta[i] * alpha.
void GradientDescent(float* w, const float* delta, float alpha, int64_t begin,
                     int64_t end);

// accum[i] = accum[i] * momentum + g[i]; then
// w[i] -= accum[i] * lr, or with Nesterov
// w[i] -= g[i] * lr + accum[i] * momentum * lr.
void Momentum(float* w, float* accum, const float* g, float lr, float momentum,
              bool nesterov, int64_t begin, int64_t end);

}  // namespace vector_loops

// Runs fn(begin, end) over pieces covering [0, n): on the calling thread
// when the work is small (n * bytes_per_element below 256 KiB) or `ctx` has
// no device, else split across the device's intra-op pool.
// `bytes_per_element` (memory read plus written per index) also sizes the
// pieces. Returns when every piece is done.
void ParallelLoop(OpKernelContext* ctx, int64_t n, double bytes_per_element,
                  const std::function<void(int64_t, int64_t)>& fn);

}  // namespace cohort

#endif  // COHORT_GRAPH_KERNELS_VECTOR_LOOPS_H_
