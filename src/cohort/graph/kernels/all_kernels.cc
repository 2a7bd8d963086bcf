#include "cohort/graph/kernels/all_kernels.h"

#include "cohort/base/status.h"
#include "cohort/graph/kernels/array_ops.h"
#include "cohort/graph/kernels/elementwise_ops.h"
#include "cohort/graph/kernels/math_ops.h"
#include "cohort/graph/kernels/nn_ops.h"
#include "cohort/graph/kernels/random_ops.h"
#include "cohort/graph/kernels/reduction_ops.h"
#include "cohort/graph/kernels/shape_ops.h"
#include "cohort/graph/kernels/training_ops.h"

namespace cohort {

absl::Status RegisterAllOps(OpRegistry* r) {
  COHORT_RETURN_IF_ERROR(RegisterArrayOps(r));
  COHORT_RETURN_IF_ERROR(RegisterMathOps(r));
  COHORT_RETURN_IF_ERROR(RegisterElementwiseOps(r));
  COHORT_RETURN_IF_ERROR(RegisterShapeOps(r));
  COHORT_RETURN_IF_ERROR(RegisterReductionOps(r));
  COHORT_RETURN_IF_ERROR(RegisterNnOps(r));
  COHORT_RETURN_IF_ERROR(RegisterRandomOps(r));
  COHORT_RETURN_IF_ERROR(RegisterTrainingOps(r));
  return absl::OkStatus();
}

absl::Status RegisterAllKernels(KernelRegistry* r) {
  COHORT_RETURN_IF_ERROR(RegisterArrayKernels(r));
  COHORT_RETURN_IF_ERROR(RegisterMathKernels(r));
  COHORT_RETURN_IF_ERROR(RegisterElementwiseKernels(r));
  COHORT_RETURN_IF_ERROR(RegisterShapeKernels(r));
  COHORT_RETURN_IF_ERROR(RegisterReductionKernels(r));
  COHORT_RETURN_IF_ERROR(RegisterNnKernels(r));
  COHORT_RETURN_IF_ERROR(RegisterRandomKernels(r));
  COHORT_RETURN_IF_ERROR(RegisterTrainingKernels(r));
  return absl::OkStatus();
}

}  // namespace cohort
