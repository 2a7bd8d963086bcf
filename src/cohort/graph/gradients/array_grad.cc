// Gradients of array ops (see gradients.h for the contract).
#include "cohort/base/status.h"
#include "cohort/graph/gradients/all_gradients.h"
#include "cohort/graph/kernels/array_ops.h"

namespace cohort {
namespace {

absl::Status IdentityGrad(const Scope& scope, const Operation& op,
                          const std::vector<Output>& grad_outputs,
                          std::vector<Output>* grad_inputs) {
  grad_inputs->push_back(ops::Identity(scope, grad_outputs[0]));
  return scope.status();
}

}  // namespace

absl::Status RegisterArrayGradients(GradientRegistry* r) {
  COHORT_RETURN_IF_ERROR(r->Register("Identity", IdentityGrad));
  COHORT_RETURN_IF_ERROR(r->RegisterNoGradient("Const"));
  COHORT_RETURN_IF_ERROR(r->RegisterNoGradient("Placeholder"));
  COHORT_RETURN_IF_ERROR(r->RegisterNoGradient("NoOp"));
  return absl::OkStatus();
}

}  // namespace cohort
