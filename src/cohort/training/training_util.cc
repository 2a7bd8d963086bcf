#include "cohort/training/training_util.h"

#include "absl/strings/str_cat.h"
#include "cohort/graph/kernels/state_ops.h"

namespace cohort::training {

absl::StatusOr<std::string> GetOrCreateGlobalStepRead(const Scope& graph) {
  Operation step = graph.FindOp("global_step");
  if (!step.valid() || step.op_type() != "VarHandleOp") {
    return absl::NotFoundError("the graph has no 'global_step' variable");
  }
  Operation read = graph.FindOp("global_step/read");
  if (read.valid()) return read.output(0).name();
  DataType dtype = DT_INT64;
  (void)step.GetAttr("dtype", &dtype);
  // Built at the root, next to the variable, as GetOrCreateGlobalStep does.
  Scope root = Scope::RootOf(graph);
  Output out = ops::ReadVariableOp(root.WithOpName("global_step/read"),
                                   step.output(0), dtype);
  if (!out.valid()) return root.status();
  return out.name();
}

absl::StatusOr<int64_t> ReadGlobalStep(Session* session,
                                       const std::string& read_tensor) {
  std::vector<Tensor> out;
  absl::Status s = session->Run({}, {read_tensor}, {}, &out);
  if (!s.ok()) return s;
  if (out.size() != 1 || out[0].dtype() != DT_INT64 ||
      out[0].NumElements() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("global step '", read_tensor, "' is not an int64 scalar"));
  }
  return out[0].flat<int64_t>()(0);
}

std::vector<VariableInfo> ListVariables(const Scope& graph) {
  std::vector<VariableInfo> vars;
  for (const Operation& op : graph.AllOps()) {
    if (op.op_type() != "VarHandleOp") continue;
    VariableInfo v;
    v.handle = op;
    std::string shared;
    if (op.GetAttr("shared_name", &shared).ok() && !shared.empty()) {
      v.name = shared;
    } else {
      v.name = op.name();
    }
    (void)op.GetAttr("dtype", &v.dtype);
    vars.push_back(std::move(v));
  }
  return vars;
}

absl::Status GlobalStepRequiredError(const std::string& hook) {
  return absl::FailedPreconditionError(
      absl::StrCat("Global step should be created to use ", hook, "."));
}

absl::StatusOr<std::string> GlobalStepReadForHook(const Scope& graph,
                                                  const std::string& hook) {
  auto read = GetOrCreateGlobalStepRead(graph);
  if (absl::IsNotFound(read.status())) return GlobalStepRequiredError(hook);
  return read;
}

}  // namespace cohort::training
