// Gradients of shape and array-manipulation ops (see gradients.h for the
// contract); ops that only produce shapes, constants or random numbers are
// registered as not differentiable.
#include "cohort/base/status.h"
#include "cohort/graph/gradients/all_gradients.h"
#include "cohort/graph/kernels/reduction_ops.h"
#include "cohort/graph/kernels/shape_ops.h"

namespace cohort {
namespace {

using Grads = std::vector<Output>;

absl::Status ReshapeGrad(const Scope& s, const Operation& op, const Grads& dz,
                         Grads* dx) {
  dx->push_back(ops::Reshape(s, dz[0], ops::Shape(s, op.input(0))));
  dx->push_back(NoGradient());
  return s.status();
}

absl::Status ConcatGrad(const Scope& s, const Operation& op, const Grads& dz,
                        Grads* dx) {
  const int n = op.num_inputs() - 1;
  Output axis = op.input(n);
  std::vector<Output> shapes;
  for (int i = 0; i < n; ++i) shapes.push_back(ops::Shape(s, op.input(i)));
  std::vector<Output> offsets = ops::ConcatOffset(s, axis, shapes);
  COHORT_RETURN_IF_ERROR(s.status());
  for (int i = 0; i < n; ++i) {
    dx->push_back(ops::Slice(s, dz[0], offsets[i], shapes[i]));
  }
  dx->push_back(NoGradient());
  return s.status();
}

absl::Status SliceGradFn(const Scope& s, const Operation& op, const Grads& dz,
                         Grads* dx) {
  dx->push_back(
      ops::SliceGrad(s, ops::Shape(s, op.input(0)), op.input(1), dz[0]));
  dx->push_back(NoGradient());
  dx->push_back(NoGradient());
  return s.status();
}

absl::Status SliceGradGrad(const Scope& s, const Operation& op, const Grads& dz,
                           Grads* dx) {
  dx->push_back(NoGradient());
  dx->push_back(NoGradient());
  dx->push_back(ops::Slice(s, dz[0], op.input(1), ops::Shape(s, op.input(2))));
  return s.status();
}

absl::Status FillGrad(const Scope& s, const Operation& op, const Grads& dz,
                      Grads* dx) {
  dx->push_back(NoGradient());
  dx->push_back(
      ops::Sum(s, ops::Reshape(s, dz[0], Tensor::Vec<int32_t>({-1})), 0));
  return s.status();
}

}  // namespace

absl::Status RegisterShapeGradients(GradientRegistry* r) {
  COHORT_RETURN_IF_ERROR(r->Register("Reshape", ReshapeGrad));
  COHORT_RETURN_IF_ERROR(r->Register("ConcatV2", ConcatGrad));
  COHORT_RETURN_IF_ERROR(r->Register("Slice", SliceGradFn));
  COHORT_RETURN_IF_ERROR(r->Register("SliceGrad", SliceGradGrad));
  COHORT_RETURN_IF_ERROR(r->Register("Fill", FillGrad));
  for (const char* op :
       {"Shape", "Size", "ZerosLike", "OnesLike", "BroadcastGradientArgs",
        "ReducedShape", "ConcatOffset", "RandomUniform", "RandomNormal"}) {
    COHORT_RETURN_IF_ERROR(r->RegisterNoGradient(op));
  }
  return absl::OkStatus();
}

}  // namespace cohort
