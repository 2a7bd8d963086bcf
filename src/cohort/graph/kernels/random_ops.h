// Seeded random ops: RandomUniform and RandomNormal.
//
// Op semantics:
//  - RandomUniform(shape: int32) -> dtype in [0, 1); RandomNormal(shape:
//    int32) -> dtype from N(0, 1); dtype in {float, double}; attrs seed: int
//    = 0, seed2: int = 0.
//  - Generator: std::mt19937_64 (its output sequence is fixed by the C++
//    standard, so numbers are identical on every platform), seeded with
//    seed * 0x9E3779B97F4A7C15 + seed2. Uniform floats take the top 24
//    (double: 53) bits of each 64-bit draw; normals use the Box-Muller
//    transform on pairs of uniform doubles. No std::*_distribution is used
//    (their algorithms are implementation-defined).
//  - Determinism: two nodes (in any graph or session) with the same nonzero
//    (seed, seed2) produce the same numbers; each further run of one node
//    continues its stream (like TensorFlow's op-level seeds). seed = seed2
//    = 0 seeds from std::random_device (nondeterministic).
//  - InvalidArgument for a negative or non-vector shape.
//
// Thread safety: a kernel's generator is guarded by a mutex; concurrent runs
// of one node each get a disjoint chunk of the stream.
#ifndef COHORT_GRAPH_KERNELS_RANDOM_OPS_H_
#define COHORT_GRAPH_KERNELS_RANDOM_OPS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "cohort/graph/builder.h"
#include "cohort/graph/kernel.h"
#include "cohort/graph/op_registry.h"

namespace cohort {

absl::Status RegisterRandomOps(OpRegistry* registry);
absl::Status RegisterRandomKernels(KernelRegistry* registry);

namespace ops {

Output RandomUniform(const Scope& scope, Input shape, DataType dtype,
                     int64_t seed = 0, int64_t seed2 = 0);
Output RandomNormal(const Scope& scope, Input shape, DataType dtype,
                    int64_t seed = 0, int64_t seed2 = 0);

}  // namespace ops
}  // namespace cohort

#endif  // COHORT_GRAPH_KERNELS_RANDOM_OPS_H_
