// Gradients of activations, softmax and the cross-entropy losses (see
// gradients.h for the contract).
#include "cohort/base/status.h"
#include "cohort/graph/gradients/all_gradients.h"
#include "cohort/graph/kernels/elementwise_ops.h"
#include "cohort/graph/kernels/nn_ops.h"
#include "cohort/graph/kernels/reduction_ops.h"
#include "cohort/graph/kernels/shape_ops.h"

namespace cohort {
namespace {

using Grads = std::vector<Output>;

absl::Status ReluGrad(const Scope& s, const Operation& op, const Grads& dz,
                      Grads* dx) {
  // One fused kernel, as TensorFlow's ReluGrad, where Select(y > 0, dz, 0)
  // would run four passes over the activations.
  dx->push_back(ops::ReluGrad(s, dz[0], op.output(0)));
  return s.status();
}

// ReluGrad is linear in its gradients (the mask is fixed); the features get
// none, as in TensorFlow.
absl::Status ReluGradGrad(const Scope& s, const Operation& op, const Grads& dz,
                          Grads* dx) {
  dx->push_back(ops::ReluGrad(s, dz[0], op.input(1)));
  dx->push_back(ops::ZerosLike(s, op.input(1)));
  return s.status();
}

absl::Status SigmoidGrad(const Scope& s, const Operation& op, const Grads& dz,
                         Grads* dx) {
  Output y = op.output(0);
  dx->push_back(
      ops::Mul(s, dz[0], ops::Mul(s, y, ops::Sub(s, ops::OnesLike(s, y), y))));
  return s.status();
}

absl::Status TanhGrad(const Scope& s, const Operation& op, const Grads& dz,
                      Grads* dx) {
  Output y = op.output(0);
  dx->push_back(
      ops::Mul(s, dz[0], ops::Sub(s, ops::OnesLike(s, y), ops::Square(s, y))));
  return s.status();
}

absl::Status SoftmaxGrad(const Scope& s, const Operation& op, const Grads& dz,
                         Grads* dx) {
  // dx = (dz - sum(dz * y, last axis)) * y
  Output y = op.output(0);
  Output dot = ops::Sum(s, ops::Mul(s, dz[0], y), -1, /*keep_dims=*/true);
  dx->push_back(ops::Mul(s, ops::Sub(s, dz[0], dot), y));
  return s.status();
}

// d loss / d features = dloss[:, None] * backprop. The gradient arriving at
// the backprop output (second-order use) is ignored, as in TensorFlow's
// first-order gradient.
Output XentFeaturesGrad(const Scope& s, const Operation& op, const Grads& dz) {
  Output g = ops::Reshape(s, dz[0], Tensor::Vec<int32_t>({-1, 1}));
  return ops::Mul(s, g, op.output(1));
}

absl::Status SoftmaxXentGrad(const Scope& s, const Operation& op,
                             const Grads& dz, Grads* dx) {
  dx->push_back(XentFeaturesGrad(s, op, dz));
  // d loss / d labels = -dloss[:, None] * log_softmax(features).
  Output g = ops::Reshape(s, dz[0], Tensor::Vec<int32_t>({-1, 1}));
  Output log_softmax = ops::Log(s, ops::Softmax(s, op.input(0)));
  dx->push_back(ops::Neg(s, ops::Mul(s, g, log_softmax)));
  return s.status();
}

absl::Status SparseSoftmaxXentGrad(const Scope& s, const Operation& op,
                                   const Grads& dz, Grads* dx) {
  dx->push_back(XentFeaturesGrad(s, op, dz));
  dx->push_back(NoGradient());  // Integer labels.
  return s.status();
}

}  // namespace

absl::Status RegisterNnGradients(GradientRegistry* r) {
  COHORT_RETURN_IF_ERROR(r->Register("Relu", ReluGrad));
  COHORT_RETURN_IF_ERROR(r->Register("ReluGrad", ReluGradGrad));
  COHORT_RETURN_IF_ERROR(r->Register("Sigmoid", SigmoidGrad));
  COHORT_RETURN_IF_ERROR(r->Register("Tanh", TanhGrad));
  COHORT_RETURN_IF_ERROR(r->Register("Softmax", SoftmaxGrad));
  COHORT_RETURN_IF_ERROR(
      r->Register("SoftmaxCrossEntropyWithLogits", SoftmaxXentGrad));
  COHORT_RETURN_IF_ERROR(r->Register("SparseSoftmaxCrossEntropyWithLogits",
                                     SparseSoftmaxXentGrad));
  return absl::OkStatus();
}

}  // namespace cohort
