// Registration of every op and kernel cohort ships. Each op family
// (array_ops, math_ops, state_ops, ...) exports
//   absl::Status Register<Family>Ops(OpRegistry*);
//   absl::Status Register<Family>Kernels(KernelRegistry*);
// and RegisterAllOps / RegisterAllKernels call them all. Add a family by
// adding one line to each function in all_kernels.cc.
//
// Thread safety: as the registries'.
#ifndef COHORT_GRAPH_KERNELS_ALL_KERNELS_H_
#define COHORT_GRAPH_KERNELS_ALL_KERNELS_H_

#include "absl/status/status.h"
#include "cohort/graph/kernel.h"
#include "cohort/graph/op_registry.h"

namespace cohort {

absl::Status RegisterAllOps(OpRegistry* registry);
absl::Status RegisterAllKernels(KernelRegistry* registry);

}  // namespace cohort

#endif  // COHORT_GRAPH_KERNELS_ALL_KERNELS_H_
