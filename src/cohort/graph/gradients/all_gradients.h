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
// Add, Sub, Mul, Div, Pow, Maximum, Minimum, Neg, Square, Sqrt, Exp, Log,
// AddN, Cast, Select, MatMul, Sum, Mean, Max (comparisons: none).
absl::Status RegisterMathGradients(GradientRegistry* registry);
// Relu, Sigmoid, Tanh, Softmax and the softmax cross-entropy losses.
absl::Status RegisterNnGradients(GradientRegistry* registry);
// Reshape, Concat, Slice, Fill (shape-only and random ops: none).
absl::Status RegisterShapeGradients(GradientRegistry* registry);

}  // namespace cohort

#endif  // COHORT_GRAPH_GRADIENTS_ALL_GRADIENTS_H_
