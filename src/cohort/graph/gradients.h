// Symbolic gradients: a registry of per-op gradient functions and
// AddSymbolicGradients, which walks the graph backwards from ys to xs and
// builds the gradient nodes with the builder (builder.h).
//
// Contract for a gradient function (kernels engineer, gradients/*.cc):
//   absl::Status MulGrad(const Scope& scope, const Operation& op,
//                        const std::vector<Output>& grad_outputs,
//                        std::vector<Output>* grad_inputs);
//  - `op` is the forward node (read its inputs with op.input(i), outputs
//    with op.output(i), attrs with op.GetAttr). grad_outputs[i] is dL/d
//    output i (never invalid: outputs that do not lead to ys get ZerosLike).
//  - Push exactly op.num_inputs() entries to grad_inputs: dL/d input i, or
//    NoGradient() for an input that has none (e.g. an integer shape).
//  - Build nodes in `scope` (a "gradients/<op>_grad" sub-scope placed on the
//    forward op's device); errors in building are reported through the
//    scope's status and should also be returned.
//  - For broadcasting binary ops reduce the gradient back to each input's
//    shape (Sum over broadcast axes, then Reshape).
//
// AddSymbolicGradients errors: InvalidArgument for invalid ys/xs or a
// grad_ys of another count/dtype; NotFound "no gradient registered for op
// 'Foo' (node 'bar'); register one or stop the gradient" when a node on a
// path from xs to ys has no gradient function (ops registered with
// RegisterNoGradient stop the gradient silently).
//
// Thread safety: GradientRegistry is thread-safe. AddSymbolicGradients
// builds into a graph and shares its (single-threaded) contract.
#ifndef COHORT_GRAPH_GRADIENTS_H_
#define COHORT_GRAPH_GRADIENTS_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "cohort/graph/builder.h"

namespace cohort {

using GradFunc = std::function<absl::Status(
    const Scope& scope, const Operation& op,
    const std::vector<Output>& grad_outputs, std::vector<Output>* grad_inputs)>;

// The "no gradient flows into this input" marker (an invalid Output).
inline Output NoGradient() { return Output(); }

class GradientRegistry {
 public:
  GradientRegistry() = default;
  GradientRegistry(const GradientRegistry&) = delete;
  GradientRegistry& operator=(const GradientRegistry&) = delete;

  // AlreadyExists when `op` has one. Non-blocking.
  absl::Status Register(const std::string& op, GradFunc fn);
  // Marks `op` as not differentiable (gradients stop there).
  absl::Status RegisterNoGradient(const std::string& op);
  // The function for `op`; nullptr with OK status for a no-gradient op;
  // NotFound when nothing is registered.
  absl::StatusOr<const GradFunc*> Lookup(const std::string& op) const;

 private:
  mutable absl::Mutex mu_;
  // A null function marks a no-gradient op.
  absl::flat_hash_map<std::string, std::unique_ptr<GradFunc>> fns_
      ABSL_GUARDED_BY(mu_);
};

// Adds nodes computing d(sum of ys . grad_ys)/d xs; grad_xs gets one Output
// per x (ZerosLike(x) when x does not influence ys). `registry` null means
// StandardGradientRegistry(). See the file comment for errors.
absl::Status AddSymbolicGradients(const Scope& scope,
                                  const std::vector<Output>& ys,
                                  const std::vector<Output>& xs,
                                  const std::vector<Output>& grad_ys,
                                  std::vector<Output>* grad_xs,
                                  const GradientRegistry* registry = nullptr);
// Same with grad_ys = OnesLike(y) for every y.
absl::Status AddSymbolicGradients(const Scope& scope,
                                  const std::vector<Output>& ys,
                                  const std::vector<Output>& xs,
                                  std::vector<Output>* grad_xs,
                                  const GradientRegistry* registry = nullptr);

}  // namespace cohort

#endif  // COHORT_GRAPH_GRADIENTS_H_
