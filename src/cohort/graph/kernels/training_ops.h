// Optimizer update ops on resource variables (Var in resource_mgr.h):
// ApplyGradientDescent, ApplyMomentum, ApplyAdam. They have no outputs and
// are run as targets.
//
// Op semantics (TensorFlow's ResourceApply* ops; T in {float, double}):
//  - ApplyGradientDescent(var: resource, alpha: T, delta: T):
//      var -= alpha * delta
//  - ApplyMomentum(var, accum: resource, lr: T, grad: T, momentum: T;
//    use_nesterov: bool = false):
//      accum = accum * momentum + grad
//      var -= lr * accum            (nesterov: lr * grad + lr * momentum *
//      accum)
//  - ApplyAdam(var, m, v: resource, beta1_power, beta2_power, lr, beta1,
//    beta2, epsilon: T (scalars), grad: T; use_nesterov: bool = false):
//      lr_t = lr * sqrt(1 - beta2_power) / (1 - beta1_power)
//      m = m + (grad - m) * (1 - beta1);  v = v + (grad^2 - v) * (1 - beta2)
//      var -= lr_t * m / (sqrt(v) + epsilon)
//        (nesterov: m replaced by m * beta1 + (1 - beta1) * grad)
//
// Errors: NotFound (the variable does not exist), FailedPrecondition
// "variable 'w' is not initialised; run its initializer first",
// InvalidArgument for a dtype or shape mismatch between a variable and the
// gradient ("variable 'w' has shape [3] but grad has shape [4]") or a
// non-scalar hyper-parameter.
//
// Thread safety: each update holds the variables' mutexes (exclusive, in
// argument order) while writing; readers see snapshots (see Var).
#ifndef COHORT_GRAPH_KERNELS_TRAINING_OPS_H_
#define COHORT_GRAPH_KERNELS_TRAINING_OPS_H_

#include "absl/status/status.h"
#include "cohort/graph/builder.h"
#include "cohort/graph/kernel.h"
#include "cohort/graph/op_registry.h"

namespace cohort {

absl::Status RegisterTrainingOps(OpRegistry* registry);
absl::Status RegisterTrainingKernels(KernelRegistry* registry);

namespace ops {

Operation ApplyGradientDescent(const Scope& scope, Input var, Input alpha,
                               Input delta);
Operation ApplyMomentum(const Scope& scope, Input var, Input accum, Input lr,
                        Input grad, Input momentum, bool use_nesterov = false);
Operation ApplyAdam(const Scope& scope, Input var, Input m, Input v,
                    Input beta1_power, Input beta2_power, Input lr, Input beta1,
                    Input beta2, Input epsilon, Input grad,
                    bool use_nesterov = false);

}  // namespace ops
}  // namespace cohort

#endif  // COHORT_GRAPH_KERNELS_TRAINING_OPS_H_
