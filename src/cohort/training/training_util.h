// Helpers shared by the training stack: the global step and the variables
// of a graph under construction (TensorFlow's training_util and
// variables.global_variables()).
//
// Thread safety: functions over a Scope build into it (single-threaded, as
// builder.h); ReadGlobalStep is as thread-safe as the session.
#ifndef COHORT_TRAINING_TRAINING_UTIL_H_
#define COHORT_TRAINING_TRAINING_UTIL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cohort/graph/builder.h"
#include "cohort/graph/session.h"

namespace cohort::training {

// The tensor that reads the global step ("global_step/read:0", as
// ops::GetOrCreateGlobalStep makes it), creating the read when a
// "global_step" variable exists without one (TF's
// _get_or_create_global_step_read). NotFound when the graph has no global
// step; hooks turn it into their FailedPrecondition.
absl::StatusOr<std::string> GetOrCreateGlobalStepRead(const Scope& graph);

// Runs `read_tensor` (an int64 scalar) through `session`. Errors are the
// session's; InvalidArgument when the value is not an int64 scalar.
absl::StatusOr<int64_t> ReadGlobalStep(Session* session,
                                       const std::string& read_tensor);

// A resource variable of the graph (a VarHandleOp node).
struct VariableInfo {
  std::string name;  // As in the ResourceMgr and checkpoints: shared_name,
                     // or the node's name.
  Operation handle;  // The VarHandleOp.
  DataType dtype = DT_INVALID;
};
// Every VarHandleOp of the graph, in creation order.
std::vector<VariableInfo> ListVariables(const Scope& graph);

// The "FailedPrecondition: Global step should be created to use <hook>."
// error of the hooks that need a global step.
absl::Status GlobalStepRequiredError(const std::string& hook);

// For a hook's Begin: the global step read tensor of `graph` (created when
// the variable exists), or GlobalStepRequiredError(hook).
absl::StatusOr<std::string> GlobalStepReadForHook(const Scope& graph,
                                                  const std::string& hook);

}  // namespace cohort::training

#endif  // COHORT_TRAINING_TRAINING_UTIL_H_
