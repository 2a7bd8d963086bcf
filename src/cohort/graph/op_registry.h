// Op definitions: what an op is called, its inputs, outputs and attributes,
// and how to infer its output shapes. The registry is explicit: an
// OpRegistry is filled by calling registration functions such as
// RegisterArrayOps(OpRegistry*) (see kernels/all_kernels.h); nothing
// registers itself from a static initialiser.
//
// Ops are declared with TensorFlow-style spec strings:
//
//   COHORT_RETURN_IF_ERROR(registry->Register(
//       OpDefBuilder("Add")
//           .Input("x: T")
//           .Input("y: T")
//           .Output("z: T")
//           .Attr("T: {float, double, int32, int64}")
//           .SetShapeFn(shape_fns::BroadcastBinaryOp)));
//
// Input/output specs: "name: float" (a fixed type), "name: T" (the type in
// type attribute T), "name: N * T" (a list of N tensors of type T; N is an
// "int" attr, added automatically with minimum 1), "name: resource".
// Attr specs: "name: type" with an optional allowed set
// "T: {float, int32}", an optional default "transpose_a: bool = false",
// "axis: int = 0", "dtype: type = float", "padding: string = 'SAME'",
// "shape: shape", "perm: list(int)", "a: int >= 1".
//
// Each op declares TensorFlow's full attr set for that op, with TensorFlow's
// types and defaults, so a GraphDef TensorFlow wrote (which carries every
// attr, defaults included: Sum's "Tidx", Fill's "index_type", ...) loads.
// An attr TensorFlow has but cohort does not implement is declared with
// RequireDefault(attr, why): its default (what TensorFlow writes unless
// asked otherwise) is accepted, any other value is refused as Unimplemented
// naming the node, op, attr and `why`, never silently ignored.
//
// Contract for a node (NodeDef) of a registered op, checked by
// ValidateNodeDef: every attr of the OpDef is present (after
// AddDefaultAttrs) with the declared type and in its allowed set, no unknown
// attrs, RequireDefault attrs at their default, and the number of data
// inputs matches. Attrs whose name starts with
// "_" (TensorFlow's internal attrs such as "_class" and "_output_shapes")
// are accepted without any check and kept on the node. Every error names the
// node and its op: "node 'dense/MatMul' (op MatMul): attr 'T' is string,
// allowed [float, double]".
//
// Shape functions receive an InferenceContext with the inputs' partial
// shapes, types and (when the input is a Const) values, and set every
// output's partial shape. An op without a shape function gets unknown shapes.
//
// Thread safety: OpRegistry is thread-safe (registration and look-ups may
// run concurrently); OpDef objects returned by LookUp are immutable and live
// as long as the registry. InferenceContext is single-threaded.
#ifndef COHORT_GRAPH_OP_REGISTRY_H_
#define COHORT_GRAPH_OP_REGISTRY_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "cohort/graph.pb.h"
#include "cohort/graph/attr_value.h"
#include "cohort/graph/tensor.h"
#include "cohort/graph/tensor_shape.h"
#include "cohort/graph/types.h"

namespace cohort {

class InferenceContext;
using ShapeFn = std::function<absl::Status(InferenceContext*)>;

struct OpDef {
  struct ArgDef {
    std::string name;
    DataType type = DT_INVALID;  // Fixed type, or DT_INVALID if type_attr.
    std::string type_attr;       // Name of a "type" attr giving the type.
    std::string number_attr;     // Name of an "int" attr: a list of N.
    // Human-readable "x: T" for messages.
    std::string spec;
  };
  struct AttrDef {
    std::string name;
    std::string type;  // "int", "list(type)", ... (see attr_value.h).
    bool has_default = false;
    AttrValue default_value;
    std::vector<DataType> allowed_types;  // For "type"; empty = any.
    bool has_minimum = false;
    int64_t minimum = 0;  // For "int" (value) and "list(...)" (length).
    // Set by OpDefBuilder::RequireDefault: only default_value is accepted,
    // and `unsupported_why` says what cohort lacks for any other value.
    bool require_default = false;
    std::string unsupported_why;
  };

  std::string name;
  std::vector<ArgDef> inputs;
  std::vector<ArgDef> outputs;
  std::vector<AttrDef> attrs;
  // Stateful ops (variables, random, Send/Recv) are never constant-folded
  // or deduplicated and their kernels are not shared across steps.
  bool is_stateful = false;
  ShapeFn shape_fn;  // Null = unknown output shapes.
  std::string doc;

  const AttrDef* FindAttr(absl::string_view attr_name) const;
};

class OpDefBuilder {
 public:
  explicit OpDefBuilder(std::string op_name);
  OpDefBuilder& Input(std::string spec);
  OpDefBuilder& Output(std::string spec);
  OpDefBuilder& Attr(std::string spec);
  // Attr `attr_name` (declared by Attr with a default) accepts only its
  // default; `why` names the behaviour cohort lacks for other values.
  OpDefBuilder& RequireDefault(std::string attr_name, std::string why);
  OpDefBuilder& SetIsStateful();
  OpDefBuilder& SetShapeFn(ShapeFn fn);
  OpDefBuilder& Doc(std::string doc);

  // Parses the specs. InvalidArgument naming the op and the bad spec.
  absl::StatusOr<OpDef> Finalize() const;

 private:
  std::string name_;
  std::vector<std::string> inputs_, outputs_, attrs_;
  std::vector<std::pair<std::string, std::string>> require_default_;
  bool stateful_ = false;
  ShapeFn shape_fn_;
  std::string doc_;
};

class OpRegistry {
 public:
  OpRegistry() = default;
  OpRegistry(const OpRegistry&) = delete;
  OpRegistry& operator=(const OpRegistry&) = delete;

  // Non-blocking. InvalidArgument for a bad spec, AlreadyExists when an op
  // of that name is registered.
  absl::Status Register(const OpDefBuilder& builder);
  // nullptr when not registered. Non-blocking.
  const OpDef* LookUp(absl::string_view op_name) const;
  // InvalidArgument "node 'x': unknown op 'Foo' ..." when not registered.
  absl::StatusOr<const OpDef*> LookUpForNode(const NodeDef& node) const;
  // Sorted op names.
  std::vector<std::string> ListOps() const;

 private:
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::unique_ptr<OpDef>> ops_
      ABSL_GUARDED_BY(mu_);
};

// --- Checking nodes against their OpDef ------------------------------------

// Adds the default value of every attr the node lacks.
void AddDefaultAttrs(const OpDef& op_def, NodeDef* node);
// See the file comment. InvalidArgument naming the node and its op;
// Unimplemented naming the node, op and attr for a RequireDefault attr off
// its default.
absl::Status ValidateNodeDef(const NodeDef& node, const OpDef& op_def);
// The number of data inputs / outputs of `node` and their types (lists
// expanded). Requires a valid node; InvalidArgument otherwise.
absl::Status InOutTypesForNode(const NodeDef& node, const OpDef& op_def,
                               std::vector<DataType>* input_types,
                               std::vector<DataType>* output_types);
// "node 'x' (op Add)" -- the prefix every graph error starts with.
std::string NodeDebugName(const NodeDef& node);
// Returns `status` with NodeDebugName(node) prepended, code kept.
absl::Status AttachNodeName(const absl::Status& status, const NodeDef& node);

// --- Shape inference --------------------------------------------------------

class InferenceContext {
 public:
  // `input_tensors[i]` is the value of input i when known (a Const), else
  // nullptr; it may be shorter than the inputs. Pointers must outlive this.
  InferenceContext(const NodeDef* node, const OpDef* op_def,
                   std::vector<PartialTensorShape> input_shapes,
                   std::vector<DataType> input_types,
                   std::vector<const Tensor*> input_tensors, int num_outputs);

  const NodeDef& node_def() const { return *node_; }
  const OpDef& op_def() const { return *op_def_; }
  int num_inputs() const { return static_cast<int>(inputs_.size()); }
  const PartialTensorShape& input(int i) const { return inputs_[i]; }
  DataType input_type(int i) const { return input_types_[i]; }
  // The constant value of input i, or nullptr when not known.
  const Tensor* input_tensor(int i) const {
    return i < static_cast<int>(input_tensors_.size()) ? input_tensors_[i]
                                                       : nullptr;
  }
  int num_outputs() const { return static_cast<int>(outputs_.size()); }
  void set_output(int i, PartialTensorShape shape) {
    outputs_[i] = std::move(shape);
  }
  const PartialTensorShape& output(int i) const { return outputs_[i]; }
  const std::vector<PartialTensorShape>& outputs() const { return outputs_; }

  template <typename T>
  absl::Status GetAttr(absl::string_view attr_name, T* value) const {
    return GetNodeAttr(*node_, attr_name, value);
  }

  // Helpers returning InvalidArgument with the node named.
  // `shape` has rank `rank` (or unknown rank, then refined to `rank`).
  absl::Status WithRank(const PartialTensorShape& shape, int rank,
                        PartialTensorShape* out) const;
  absl::Status WithRankAtLeast(const PartialTensorShape& shape, int rank,
                               PartialTensorShape* out) const;
  // Merge of two shapes that must be compatible.
  absl::Status Merge(const PartialTensorShape& a, const PartialTensorShape& b,
                     PartialTensorShape* out) const;
  // An InvalidArgument error whose message starts with the node's name.
  absl::Status InvalidArgument(absl::string_view message) const;

 private:
  const NodeDef* node_;
  const OpDef* op_def_;
  std::vector<PartialTensorShape> inputs_;
  std::vector<DataType> input_types_;
  std::vector<const Tensor*> input_tensors_;
  std::vector<PartialTensorShape> outputs_;
};

// Runs the op's shape function (or sets unknown shapes); errors name the
// node. `out` gets one shape per output.
absl::Status InferShapes(const NodeDef& node, const OpDef& op_def,
                         const std::vector<PartialTensorShape>& input_shapes,
                         const std::vector<DataType>& input_types,
                         const std::vector<const Tensor*>& input_tensors,
                         int num_outputs, std::vector<PartialTensorShape>* out);

// Reusable shape functions.
namespace shape_fns {
// Every output: unknown rank.
absl::Status Unknown(InferenceContext* c);
// Output 0 has input 0's shape.
absl::Status Unchanged(InferenceContext* c);
// Every output is a scalar.
absl::Status Scalar(InferenceContext* c);
// Every output: none (for ops without outputs).
absl::Status NoOutputs(InferenceContext* c);
// NumPy broadcasting of inputs 0 and 1 into output 0; InvalidArgument when
// known dimensions are incompatible.
absl::Status BroadcastBinaryOp(InferenceContext* c);
// The broadcast of two partial shapes (shared by BroadcastBinaryOp and
// ops with more operands, e.g. Select).
absl::Status BroadcastShapes(const InferenceContext& c,
                             const PartialTensorShape& a,
                             const PartialTensorShape& b,
                             PartialTensorShape* out);
}  // namespace shape_fns

}  // namespace cohort

#endif  // COHORT_GRAPH_OP_REGISTRY_H_
