// Resource variables and the global step.
//
// Ops (TensorFlow's resource-variable semantics):
//  - VarHandleOp(container: string = '', shared_name: string = '',
//    dtype: type, shape: shape) -> resource. Names the variable
//    (shared_name, default: the node's name) in the device's ResourceMgr and
//    creates it, uninitialised, if absent.
//  - ReadVariableOp(resource; dtype) -> value: a snapshot. Reading an
//    uninitialised variable: FailedPrecondition "variable 'w' ... is
//    uninitialized; run its initializer first".
//  - AssignVariableOp(resource, value; dtype): sets the value; the value's
//    dtype must be the variable's and its shape compatible with the declared
//    shape (InvalidArgument otherwise).
//  - AssignAddVariableOp / AssignSubVariableOp(resource, value; dtype):
//    in place; the variable must be initialised (FailedPrecondition) and the
//    value's shape equal the variable's (InvalidArgument).
//  - VarIsInitializedOp(resource) -> bool.
//  - ReportUninitializedVariables(is_initialized: N * bool; names:
//    list(string), N >= 0) -> 1-D string: names[i] for every input i that is
//    false, in input order (empty = every variable is initialised). It takes
//    bools, not handles, so one op can cover variables on different tasks:
//    each VarIsInitializedOp is colocated with its variable (TF's
//    report_uninitialized_variables). InvalidArgument when names and inputs
//    differ in number.
//
// Kernel helpers (used by the optimiser kernels, e.g. ResourceApply*):
// LookupVariable resolves input `index` (a resource handle) to its Var.
//
// Thread safety: the wrappers build into a Scope (single-threaded);
// kernels lock the Var (see resource_mgr.h).
#ifndef COHORT_GRAPH_KERNELS_STATE_OPS_H_
#define COHORT_GRAPH_KERNELS_STATE_OPS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cohort/graph/builder.h"
#include "cohort/graph/kernel.h"
#include "cohort/graph/op_registry.h"
#include "cohort/graph/resource_mgr.h"

namespace cohort {

absl::Status RegisterStateOps(OpRegistry* registry);
absl::Status RegisterStateKernels(KernelRegistry* registry);

// The Var named by the resource handle in input `index`. NotFound turns
// into FailedPrecondition "variable 'w' (container 'c') is uninitialized".
absl::StatusOr<std::shared_ptr<Var>> LookupVariable(OpKernelContext* ctx,
                                                    int index);
// FailedPrecondition unless initialised; call with var->mu() held.
absl::Status CheckInitialized(const Var& var) ABSL_NO_THREAD_SAFETY_ANALYSIS;

namespace ops {

Output VarHandleOp(const Scope& scope, DataType dtype,
                   const PartialTensorShape& shape,
                   const std::string& container = "",
                   const std::string& shared_name = "");
Output ReadVariableOp(const Scope& scope, Input resource, DataType dtype);
Operation AssignVariableOp(const Scope& scope, Input resource, Input value);
Operation AssignAddVariableOp(const Scope& scope, Input resource, Input value);
Operation AssignSubVariableOp(const Scope& scope, Input resource, Input value);
Output VarIsInitializedOp(const Scope& scope, Input resource);
// `is_initialized[i]` reports the variable called `names[i]`.
Output ReportUninitializedVariables(const Scope& scope,
                                    const std::vector<Output>& is_initialized,
                                    const std::vector<std::string>& names);

// A variable as a user sees it: handle, a read of its value, and its
// initializer (registered with the scope's graph; see
// GlobalVariablesInitializer).
struct Variable {
  Output handle;
  Output value;
  Operation initializer;
  DataType dtype = DT_INVALID;
};
// VarHandleOp named `name` in `scope` (shape: the initial value's), a
// "<name>/Read" ReadVariableOp and a "<name>/Assign" initializer.
Variable MakeVariable(const Scope& scope, const std::string& name,
                      Input initial_value);
// A NoOp "init" that runs every initializer made by MakeVariable so far.
Operation GlobalVariablesInitializer(const Scope& scope);

// The int64 scalar variable "global_step" (created, initialised to 0, on
// first call in this graph and added to the "global_step" collection, as
// TensorFlow's GLOBAL_STEP; later calls return the same variable).
Variable GetOrCreateGlobalStep(const Scope& scope);
// AssignAddVariableOp(global_step, 1).
Operation IncrementGlobalStep(const Scope& scope, const Variable& step);

}  // namespace ops
}  // namespace cohort

#endif  // COHORT_GRAPH_KERNELS_STATE_OPS_H_
