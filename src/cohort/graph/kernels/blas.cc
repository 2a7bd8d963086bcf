#include "cohort/graph/kernels/blas.h"

#include <dlfcn.h>

#include <climits>
#include <cstdlib>

#include "absl/strings/str_cat.h"

namespace cohort {
namespace {

// CBLAS enum values (cblas.h): row-major storage, (no) transpose.
constexpr int kCblasRowMajor = 101;
constexpr int kCblasNoTrans = 111;
constexpr int kCblasTrans = 112;

// The library Debian's libopenblas0-pthread installs in the loader's path.
constexpr char kOpenBlasLibrary[] = "libopenblas.so.0";

int Op(bool transpose) { return transpose ? kCblasTrans : kCblasNoTrans; }

}  // namespace

struct Blas::Loaded {
  const Blas* blas = nullptr;
  std::string description;
};

std::string Blas::CoreTypeForThisCpu() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  // The checks include the operating system's support for the registers.
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512vl")) {
    return "SkylakeX";
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    return "Haswell";
  }
#endif
  return "";
}

bool Blas::FitsInt(int64_t m, int64_t n, int64_t k) {
  return m <= INT_MAX && n <= INT_MAX && k <= INT_MAX;
}

const Blas* Blas::Get() { return Load().blas; }

std::string Blas::Description() { return Load().description; }

const Blas::Loaded& Blas::Load() {
  static const Loaded* loaded = [] {
    auto* l = new Loaded;
#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
    // OpenBLAS's threads synchronise in code TSan cannot see.
    l->description = "eigen (ThreadSanitizer build)";
    return l;
#endif
#endif
    const char* forced = std::getenv("COHORT_MATMUL");
    if (forced != nullptr && std::string(forced) == "eigen") {
      l->description = "eigen (COHORT_MATMUL=eigen)";
      return l;
    }
    std::string coretype_note;
    const char* user_coretype = std::getenv("OPENBLAS_CORETYPE");
    if (user_coretype != nullptr && *user_coretype != '\0') {
      coretype_note = absl::StrCat(user_coretype, " (OPENBLAS_CORETYPE set)");
    } else {
      const std::string core = CoreTypeForThisCpu();
      if (!core.empty()) {
        setenv("OPENBLAS_CORETYPE", core.c_str(), /*overwrite=*/0);
        coretype_note =
            absl::StrCat(core, " (OPENBLAS_CORETYPE set by cohort)");
      } else {
        coretype_note = "(OpenBLAS's own CPU detection)";
      }
    }
    void* lib = dlopen(kOpenBlasLibrary, RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      l->description = absl::StrCat("eigen (no ", kOpenBlasLibrary,
                                    ": install libopenblas0-pthread)");
      return l;
    }
    auto* blas = new Blas;
    blas->sgemm_ = reinterpret_cast<SgemmFn>(dlsym(lib, "cblas_sgemm"));
    blas->dgemm_ = reinterpret_cast<DgemmFn>(dlsym(lib, "cblas_dgemm"));
    if (blas->sgemm_ == nullptr || blas->dgemm_ == nullptr) {
      l->description = absl::StrCat("eigen (", kOpenBlasLibrary,
                                    " has no cblas_sgemm/cblas_dgemm)");
      delete blas;
      return l;
    }
    using CorenameFn = char* (*)();
    auto corename =
        reinterpret_cast<CorenameFn>(dlsym(lib, "openblas_get_corename"));
    std::string running = corename != nullptr ? corename() : "?";
    l->description =
        absl::StrCat("openblas ", running, " core; asked for ", coretype_note);
    l->blas = blas;
    return l;
  }();
  return *loaded;
}

void Blas::Gemm(bool transpose_a, bool transpose_b, int64_t m, int64_t n,
                int64_t k, const float* a, int64_t lda, const float* b,
                int64_t ldb, float* c, int64_t ldc) const {
  sgemm_(kCblasRowMajor, Op(transpose_a), Op(transpose_b), static_cast<int>(m),
         static_cast<int>(n), static_cast<int>(k), 1.0f, a,
         static_cast<int>(lda), b, static_cast<int>(ldb), 0.0f, c,
         static_cast<int>(ldc));
}

void Blas::Gemm(bool transpose_a, bool transpose_b, int64_t m, int64_t n,
                int64_t k, const double* a, int64_t lda, const double* b,
                int64_t ldb, double* c, int64_t ldc) const {
  dgemm_(kCblasRowMajor, Op(transpose_a), Op(transpose_b), static_cast<int>(m),
         static_cast<int>(n), static_cast<int>(k), 1.0, a,
         static_cast<int>(lda), b, static_cast<int>(ldb), 0.0, c,
         static_cast<int>(ldc));
}

}  // namespace cohort
