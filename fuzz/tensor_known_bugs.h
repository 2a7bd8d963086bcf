// Known-bug filter for fuzzers that build tensors from TensorProtos (see
// known_bugs.h). Needs cohort_graph.
//
// Thread safety: thread-safe.
#ifndef COHORT_FUZZ_TENSOR_KNOWN_BUGS_H_
#define COHORT_FUZZ_TENSOR_KNOWN_BUGS_H_

#include <cstdint>
#include <string>

#include "cohort/graph.pb.h"
#include "cohort/graph/types.h"
#include "known_bugs.h"

namespace cohort::fuzz {

// Fixed (crashes-found/checkpoint/README.md): Tensor::FromProto allocated the
// declared shape before looking at the values, and the byte count wrapped.
// It now refuses a byte count that overflows and any size its values do not
// carry, except one value broadcast up to 1 GiB, which is legal; this filter
// stays only to keep the fuzzer from spending its time on such allocations.
// True when `proto` declares more than 64 MiB or a byte count that
// overflows 64 bits.
inline bool TensorDeclaresTooMuch(const TensorProto& proto) {
  constexpr uint64_t kMaxDeclaredBytes = uint64_t{64} << 20;
  uint64_t bytes = 1;
  if (proto.dtype() == DT_STRING) {
    bytes = sizeof(std::string);
  } else if (proto.dtype() == DT_RESOURCE) {
    bytes = sizeof(ResourceHandle);
  } else if (DataTypeSize(proto.dtype()) > 0) {
    bytes = static_cast<uint64_t>(DataTypeSize(proto.dtype()));
  }
  for (const auto& dim : proto.tensor_shape().dim()) {
    if (dim.size() < 0) return false;  // refused before any allocation
    if (__builtin_mul_overflow(bytes, static_cast<uint64_t>(dim.size()),
                               &bytes)) {
      return true;
    }
  }
  return bytes > kMaxDeclaredBytes;
}

}  // namespace cohort::fuzz

#endif  // COHORT_FUZZ_TENSOR_KNOWN_BUGS_H_
