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

// TensorFlow's GraphKeys.GLOBAL_STEP: the collection (Scope::GetCollection)
// holding the global step; ops::GetOrCreateGlobalStep adds to it.
inline constexpr char kGlobalStepCollection[] = "global_step";

// The global step of `graph`, found as TensorFlow's get_global_step finds
// it: the one op of the GLOBAL_STEP collection; with that collection
// empty, the op whose output 0 is "global_step:0" (a plain variable named
// "global_step" no one added to the collection, as older TensorFlow code
// made it). Either a variable (VarHandleOp) or any op producing the step.
// Checked as TensorFlow's assert_global_step does: an integer (int32 or
// int64; cohort has no other integer type) scalar, where an unknown shape
// passes. Errors:
//  - NotFound: no global step, or several ops in the collection (TensorFlow
//    logs an error and finds none; so does this);
//  - InvalidArgument: not an integer, or a fully known shape that is not a
//    scalar (TensorFlow's TypeError), naming the op.
absl::StatusOr<Operation> GetGlobalStep(const Scope& graph);

// The tensor that reads the global step ("global_step/read:0", as
// ops::GetOrCreateGlobalStep makes it), creating the read
// "<variable>/read" at the root when the variable exists without one (TF's
// _get_or_create_global_step_read); a global step that is not a variable is
// read as it is. Errors of GetGlobalStep; hooks turn its NotFound into
// their FailedPrecondition.
absl::StatusOr<std::string> GetOrCreateGlobalStepRead(const Scope& graph);

// The bool tensor that says whether the global step variable is
// initialized ("<variable>/IsInitialized:0", a VarIsInitializedOp created
// at the root on first use), or "" when the global step is not a variable
// (it is always readable). Errors of GetGlobalStep.
absl::StatusOr<std::string> GetOrCreateGlobalStepIsInitialized(
    const Scope& graph);

// Runs `read_tensor` (an int32 or int64 scalar) through `session`.
// With `is_initialized_tensor` (from GetOrCreateGlobalStepIsInitialized),
// a read that fails with FailedPrecondition on a variable that is not yet
// initialized returns 0, the value TensorFlow's global step read gives
// before initialization (its read falls back to the initial value, zero
// for every global step TensorFlow or cohort creates). Otherwise errors
// are the session's; InvalidArgument when the value is not an integer
// scalar.
absl::StatusOr<int64_t> ReadGlobalStep(
    Session* session, const std::string& read_tensor,
    const std::string& is_initialized_tensor = "");

// The value of a fetched global step tensor `t` (int32 or int64 scalar);
// InvalidArgument naming `tensor_name` otherwise.
absl::StatusOr<int64_t> GlobalStepValue(const Tensor& t,
                                        const std::string& tensor_name);

// The value of a fetched numeric scalar `t` (float, double, int32 or int64;
// one element) as a double, for summaries and metrics; InvalidArgument
// naming `tensor_name` otherwise.
absl::StatusOr<double> ScalarValue(const Tensor& t,
                                   const std::string& tensor_name);

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
