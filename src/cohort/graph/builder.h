// The C++ graph-builder API: what a user writes a model with.
//
//   Scope root = Scope::NewRootScope();
//   auto x = ops::Placeholder(root.WithOpName("x"), DT_FLOAT, {-1, 3});
//   auto w = ...;
//   Scope layer = root.NewSubScope("dense");            // names "dense/..."
//   auto y = ops::Add(layer, x, 1.0f);                  // literal -> Const
//   GraphDef g;
//   COHORT_RETURN_IF_ERROR(root.ToGraphDef(&g));        // first error, if any
//
// Contract:
//  - A Scope names a place in one graph under construction: a name scope
//    ("a/b"), a device ("/job:ps/task:0/device:CPU:0"), and control
//    dependencies added to every op built in it. Scopes are cheap values;
//    With*/NewSubScope return modified copies sharing the same graph.
//  - Ops are built by BuildOp (the generic helper every ops:: wrapper uses):
//    it resolves the op in the scope's OpRegistry, fills type attrs from the
//    input dtypes ("T" of "x: T") and number attrs from list lengths, adds
//    defaults, validates the node, computes output dtypes and runs the
//    op's shape function (with the values of Const inputs). Names are made
//    unique ("Add", "Add_1", ...).
//  - Errors do not throw: the first error is stored in the scope's graph
//    (shared by all its scopes) and returned by status() / ToGraphDef();
//    ops built after an error return invalid handles and do nothing.
//    Messages name the node: "node 'dense/Add' (op Add): incompatible shapes
//    for broadcasting: [2,3] and [4]".
//  - Output handles (node, index) stay valid as long as any Scope of the
//    graph exists.
//
// Adding an op wrapper (kernels engineer): in kernels/<family>_ops.h declare
//   Output Mul(const Scope& scope, Input x, Input y);
// and define it as
//   Output Mul(const Scope& s, Input x, Input y) {
//     Output xo = x.ToOutput(s);
//     return BuildOp(s, "Mul", {xo, y.ToOutput(s, xo.dtype())}).output(0);
//   }
//
// Thread safety: a graph under construction (all Scopes derived from one
// root) is not thread-safe; build it from one thread. Handles may be read
// concurrently once building is done.
#ifndef COHORT_GRAPH_BUILDER_H_
#define COHORT_GRAPH_BUILDER_H_

#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "cohort/graph.pb.h"
#include "cohort/graph/attr_value.h"
#include "cohort/graph/op_registry.h"
#include "cohort/graph/tensor.h"

namespace cohort {

class Output;
struct BuiltNode;

// A node in a graph under construction (may be invalid).
class Operation {
 public:
  Operation() = default;
  explicit Operation(BuiltNode* node) : node_(node) {}

  bool valid() const { return node_ != nullptr; }
  BuiltNode* node() const { return node_; }
  const std::string& name() const;
  const std::string& op_type() const;
  const std::string& device() const;
  const NodeDef& node_def() const;
  const OpDef& op_def() const;
  int num_inputs() const;
  // The i-th data input.
  Output input(int i) const;
  int num_outputs() const;
  Output output(int i) const;
  DataType output_type(int i) const;
  std::vector<Operation> control_inputs() const;
  // Attribute of the node (InvalidArgument naming node/attr otherwise).
  template <typename T>
  absl::Status GetAttr(absl::string_view attr_name, T* value) const {
    return GetNodeAttr(node_def(), attr_name, value);
  }

  bool operator==(const Operation& o) const { return node_ == o.node_; }
  bool operator!=(const Operation& o) const { return node_ != o.node_; }
  template <typename H>
  friend H AbslHashValue(H h, const Operation& o) {
    return H::combine(std::move(h), o.node_);
  }

 private:
  BuiltNode* node_ = nullptr;
};

// One output of a node: what ops consume and sessions feed and fetch.
class Output {
 public:
  Output() = default;
  Output(Operation op, int index) : op_(op), index_(index) {}
  // Output 0 of `op`.
  Output(Operation op) : op_(op), index_(0) {}  // NOLINT: implicit on purpose

  bool valid() const { return op_.valid(); }
  Operation op() const { return op_; }
  BuiltNode* node() const { return op_.node(); }
  int index() const { return index_; }
  DataType dtype() const;
  const PartialTensorShape& shape() const;
  const std::string& node_name() const { return op_.name(); }
  // "node:index", the name used in feeds and fetches.
  std::string name() const;

  bool operator==(const Output& o) const {
    return op_ == o.op_ && index_ == o.index_;
  }
  bool operator!=(const Output& o) const { return !(*this == o); }
  template <typename H>
  friend H AbslHashValue(H h, const Output& o) {
    return H::combine(std::move(h), o.op_, o.index_);
  }

 private:
  Operation op_;
  int index_ = 0;
};

// Read-only view of a built node (owned by the graph under construction).
struct BuiltNode {
  NodeDef def;
  const OpDef* op_def = nullptr;
  std::vector<DataType> input_types;
  std::vector<DataType> output_types;
  std::vector<PartialTensorShape> output_shapes;
  std::vector<Output> inputs;  // Data inputs, lists expanded.
  std::vector<Operation> control_inputs;
  std::optional<Tensor> const_value;  // Set for Const nodes.
  int id = 0;                         // Order of creation.
};

class GraphUnderConstruction;

class Scope {
 public:
  // A new empty graph. `registry` null means StandardOpRegistry().
  static Scope NewRootScope(const OpRegistry* registry = nullptr);

  // Child name scope: ops get names "<parent>/<child>/<op>". A repeated
  // child name is made unique ("dense", "dense_1").
  Scope NewSubScope(absl::string_view child) const;
  // The next op built with the returned scope is named exactly `name`
  // (inside the name scope; made unique if taken).
  Scope WithOpName(absl::string_view name) const;
  Scope WithDevice(absl::string_view device) const;
  // Ops built in the returned scope run after `deps` (control inputs).
  Scope WithControlDependencies(const std::vector<Operation>& deps) const;
  Scope WithNoControlDependencies() const;

  bool ok() const;
  // The first error of the graph, or OK.
  absl::Status status() const;
  // Records `s` as the graph's error if it is the first.
  void UpdateStatus(const absl::Status& s) const;

  const std::string& name_scope() const { return name_scope_; }
  const std::string& device() const { return device_; }
  const std::vector<Operation>& control_deps() const { return control_deps_; }
  const OpRegistry* op_registry() const;
  // The full unique name for the next op ("scope/Add_2").
  std::string GetUniqueNameForOp(absl::string_view default_name) const;

  // The whole graph (or only nodes with id >= first_node, for
  // Session::Extend). Returns status() when it is not OK.
  absl::Status ToGraphDef(GraphDef* out, int first_node = 0) const;
  // Number of nodes built so far.
  int num_nodes() const;
  // The node called `name`, or an invalid Operation.
  Operation FindOp(absl::string_view name) const;
  // Every node, in creation order.
  std::vector<Operation> AllOps() const;
  GraphUnderConstruction* graph() const { return graph_.get(); }
  // A scope at the top of this scope's graph (no name scope, device or
  // control dependencies).
  static Scope RootOf(const Scope& scope);

  // Variable initializers of the graph (see state_ops.h).
  void AddInitializer(const Operation& op) const;
  std::vector<Operation> Initializers() const;

  // Named collections of ops, as TensorFlow's graph collections (the
  // GLOBAL_STEP collection "global_step" holds the global step variable).
  // AddToCollection appends `op` to `key` unless it is there already;
  // GetCollection lists `key`'s ops in the order added (empty when none).
  void AddToCollection(absl::string_view key, const Operation& op) const;
  std::vector<Operation> GetCollection(absl::string_view key) const;

 private:
  explicit Scope(std::shared_ptr<GraphUnderConstruction> g);
  std::shared_ptr<GraphUnderConstruction> graph_;
  std::string name_scope_;
  std::string op_name_;
  std::string device_;
  std::vector<Operation> control_deps_;
};

// A data input of BuildOp: one Output, or a list for "N * T" arguments.
struct NodeInput {
  NodeInput(Output o) : single(std::move(o)) {}  // NOLINT
  NodeInput(Operation op) : single(op) {}        // NOLINT
  NodeInput(std::vector<Output> l)
      : is_list(true), list(std::move(l)) {}  // NOLINT
  bool is_list = false;
  Output single;
  std::vector<Output> list;
};

// An attribute given to BuildOp: {"transpose_a", true}, {"T", DT_FLOAT}.
struct NamedAttr {
  template <typename T>
  NamedAttr(std::string n, const T& v)
      : name(std::move(n)), value(MakeAttrValue(v)) {}
  std::string name;
  AttrValue value;
};

// Builds a node; see the file comment. `default_name` (default: the op
// name) is used unless the scope has WithOpName. Returns an invalid
// Operation after recording the error in the scope.
Operation BuildOp(const Scope& scope, absl::string_view op,
                  const std::vector<NodeInput>& inputs,
                  const std::vector<NamedAttr>& attrs = {},
                  absl::string_view default_name = {});

// An op argument that may be an Output or a constant (turned into a Const
// node when used): ops::Mul(s, x, 2.0f), ops::Add(s, x, {1.f, 2.f}).
class Input {
 public:
  Input(const Output& o) : output_(o) {}                    // NOLINT
  Input(const Operation& o) : output_(o) {}                 // NOLINT
  Input(const Tensor& t) : tensor_(t) {}                    // NOLINT
  Input(float v) : tensor_(Tensor(v)), literal_(true) {}    // NOLINT
  Input(double v) : tensor_(Tensor(v)), literal_(true) {}   // NOLINT
  Input(int32_t v) : tensor_(Tensor(v)), literal_(true) {}  // NOLINT
  Input(int64_t v) : tensor_(Tensor(v)), literal_(true) {}  // NOLINT
  Input(bool v) : tensor_(Tensor(v)) {}                     // NOLINT
  Input(const char* v) : tensor_(Tensor(v)) {}              // NOLINT
  Input(std::initializer_list<float> v)                     // NOLINT
      : tensor_(Tensor::Vec<float>(v)), literal_(true) {}
  Input(std::initializer_list<int32_t> v)  // NOLINT
      : tensor_(Tensor::Vec<int32_t>(v)), literal_(true) {}
  Input(std::initializer_list<int64_t> v)  // NOLINT
      : tensor_(Tensor::Vec<int64_t>(v)), literal_(true) {}

  // The Output (building a Const for a constant). A numeric literal is
  // converted to `dtype_hint` when given (so `x + 1.0` works for any float
  // or int x). The Const is named `const_name` (default "Const") in the
  // scope's name scope; the scope's WithOpName is ignored, because it names
  // the op the input is for. Errors go to the scope and give an invalid
  // Output.
  Output ToOutput(const Scope& scope, DataType dtype_hint = DT_INVALID,
                  absl::string_view const_name = "Const") const;
  // The constant, when this input is one.
  const std::optional<Tensor>& tensor() const { return tensor_; }

 private:
  Output output_;
  std::optional<Tensor> tensor_;
  bool literal_ = false;
};

// Converts the numeric tensor `t` to `dtype` (value casts).
// InvalidArgument for non-numeric types.
absl::StatusOr<Tensor> CastTensor(const Tensor& t, DataType dtype);

}  // namespace cohort

#endif  // COHORT_GRAPH_BUILDER_H_
