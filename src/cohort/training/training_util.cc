#include "cohort/training/training_util.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cohort/base/logging.h"
#include "cohort/base/status.h"
#include "cohort/graph/kernels/state_ops.h"

namespace cohort::training {

absl::StatusOr<Operation> GetGlobalStep(const Scope& graph) {
  Operation step;
  const std::vector<Operation> collected =
      graph.GetCollection(kGlobalStepCollection);
  if (collected.size() > 1) {
    // TensorFlow logs this and answers "no global step"; the hooks then
    // fail with "Global step should be created ...".
    std::vector<std::string> names;
    for (const Operation& op : collected) names.push_back(op.name());
    COHORT_LOG(ERROR) << "Multiple tensors in global_step collection: "
                      << absl::StrJoin(names, ", ");
    return absl::NotFoundError(absl::StrCat(
        "the global_step collection holds ", collected.size(), " ops (",
        absl::StrJoin(names, ", "), "); there must be one"));
  }
  if (collected.size() == 1) {
    step = collected[0];
  } else {
    step = graph.FindOp("global_step");
    if (!step.valid()) {
      return absl::NotFoundError(
          "the graph has no global step: the global_step collection is "
          "empty and no op is named 'global_step'");
    }
  }
  DataType dtype = DT_INVALID;
  PartialTensorShape shape;
  if (step.op_type() == "VarHandleOp") {
    COHORT_RETURN_IF_ERROR(step.GetAttr("dtype", &dtype));
    COHORT_RETURN_IF_ERROR(step.GetAttr("shape", &shape));
  } else if (step.num_outputs() > 0) {
    dtype = step.output_type(0);
    shape = step.output(0).shape();
  }
  // assert_global_step: base dtype is_integer. int32 and int64 are the
  // integer types cohort has.
  if (dtype != DT_INT32 && dtype != DT_INT64) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Existing \"global_step\" (op '", step.name(), "', ", step.op_type(),
        ") does not have integer type: ", DataTypeName(dtype),
        "; it must be an int32 or int64 scalar"));
  }
  // Only a fully known non-scalar shape is refused, as in TensorFlow: a
  // step of unknown shape passes.
  if (shape.IsFullyDefined() && shape.dims() != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("Existing \"global_step\" (op '", step.name(),
                     "') is not scalar: ", shape.DebugString()));
  }
  return step;
}

absl::StatusOr<std::string> GetOrCreateGlobalStepRead(const Scope& graph) {
  COHORT_ASSIGN_OR_RETURN(Operation step, GetGlobalStep(graph));
  if (step.op_type() != "VarHandleOp") return step.output(0).name();
  const std::string read_name = absl::StrCat(step.name(), "/read");
  Operation read = graph.FindOp(read_name);
  if (read.valid()) return read.output(0).name();
  DataType dtype = DT_INT64;
  COHORT_RETURN_IF_ERROR(step.GetAttr("dtype", &dtype));
  // Built at the root, next to the variable, as GetOrCreateGlobalStep does.
  Scope root = Scope::RootOf(graph);
  Output out =
      ops::ReadVariableOp(root.WithOpName(read_name), step.output(0), dtype);
  if (!out.valid()) return root.status();
  return out.name();
}

absl::StatusOr<std::string> GetOrCreateGlobalStepIsInitialized(
    const Scope& graph) {
  COHORT_ASSIGN_OR_RETURN(Operation step, GetGlobalStep(graph));
  if (step.op_type() != "VarHandleOp") return std::string();
  const std::string name = absl::StrCat(step.name(), "/IsInitialized");
  Operation op = graph.FindOp(name);
  if (op.valid()) return op.output(0).name();
  Scope root = Scope::RootOf(graph);
  Output out = ops::VarIsInitializedOp(root.WithOpName(name), step.output(0));
  if (!out.valid()) return root.status();
  return out.name();
}

absl::StatusOr<int64_t> GlobalStepValue(const Tensor& t,
                                        const std::string& tensor_name) {
  if (t.NumElements() == 1 && t.dtype() == DT_INT64) {
    return t.flat<int64_t>()(0);
  }
  if (t.NumElements() == 1 && t.dtype() == DT_INT32) {
    return int64_t{t.flat<int32_t>()(0)};
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "global step '", tensor_name, "' is a ", DataTypeName(t.dtype()), " ",
      t.shape().DebugString(), ", not an int32 or int64 scalar"));
}

absl::StatusOr<double> ScalarValue(const Tensor& t,
                                   const std::string& tensor_name) {
  if (t.NumElements() == 1) {
    switch (t.dtype()) {
      case DT_FLOAT:
        return t.flat<float>()(0);
      case DT_DOUBLE:
        return t.flat<double>()(0);
      case DT_INT32:
        return t.flat<int32_t>()(0);
      case DT_INT64:
        return static_cast<double>(t.flat<int64_t>()(0));
      default:
        break;
    }
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "tensor '", tensor_name, "' is a ", DataTypeName(t.dtype()), " ",
      t.shape().DebugString(), ", not a float, double, int32 or int64 scalar"));
}

absl::StatusOr<int64_t> ReadGlobalStep(
    Session* session, const std::string& read_tensor,
    const std::string& is_initialized_tensor) {
  std::vector<Tensor> out;
  absl::Status s = session->Run({}, {read_tensor}, {}, &out);
  // Reading a variable before its initializer ran fails with
  // FailedPrecondition. The code alone does not say the variable is the
  // cause (a step can fail that way for other reasons), so ask it.
  if (absl::IsFailedPrecondition(s) && !is_initialized_tensor.empty()) {
    std::vector<Tensor> init;
    absl::Status is = session->Run({}, {is_initialized_tensor}, {}, &init);
    if (is.ok() && init.size() == 1 && init[0].dtype() == DT_BOOL &&
        init[0].NumElements() == 1 && !init[0].flat<bool>()(0)) {
      return 0;
    }
    // Initialized in between (by the chief): the read now succeeds.
    if (is.ok()) s = session->Run({}, {read_tensor}, {}, &out);
  }
  if (!s.ok()) return s;
  if (out.size() != 1) {
    return absl::InternalError(absl::StrCat("reading global step '",
                                            read_tensor, "' gave ", out.size(),
                                            " tensors"));
  }
  return GlobalStepValue(out[0], read_tensor);
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
