// The element-wise arithmetic of the collectives, shared by every transport
// so that each computes a reduction the same way.
//
// Thread safety: pure functions.
#ifndef COHORT_COLLECTIVE_REDUCE_H_
#define COHORT_COLLECTIVE_REDUCE_H_

#include <cstddef>

#include "cohort/collective/communicator.h"

namespace cohort::collective {

// out[i] = in[0][i] + in[1][i] + ... + in[n - 1][i], summed in that order
// (then divided by `divisor` when it is not 1). `out` may be one of the
// inputs. `count` elements of `type`.
void ReduceInto(void* out, const void* const* in, int n, size_t count,
                ElementType type, double divisor);

// out[i] += in[i].
void AccumulateInto(void* out, const void* in, size_t count, ElementType type);

// out[i] /= divisor.
void DivideInPlace(void* out, size_t count, ElementType type, double divisor);

}  // namespace cohort::collective

#endif  // COHORT_COLLECTIVE_REDUCE_H_
