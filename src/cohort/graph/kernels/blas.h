// Blas: the machine's optimised BLAS for the graph engine's matrix
// products (MatMul), loaded at run time.
//
// Debian's OpenBLAS (libopenblas0-pthread: libopenblas.so.0, kernels for
// every x86-64 generation chosen at load time) is opened with dlopen on the
// first Get(). OpenBLAS 0.3.21 picks its kernels from the CPU model and
// names some AVX-512 CPUs "Prescott" (SSE3 kernels, 6x slower), so unless
// the user has set OPENBLAS_CORETYPE, Get() sets it first to what the CPU
// reports by feature flags (AVX-512 F/BW/DQ/VL: SkylakeX; AVX2 + FMA:
// Haswell). Loading after setting it is why this is dlopen, not a link:
// a linked OpenBLAS reads the variable before main().
//
// Without the library (or with COHORT_MATMUL=eigen, or in a ThreadSanitizer
// build: OpenBLAS's threads synchronise where TSan cannot see) Get()
// returns null and MatMul runs Eigen's contraction. Description() says what
// runs, for benchmarks and logs.
//
// Thread safety: Get() is thread-safe (the first call loads; it sets an
// environment variable, so call it early, before other threads read the
// environment, when that matters); Gemm may run on many threads at once
// (OpenBLAS 0.3.21 is thread-safe and uses its own thread pool).
#ifndef COHORT_GRAPH_KERNELS_BLAS_H_
#define COHORT_GRAPH_KERNELS_BLAS_H_

#include <cstdint>
#include <string>

namespace cohort {

class Blas {
 public:
  // The loaded BLAS, or nullptr (use Eigen).
  static const Blas* Get();
  // "openblas" or "eigen" plus the core type and what chose it, e.g.
  // "openblas 0.3.21 SkylakeX (OPENBLAS_CORETYPE set by cohort)".
  static std::string Description();
  // The core type that Get() sets when the user has not ("" when none
  // fits): the value the benchmark gives NumPy's OpenBLAS too.
  static std::string CoreTypeForThisCpu();

  // C = op(A) * op(B), row-major, with op = transpose when asked; A is
  // m x k after op, B k x n, C m x n; lda/ldb/ldc are row strides. Sizes
  // must fit in int (FitsInt); callers fall back to Eigen otherwise.
  void Gemm(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k,
            const float* a, int64_t lda, const float* b, int64_t ldb, float* c,
            int64_t ldc) const;
  void Gemm(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k,
            const double* a, int64_t lda, const double* b, int64_t ldb,
            double* c, int64_t ldc) const;

  static bool FitsInt(int64_t m, int64_t n, int64_t k);

 private:
  using SgemmFn = void (*)(int, int, int, int, int, int, float, const float*,
                           int, const float*, int, float, float*, int);
  using DgemmFn = void (*)(int, int, int, int, int, int, double, const double*,
                           int, const double*, int, double, double*, int);
  struct Loaded;
  // Loads on the first call; the result never changes.
  static const Loaded& Load();
  Blas() = default;

  SgemmFn sgemm_ = nullptr;
  DgemmFn dgemm_ = nullptr;
};

}  // namespace cohort

#endif  // COHORT_GRAPH_KERNELS_BLAS_H_
