// ScopedFlushDenormal: while alive, this thread's float arithmetic treats
// denormal inputs as zero and flushes denormal results to zero (x86 MXCSR
// DAZ and FTZ), as TensorFlow's executor does for every kernel. Training
// drives many values (gradients, small activations) into the denormal
// range, where each operation takes a microcode assist: a MatMul of them
// runs several times slower (measured here: a data-parallel step 5x
// slower). The previous mode comes back on destruction.
//
// Thread safety: per thread (the mode is a thread's register).
#ifndef COHORT_GRAPH_DENORMAL_H_
#define COHORT_GRAPH_DENORMAL_H_

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

namespace cohort {

class ScopedFlushDenormal {
 public:
#if defined(__x86_64__) || defined(__i386__)
  // 0x8040: FTZ (bit 15) and DAZ (bit 6).
  ScopedFlushDenormal() : saved_(_mm_getcsr()) { _mm_setcsr(saved_ | 0x8040); }
  ~ScopedFlushDenormal() { _mm_setcsr(saved_); }
#else
  ScopedFlushDenormal() = default;
#endif
  ScopedFlushDenormal(const ScopedFlushDenormal&) = delete;
  ScopedFlushDenormal& operator=(const ScopedFlushDenormal&) = delete;

 private:
#if defined(__x86_64__) || defined(__i386__)
  unsigned int saved_;
#endif
};

}  // namespace cohort

#endif  // COHORT_GRAPH_DENORMAL_H_
