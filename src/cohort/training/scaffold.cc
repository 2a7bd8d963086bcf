#include "cohort/training/scaffold.h"

#include <vector>

#include "cohort/base/status.h"
#include "cohort/graph/kernels/array_ops.h"
#include "cohort/graph/kernels/state_ops.h"
#include "cohort/training/training_util.h"

namespace cohort::training {

absl::Status Scaffold::Finalize(const Scope& graph) {
  if (finalized_) return absl::OkStatus();
  Scope root = Scope::RootOf(graph);
  if (init_op.empty()) {
    // A fresh NoOp, so initializers made after a user's own "init" (the
    // global step of a hook) are covered too.
    Operation init = ops::NoOp(root.WithControlDependencies(root.Initializers())
                                   .WithOpName("scaffold/init"));
    if (!root.ok()) return root.status();
    init_op = init.name();
  }
  if (ready_op.empty()) {
    Scope s = root.NewSubScope("report_uninitialized_variables");
    std::vector<Output> flags;
    std::vector<std::string> names;
    for (const VariableInfo& v : ListVariables(root)) {
      // One op per variable: the placer puts each with its variable.
      flags.push_back(ops::VarIsInitializedOp(
          s.WithOpName(v.handle.name() + "/is_initialized"),
          v.handle.output(0)));
      names.push_back(v.name);
    }
    Output report =
        ops::ReportUninitializedVariables(s.WithOpName("report"), flags, names);
    if (!root.ok()) return root.status();
    ready_op = report.name();
  }
  if (saver == nullptr) {
    COHORT_ASSIGN_OR_RETURN(saver, Saver::Build(root, saver_options));
  }
  finalized_ = true;
  return absl::OkStatus();
}

}  // namespace cohort::training
