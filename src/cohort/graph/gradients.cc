#include "cohort/graph/gradients.h"

#include <deque>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "cohort/base/status.h"
#include "cohort/graph/standard_registries.h"

namespace cohort {

absl::Status GradientRegistry::Register(const std::string& op, GradFunc fn) {
  absl::MutexLock lock(&mu_);
  if (!fns_.try_emplace(op, std::make_unique<GradFunc>(std::move(fn))).second) {
    return absl::AlreadyExistsError(
        absl::StrCat("a gradient for op '", op, "' is already registered"));
  }
  return absl::OkStatus();
}

absl::Status GradientRegistry::RegisterNoGradient(const std::string& op) {
  absl::MutexLock lock(&mu_);
  if (!fns_.try_emplace(op, nullptr).second) {
    return absl::AlreadyExistsError(
        absl::StrCat("a gradient for op '", op, "' is already registered"));
  }
  return absl::OkStatus();
}

absl::StatusOr<const GradFunc*> GradientRegistry::Lookup(
    const std::string& op) const {
  absl::ReaderMutexLock lock(&mu_);
  auto it = fns_.find(op);
  if (it == fns_.end()) {
    return absl::NotFoundError(
        absl::StrCat("no gradient registered for op '", op, "'"));
  }
  return it->second.get();
}

namespace {

// Sums gradients: one stays as is; more go through AddN when registered,
// else a chain of Add.
Output SumGradients(const Scope& scope, const std::vector<Output>& grads) {
  if (grads.size() == 1) return grads[0];
  if (scope.op_registry()->LookUp("AddN") != nullptr) {
    return BuildOp(scope, "AddN", {grads}).output(0);
  }
  Output sum = grads[0];
  for (size_t i = 1; i < grads.size(); ++i) {
    sum = BuildOp(scope, "Add", {sum, grads[i]}).output(0);
  }
  return sum;
}

Output ZerosLike(const Scope& scope, const Output& x) {
  return BuildOp(scope, "ZerosLike", {x}).output(0);
}

}  // namespace

absl::Status AddSymbolicGradients(const Scope& scope,
                                  const std::vector<Output>& ys,
                                  const std::vector<Output>& xs,
                                  const std::vector<Output>& grad_ys,
                                  std::vector<Output>* grad_xs,
                                  const GradientRegistry* registry) {
  if (registry == nullptr) registry = StandardGradientRegistry();
  COHORT_RETURN_IF_ERROR(scope.status());
  if (ys.size() != grad_ys.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("AddSymbolicGradients: ", ys.size(), " ys but ",
                     grad_ys.size(), " grad_ys"));
  }
  for (size_t i = 0; i < ys.size(); ++i) {
    if (!ys[i].valid() || !grad_ys[i].valid()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "AddSymbolicGradients: y or grad_y #", i, " is invalid"));
    }
    if (ys[i].dtype() != grad_ys[i].dtype()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "AddSymbolicGradients: y '", ys[i].name(), "' is ",
          DataTypeName(ys[i].dtype()), " but its grad_y '", grad_ys[i].name(),
          "' is ", DataTypeName(grad_ys[i].dtype())));
    }
  }
  for (size_t i = 0; i < xs.size(); ++i) {
    if (!xs[i].valid()) {
      return absl::InvalidArgumentError(
          absl::StrCat("AddSymbolicGradients: x #", i, " is invalid"));
    }
  }

  // Nodes reachable backwards from ys.
  absl::flat_hash_set<BuiltNode*> from_ys;
  {
    std::deque<BuiltNode*> q;
    for (const auto& y : ys) {
      if (from_ys.insert(y.node()).second) q.push_back(y.node());
    }
    while (!q.empty()) {
      BuiltNode* n = q.front();
      q.pop_front();
      for (const Output& in : n->inputs) {
        if (from_ys.insert(in.node()).second) q.push_back(in.node());
      }
    }
  }
  // Nodes reachable forwards from xs, restricted to from_ys: the nodes
  // gradients flow through.
  absl::flat_hash_map<BuiltNode*, std::vector<BuiltNode*>> consumers;
  for (const Operation& op : scope.AllOps()) {
    if (!from_ys.contains(op.node())) continue;
    for (const Output& in : op.node()->inputs) {
      consumers[in.node()].push_back(op.node());
    }
  }
  absl::flat_hash_set<BuiltNode*> on_path;
  {
    std::deque<BuiltNode*> q;
    for (const auto& x : xs) {
      if (from_ys.contains(x.node()) && on_path.insert(x.node()).second) {
        q.push_back(x.node());
      }
    }
    while (!q.empty()) {
      BuiltNode* n = q.front();
      q.pop_front();
      for (BuiltNode* c : consumers[n]) {
        if (on_path.insert(c).second) q.push_back(c);
      }
    }
  }
  // pending[n]: consumer edges of n on the path not yet back-propagated.
  absl::flat_hash_map<BuiltNode*, int> pending;
  for (BuiltNode* n : on_path) {
    for (const Output& in : n->inputs) {
      if (on_path.contains(in.node())) ++pending[in.node()];
    }
  }
  absl::flat_hash_map<Output, std::vector<Output>> grads;
  for (size_t i = 0; i < ys.size(); ++i) grads[ys[i]].push_back(grad_ys[i]);

  Scope gscope = scope.NewSubScope("gradients");
  std::deque<BuiltNode*> ready;
  for (BuiltNode* n : on_path) {
    if (pending[n] == 0) ready.push_back(n);
  }
  absl::flat_hash_set<BuiltNode*> x_nodes;
  for (const auto& x : xs) x_nodes.insert(x.node());

  while (!ready.empty()) {
    BuiltNode* n = ready.front();
    ready.pop_front();
    Operation op(n);
    // Does any input need a gradient?
    bool needs = false;
    for (const Output& in : n->inputs) needs |= on_path.contains(in.node());
    if (!needs) continue;  // An x (or a source) whose inputs are off-path.

    auto fn_or = registry->Lookup(n->def.op());
    if (!fn_or.ok()) {
      return absl::NotFoundError(
          absl::StrCat("no gradient registered for op '", n->def.op(),
                       "' (node '", n->def.name(),
                       "'), which lies between the xs and ys; register one "
                       "or stop the gradient"));
    }
    const GradFunc* fn = *fn_or;
    if (fn == nullptr) {
      // Not differentiable: inputs get nothing from this node.
      for (const Output& in : n->inputs) {
        if (on_path.contains(in.node()) && --pending[in.node()] == 0) {
          ready.push_back(in.node());
        }
      }
      continue;
    }
    Scope op_scope = gscope.NewSubScope(absl::StrCat(n->def.name(), "_grad"))
                         .WithDevice(n->def.device());
    std::vector<Output> grad_outputs;
    for (int i = 0; i < op.num_outputs(); ++i) {
      auto it = grads.find(op.output(i));
      if (it == grads.end() || it->second.empty()) {
        grad_outputs.push_back(ZerosLike(op_scope, op.output(i)));
      } else {
        grad_outputs.push_back(SumGradients(op_scope, it->second));
      }
    }
    COHORT_RETURN_IF_ERROR(scope.status());
    std::vector<Output> grad_inputs;
    absl::Status s = (*fn)(op_scope, op, grad_outputs, &grad_inputs);
    if (s.ok()) s = scope.status();
    if (!s.ok()) {
      return Annotate(
          s, absl::StrCat("building the gradient of node '", n->def.name(),
                          "' (op ", n->def.op(), ")"));
    }
    if (static_cast<int>(grad_inputs.size()) != op.num_inputs()) {
      return absl::InternalError(absl::StrCat(
          "gradient function of op '", n->def.op(), "' returned ",
          grad_inputs.size(), " gradients for node '", n->def.name(),
          "' which has ", op.num_inputs(), " inputs"));
    }
    for (int i = 0; i < op.num_inputs(); ++i) {
      const Output& in = n->inputs[i];
      if (!on_path.contains(in.node())) continue;
      if (grad_inputs[i].valid()) grads[in].push_back(grad_inputs[i]);
      if (--pending[in.node()] == 0) ready.push_back(in.node());
    }
  }

  grad_xs->clear();
  for (const Output& x : xs) {
    auto it = grads.find(x);
    if (it == grads.end() || it->second.empty()) {
      grad_xs->push_back(ZerosLike(gscope, x));
    } else {
      grad_xs->push_back(SumGradients(gscope, it->second));
    }
  }
  return scope.status();
}

absl::Status AddSymbolicGradients(const Scope& scope,
                                  const std::vector<Output>& ys,
                                  const std::vector<Output>& xs,
                                  std::vector<Output>* grad_xs,
                                  const GradientRegistry* registry) {
  std::vector<Output> grad_ys;
  Scope s = scope.NewSubScope("gradients_init");
  for (const auto& y : ys) {
    if (!y.valid()) {
      return absl::InvalidArgumentError("AddSymbolicGradients: a y is invalid");
    }
    grad_ys.push_back(BuildOp(s, "OnesLike", {y}).output(0));
  }
  COHORT_RETURN_IF_ERROR(scope.status());
  return AddSymbolicGradients(scope, ys, xs, grad_ys, grad_xs, registry);
}

}  // namespace cohort
