// Test helpers for gradients: evaluate a graph under construction without a
// session, and compare symbolic gradients with central finite differences.
//
//   Scope root = Scope::NewRootScope();
//   auto x = ops::Placeholder(root.WithOpName("x"), DT_DOUBLE);
//   auto y = ops::Square(root, x);
//   auto err = MaxGradientError(root, {x}, {Tensor::Vec<double>({1, 2})}, y);
//   ASSERT_TRUE(err.ok()) << err.status();
//   EXPECT_LT(*err, 1e-6);
//
// EvalGraph runs the nodes the fetches need, in creation order (which is a
// topological order), each through the standard kernel registry on
// TestDevice(); placeholders take their value from `feeds`. Errors are the
// kernels' (named by node) or InvalidArgument for an unfed placeholder.
//
// MaxGradientError builds L = sum(y * w) for fixed pseudo-random weights w
// (so every output element matters differently), adds the symbolic gradient
// of L with respect to each x (which must be placeholders, preferably
// float64) and returns the largest absolute difference from the central
// difference (L(x + h) - L(x - h)) / 2h, h = 1e-6 scaled by |x|.
//
// Thread safety: like the builder (one thread per graph).
#ifndef COHORT_GRAPH_GRADIENTS_GRAD_CHECK_H_
#define COHORT_GRAPH_GRADIENTS_GRAD_CHECK_H_

#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "cohort/graph/builder.h"
#include "cohort/graph/tensor.h"

namespace cohort {

absl::StatusOr<std::vector<Tensor>> EvalGraph(
    const Scope& scope, const std::vector<std::pair<Output, Tensor>>& feeds,
    const std::vector<Output>& fetches);

absl::StatusOr<double> MaxGradientError(const Scope& scope,
                                        const std::vector<Output>& xs,
                                        const std::vector<Tensor>& x_values,
                                        const Output& y);

}  // namespace cohort

#endif  // COHORT_GRAPH_GRADIENTS_GRAD_CHECK_H_
