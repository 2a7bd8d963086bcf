// The process-wide registries holding every op, kernel and gradient cohort
// ships. They are filled on first use by explicit calls (RegisterAllOps,
// RegisterAllKernels in kernels/all_kernels.h, RegisterAllGradients in
// gradients/all_gradients.h) -- no static initialisers. Tests and embedders
// that want a restricted set build their own registries instead.
//
// Thread safety: the first call builds the registry (thread-safe, once);
// the registries are thread-safe afterwards. Never destroyed.
#ifndef COHORT_GRAPH_STANDARD_REGISTRIES_H_
#define COHORT_GRAPH_STANDARD_REGISTRIES_H_

namespace cohort {

class OpRegistry;
class KernelRegistry;
class GradientRegistry;

const OpRegistry* StandardOpRegistry();
const KernelRegistry* StandardKernelRegistry();
const GradientRegistry* StandardGradientRegistry();

}  // namespace cohort

#endif  // COHORT_GRAPH_STANDARD_REGISTRIES_H_
