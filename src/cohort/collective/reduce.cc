#include "cohort/collective/reduce.h"

namespace cohort::collective {
namespace {

// The loops are written so that the compiler vectorises them: one output
// stream, inputs read once, no aliasing assumptions needed beyond "out may
// equal an input" (each element is read before it is written).
template <typename T>
void ReduceTyped(T* out, const void* const* in, int n, size_t count,
                 T divisor) {
  const T* a = static_cast<const T*>(in[0]);
  if (n == 1) {
    for (size_t i = 0; i < count; ++i) out[i] = a[i] / divisor;
    return;
  }
  const T* b = static_cast<const T*>(in[1]);
  if (n == 2) {
    if (divisor == T{1}) {
      for (size_t i = 0; i < count; ++i) out[i] = a[i] + b[i];
    } else {
      for (size_t i = 0; i < count; ++i) out[i] = (a[i] + b[i]) / divisor;
    }
    return;
  }
  // More inputs: accumulate in blocks that stay in L1, input by input, in
  // rank order (the same order as the two-input case).
  constexpr size_t kBlock = 2048;
  T acc[kBlock];
  for (size_t base = 0; base < count; base += kBlock) {
    size_t len = count - base < kBlock ? count - base : kBlock;
    for (size_t i = 0; i < len; ++i) acc[i] = a[base + i] + b[base + i];
    for (int k = 2; k < n; ++k) {
      const T* c = static_cast<const T*>(in[k]) + base;
      for (size_t i = 0; i < len; ++i) acc[i] += c[i];
    }
    for (size_t i = 0; i < len; ++i) out[base + i] = acc[i] / divisor;
  }
}

template <typename T>
void AccumulateTyped(T* out, const T* in, size_t count) {
  for (size_t i = 0; i < count; ++i) out[i] += in[i];
}

template <typename T>
void DivideTyped(T* out, size_t count, T divisor) {
  for (size_t i = 0; i < count; ++i) out[i] /= divisor;
}

}  // namespace

size_t ElementSize(ElementType type) {
  return type == ElementType::kFloat32 ? sizeof(float) : sizeof(double);
}

const char* ElementTypeName(ElementType type) {
  return type == ElementType::kFloat32 ? "float32" : "float64";
}

const char* ReduceOpName(ReduceOp op) {
  return op == ReduceOp::kSum ? "SUM" : "MEAN";
}

void ReduceInto(void* out, const void* const* in, int n, size_t count,
                ElementType type, double divisor) {
  if (type == ElementType::kFloat32) {
    ReduceTyped(static_cast<float*>(out), in, n, count,
                static_cast<float>(divisor));
  } else {
    ReduceTyped(static_cast<double*>(out), in, n, count, divisor);
  }
}

void AccumulateInto(void* out, const void* in, size_t count, ElementType type) {
  if (type == ElementType::kFloat32) {
    AccumulateTyped(static_cast<float*>(out), static_cast<const float*>(in),
                    count);
  } else {
    AccumulateTyped(static_cast<double*>(out), static_cast<const double*>(in),
                    count);
  }
}

void DivideInPlace(void* out, size_t count, ElementType type, double divisor) {
  if (type == ElementType::kFloat32) {
    DivideTyped(static_cast<float*>(out), count, static_cast<float>(divisor));
  } else {
    DivideTyped(static_cast<double*>(out), count, divisor);
  }
}

}  // namespace cohort::collective
