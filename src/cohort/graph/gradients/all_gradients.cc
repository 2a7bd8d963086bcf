#include "cohort/graph/gradients/all_gradients.h"

#include "cohort/base/status.h"

namespace cohort {

absl::Status RegisterAllGradients(GradientRegistry* r) {
  COHORT_RETURN_IF_ERROR(RegisterArrayGradients(r));
  COHORT_RETURN_IF_ERROR(RegisterMathGradients(r));
  COHORT_RETURN_IF_ERROR(RegisterNnGradients(r));
  COHORT_RETURN_IF_ERROR(RegisterShapeGradients(r));
  return absl::OkStatus();
}

}  // namespace cohort
