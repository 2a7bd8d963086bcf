#include "cohort/graph/gradients/grad_check.h"

#include <algorithm>
#include <cmath>
#include <memory>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "cohort/base/status.h"
#include "cohort/graph/gradients.h"
#include "cohort/graph/kernel_test_util.h"
#include "cohort/graph/kernels/elementwise_ops.h"
#include "cohort/graph/kernels/reduction_ops.h"
#include "cohort/graph/kernels/shape_ops.h"
#include "cohort/graph/standard_registries.h"

namespace cohort {

absl::StatusOr<std::vector<Tensor>> EvalGraph(
    const Scope& scope, const std::vector<std::pair<Output, Tensor>>& feeds,
    const std::vector<Output>& fetches) {
  COHORT_RETURN_IF_ERROR(scope.status());
  absl::flat_hash_map<BuiltNode*, Tensor> fed;
  for (const auto& f : feeds) fed[f.first.node()] = f.second;
  // Nodes the fetches need.
  absl::flat_hash_set<BuiltNode*> needed;
  std::vector<BuiltNode*> stack;
  for (const Output& o : fetches) stack.push_back(o.node());
  while (!stack.empty()) {
    BuiltNode* n = stack.back();
    stack.pop_back();
    if (!needed.insert(n).second || fed.contains(n)) continue;
    for (const Output& in : n->inputs) stack.push_back(in.node());
    for (const Operation& c : n->control_inputs) stack.push_back(c.node());
  }
  absl::flat_hash_map<BuiltNode*, std::vector<Tensor>> values;
  for (const Operation& op : scope.AllOps()) {
    BuiltNode* n = op.node();
    if (!needed.contains(n)) continue;
    if (fed.contains(n)) {
      values[n] = {fed[n]};
      continue;
    }
    std::vector<Tensor> inputs;
    for (const Output& in : n->inputs)
      inputs.push_back(values[in.node()][in.index()]);
    COHORT_ASSIGN_OR_RETURN(std::unique_ptr<OpKernel> kernel,
                            StandardKernelRegistry()->CreateKernel(
                                n->def, *n->op_def, TestDevice()));
    OpKernelContext::Params params;
    params.op_kernel = kernel.get();
    params.device = TestDevice();
    params.inputs = inputs.data();
    params.num_inputs = static_cast<int>(inputs.size());
    OpKernelContext ctx(&params);
    kernel->Compute(&ctx);
    if (!ctx.status().ok()) return AttachNodeName(ctx.status(), n->def);
    std::vector<Tensor>& outs = values[n];
    for (int i = 0; i < ctx.num_outputs(); ++i)
      outs.push_back((*ctx.outputs())[i]);
  }
  std::vector<Tensor> result;
  for (const Output& o : fetches) result.push_back(values[o.node()][o.index()]);
  return result;
}

namespace {

// Element i of a floating tensor as double, and setting it.
double Get(const Tensor& t, int64_t i) {
  return t.dtype() == DT_FLOAT ? t.data<float>()[i] : t.data<double>()[i];
}
void Set(Tensor* t, int64_t i, double v) {
  if (t->dtype() == DT_FLOAT) {
    t->data<float>()[i] = static_cast<float>(v);
  } else {
    t->data<double>()[i] = v;
  }
}

}  // namespace

absl::StatusOr<double> MaxGradientError(const Scope& scope,
                                        const std::vector<Output>& xs,
                                        const std::vector<Tensor>& x_values,
                                        const Output& y) {
  COHORT_RETURN_IF_ERROR(scope.status());
  std::vector<std::pair<Output, Tensor>> feeds;
  for (size_t i = 0; i < xs.size(); ++i) feeds.emplace_back(xs[i], x_values[i]);
  COHORT_ASSIGN_OR_RETURN(std::vector<Tensor> y_val,
                          EvalGraph(scope, feeds, {y}));
  if (!DataTypeIsFloating(y.dtype())) {
    return absl::InvalidArgumentError("MaxGradientError: y must be floating");
  }
  // Fixed weights in [0.5, 1.5).
  Tensor w(y.dtype(), y_val[0].shape());
  uint64_t state = 12345;
  for (int64_t i = 0; i < w.NumElements(); ++i) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    Set(&w, i, 0.5 + static_cast<double>(state >> 11) / 9007199254740992.0);
  }
  Scope s = scope.NewSubScope("grad_check");
  Output loss = ops::Sum(
      s, ops::Reshape(s, ops::Mul(s, y, w), Tensor::Vec<int32_t>({-1})), 0);
  std::vector<Output> grads;
  COHORT_RETURN_IF_ERROR(AddSymbolicGradients(s, {loss}, xs, &grads));
  COHORT_ASSIGN_OR_RETURN(std::vector<Tensor> symbolic,
                          EvalGraph(scope, feeds, grads));
  double max_err = 0;
  for (size_t k = 0; k < xs.size(); ++k) {
    if (symbolic[k].shape() != x_values[k].shape()) {
      return absl::InternalError(
          absl::StrCat("gradient of x #", k, " has shape ",
                       symbolic[k].shape().DebugString(), " but x has shape ",
                       x_values[k].shape().DebugString()));
    }
    for (int64_t i = 0; i < x_values[k].NumElements(); ++i) {
      Tensor plus = x_values[k].DeepCopy(), minus = x_values[k].DeepCopy();
      const double v = Get(x_values[k], i);
      const double h = 1e-6 * std::max(1.0, std::abs(v));
      Set(&plus, i, v + h);
      Set(&minus, i, v - h);
      auto run = [&](const Tensor& xv) -> absl::StatusOr<double> {
        auto f = feeds;
        f[k].second = xv;
        COHORT_ASSIGN_OR_RETURN(std::vector<Tensor> l,
                                EvalGraph(scope, f, {loss}));
        return Get(l[0], 0);
      };
      COHORT_ASSIGN_OR_RETURN(double lp, run(plus));
      COHORT_ASSIGN_OR_RETURN(double lm, run(minus));
      const double numeric = (lp - lm) / (2 * h);
      max_err = std::max(max_err, std::abs(numeric - Get(symbolic[k], i)));
    }
  }
  return max_err;
}

}  // namespace cohort
