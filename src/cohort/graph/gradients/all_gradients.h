// Registration of every gradient function cohort ships. Each family
// (array_grad, math_grad, nn_grad, ...) exports
//   absl::Status Register<Family>Gradients(GradientRegistry*);
// and RegisterAllGradients calls them all (add a line in all_gradients.cc).
// See gradients.h for the contract of a gradient function.
#ifndef COHORT_GRAPH_GRADIENTS_ALL_GRADIENTS_H_
#define COHORT_GRAPH_GRADIENTS_ALL_GRADIENTS_H_

#include "absl/status/status.h"
#include "cohort/graph/gradients.h"

namespace cohort {

absl::Status RegisterAllGradients(GradientRegistry* registry);
// Identity (passes the gradient through), Const/Placeholder (none).
absl::Status RegisterArrayGradients(GradientRegistry* registry);

}  // namespace cohort

#endif  // COHORT_GRAPH_GRADIENTS_ALL_GRADIENTS_H_
