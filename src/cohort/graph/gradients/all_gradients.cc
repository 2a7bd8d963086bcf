#include "cohort/graph/gradients/all_gradients.h"

#include "cohort/base/status.h"

namespace cohort {

absl::Status RegisterAllGradients(GradientRegistry* r) {
  COHORT_RETURN_IF_ERROR(RegisterArrayGradients(r));
  return absl::OkStatus();
}

}  // namespace cohort
