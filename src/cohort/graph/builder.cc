#include "cohort/graph/builder.h"

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "cohort/base/logging.h"
#include "cohort/base/status.h"
#include "cohort/graph/standard_registries.h"

namespace cohort {

class GraphUnderConstruction {
 public:
  explicit GraphUnderConstruction(const OpRegistry* r) : registry(r) {}
  // Returns `candidate`, or candidate_1, _2, ... when taken; reserves it.
  std::string Uniquify(const std::string& candidate) {
    std::string name = candidate;
    int& n = counts[candidate];
    while (used.contains(name)) name = absl::StrCat(candidate, "_", ++n);
    used.insert(name);
    return name;
  }

  const OpRegistry* registry;
  std::deque<BuiltNode> nodes;
  absl::flat_hash_map<std::string, BuiltNode*> by_name;
  absl::flat_hash_set<std::string> used;
  absl::flat_hash_map<std::string, int> counts;
  std::vector<Operation> initializers;
  absl::flat_hash_map<std::string, std::vector<Operation>> collections;
  absl::Status status;
};

// --- Operation / Output -----------------------------------------------------

const std::string& Operation::name() const { return node_->def.name(); }
const std::string& Operation::op_type() const { return node_->def.op(); }
const std::string& Operation::device() const { return node_->def.device(); }
const NodeDef& Operation::node_def() const { return node_->def; }
const OpDef& Operation::op_def() const { return *node_->op_def; }
int Operation::num_inputs() const {
  return static_cast<int>(node_->inputs.size());
}
Output Operation::input(int i) const { return node_->inputs[i]; }
int Operation::num_outputs() const {
  return static_cast<int>(node_->output_types.size());
}
Output Operation::output(int i) const {
  return valid() ? Output(*this, i) : Output();
}
DataType Operation::output_type(int i) const { return node_->output_types[i]; }
std::vector<Operation> Operation::control_inputs() const {
  return node_->control_inputs;
}

DataType Output::dtype() const {
  return valid() ? node()->output_types[index_] : DT_INVALID;
}
const PartialTensorShape& Output::shape() const {
  static const auto* unknown = new PartialTensorShape();
  return valid() ? node()->output_shapes[index_] : *unknown;
}
std::string Output::name() const {
  return valid() ? absl::StrCat(node_name(), ":", index_) : "<invalid>";
}

// --- Scope -------------------------------------------------------------------

Scope::Scope(std::shared_ptr<GraphUnderConstruction> g)
    : graph_(std::move(g)) {}

Scope Scope::NewRootScope(const OpRegistry* registry) {
  if (registry == nullptr) registry = StandardOpRegistry();
  return Scope(std::make_shared<GraphUnderConstruction>(registry));
}

Scope Scope::NewSubScope(absl::string_view child) const {
  Scope s = *this;
  s.op_name_.clear();
  if (child.empty()) return s;
  std::string full = name_scope_.empty()
                         ? std::string(child)
                         : absl::StrCat(name_scope_, "/", child);
  s.name_scope_ = graph_->Uniquify(full);
  return s;
}

Scope Scope::WithOpName(absl::string_view name) const {
  Scope s = *this;
  s.op_name_ = std::string(name);
  return s;
}

Scope Scope::WithDevice(absl::string_view device) const {
  Scope s = *this;
  s.device_ = std::string(device);
  return s;
}

Scope Scope::WithControlDependencies(const std::vector<Operation>& deps) const {
  Scope s = *this;
  for (const auto& d : deps) {
    if (!d.valid()) {
      UpdateStatus(absl::InvalidArgumentError(
          "WithControlDependencies: an invalid operation (did an earlier op "
          "fail?)"));
      continue;
    }
    s.control_deps_.push_back(d);
  }
  return s;
}

Scope Scope::WithNoControlDependencies() const {
  Scope s = *this;
  s.control_deps_.clear();
  return s;
}

bool Scope::ok() const { return graph_->status.ok(); }
absl::Status Scope::status() const { return graph_->status; }
void Scope::UpdateStatus(const absl::Status& s) const {
  if (graph_->status.ok() && !s.ok()) graph_->status = s;
}
const OpRegistry* Scope::op_registry() const { return graph_->registry; }

std::string Scope::GetUniqueNameForOp(absl::string_view default_name) const {
  std::string base = op_name_.empty() ? std::string(default_name) : op_name_;
  std::string full =
      name_scope_.empty() ? base : absl::StrCat(name_scope_, "/", base);
  return graph_->Uniquify(full);
}

absl::Status Scope::ToGraphDef(GraphDef* out, int first_node) const {
  COHORT_RETURN_IF_ERROR(graph_->status);
  out->Clear();
  out->set_version(1);
  for (const auto& n : graph_->nodes) {
    if (n.id >= first_node) *out->add_node() = n.def;
  }
  return absl::OkStatus();
}

Scope Scope::RootOf(const Scope& scope) { return Scope(scope.graph_); }

void Scope::AddInitializer(const Operation& op) const {
  graph_->initializers.push_back(op);
}

std::vector<Operation> Scope::Initializers() const {
  return graph_->initializers;
}

void Scope::AddToCollection(absl::string_view key, const Operation& op) const {
  std::vector<Operation>& ops = graph_->collections[key];
  // By node name: two Operation handles of one node compare by name only.
  for (const Operation& o : ops) {
    if (o.name() == op.name()) return;
  }
  ops.push_back(op);
}

std::vector<Operation> Scope::GetCollection(absl::string_view key) const {
  auto it = graph_->collections.find(key);
  return it == graph_->collections.end() ? std::vector<Operation>()
                                         : it->second;
}

int Scope::num_nodes() const { return static_cast<int>(graph_->nodes.size()); }

Operation Scope::FindOp(absl::string_view name) const {
  auto it = graph_->by_name.find(name);
  return it == graph_->by_name.end() ? Operation() : Operation(it->second);
}

std::vector<Operation> Scope::AllOps() const {
  std::vector<Operation> out;
  for (auto& n : graph_->nodes) out.push_back(Operation(&n));
  return out;
}

// --- BuildOp -----------------------------------------------------------------

namespace {

std::string InputString(const Output& o) {
  return o.index() == 0 ? o.node_name()
                        : absl::StrCat(o.node_name(), ":", o.index());
}

}  // namespace

Operation BuildOp(const Scope& scope, absl::string_view op,
                  const std::vector<NodeInput>& inputs,
                  const std::vector<NamedAttr>& attrs,
                  absl::string_view default_name) {
  if (!scope.ok()) return Operation();
  GraphUnderConstruction* g = scope.graph();
  const OpDef* op_def = g->registry->LookUp(op);
  std::string name =
      scope.GetUniqueNameForOp(default_name.empty() ? op : default_name);
  NodeDef def;
  def.set_name(name);
  def.set_op(std::string(op));
  def.set_device(scope.device());
  auto fail = [&](absl::Status s) {
    scope.UpdateStatus(AttachNodeName(s, def));
    return Operation();
  };
  if (op_def == nullptr) {
    return fail(absl::InvalidArgumentError(
        absl::StrCat("unknown op '", op,
                     "'; check the name and that its Register...Ops "
                     "function was called on the scope's registry")));
  }
  for (const auto& a : attrs) (*def.mutable_attr())[a.name] = a.value;
  if (inputs.size() != op_def->inputs.size()) {
    return fail(absl::InvalidArgumentError(
        absl::StrCat("got ", inputs.size(), " inputs, op ", op, " takes ",
                     op_def->inputs.size())));
  }
  std::vector<Output> flat_inputs;
  // Sets (or checks) type attr `attr` to `t` for argument `arg`.
  auto bind_type = [&](const OpDef::ArgDef& arg, DataType t) -> absl::Status {
    if (!arg.type_attr.empty()) {
      auto it = def.attr().find(arg.type_attr);
      if (it == def.attr().end()) {
        (*def.mutable_attr())[arg.type_attr].set_type(t);
      } else if (it->second.type() != t) {
        return absl::InvalidArgumentError(absl::StrCat(
            "input '", arg.name, "' has type ", DataTypeName(t), " but attr ",
            arg.type_attr, " is ", AttrValueDebugString(it->second),
            " (from an earlier input or given explicitly)"));
      }
    } else if (arg.type != t) {
      return absl::InvalidArgumentError(
          absl::StrCat("input '", arg.name, "' must be ",
                       DataTypeName(arg.type), ", got ", DataTypeName(t)));
    }
    return absl::OkStatus();
  };
  for (size_t i = 0; i < inputs.size(); ++i) {
    const OpDef::ArgDef& arg = op_def->inputs[i];
    const NodeInput& in = inputs[i];
    if (!arg.number_attr.empty()) {
      if (!in.is_list) {
        return fail(absl::InvalidArgumentError(
            absl::StrCat("input '", arg.name, "' (", arg.spec,
                         ") takes a list of outputs")));
      }
      auto it = def.attr().find(arg.number_attr);
      if (it == def.attr().end()) {
        (*def.mutable_attr())[arg.number_attr].set_i(in.list.size());
      }
      for (const Output& o : in.list) {
        if (!o.valid()) {
          return fail(absl::InvalidArgumentError(
              absl::StrCat("input '", arg.name, "' holds an invalid output")));
        }
        absl::Status s = bind_type(arg, o.dtype());
        if (!s.ok()) return fail(s);
        flat_inputs.push_back(o);
      }
    } else {
      if (in.is_list) {
        return fail(absl::InvalidArgumentError(
            absl::StrCat("input '", arg.name, "' (", arg.spec,
                         ") takes one output, got a list")));
      }
      if (!in.single.valid()) {
        return fail(absl::InvalidArgumentError(
            absl::StrCat("input '", arg.name, "' is an invalid output")));
      }
      absl::Status s = bind_type(arg, in.single.dtype());
      if (!s.ok()) return fail(s);
      flat_inputs.push_back(in.single);
    }
  }
  for (const Output& o : flat_inputs) def.add_input(InputString(o));
  std::vector<Operation> control;
  absl::flat_hash_set<BuiltNode*> seen;
  for (const Operation& c : scope.control_deps()) {
    if (seen.insert(c.node()).second) {
      control.push_back(c);
      def.add_input(absl::StrCat("^", c.name()));
    }
  }
  AddDefaultAttrs(*op_def, &def);
  absl::Status s = ValidateNodeDef(def, *op_def);
  if (!s.ok()) return fail(s);
  std::vector<DataType> in_types, out_types;
  s = InOutTypesForNode(def, *op_def, &in_types, &out_types);
  if (!s.ok()) return fail(s);
  std::vector<PartialTensorShape> in_shapes;
  std::vector<const Tensor*> in_values;
  for (const Output& o : flat_inputs) {
    in_shapes.push_back(o.shape());
    const auto& cv = o.node()->const_value;
    in_values.push_back(cv.has_value() ? &*cv : nullptr);
  }
  std::vector<PartialTensorShape> out_shapes;
  s = InferShapes(def, *op_def, in_shapes, in_types, in_values,
                  static_cast<int>(out_types.size()), &out_shapes);
  if (!s.ok()) return fail(s);

  BuiltNode& n = g->nodes.emplace_back();
  n.id = static_cast<int>(g->nodes.size()) - 1;
  n.op_def = op_def;
  n.input_types = std::move(in_types);
  n.output_types = std::move(out_types);
  n.output_shapes = std::move(out_shapes);
  n.inputs = std::move(flat_inputs);
  n.control_inputs = std::move(control);
  if (op == "Const") {
    Tensor v;
    if (GetNodeAttr(def, "value", &v).ok()) n.const_value = std::move(v);
  }
  n.def = std::move(def);
  g->by_name[n.def.name()] = &n;
  return Operation(&n);
}

// --- Input
// ---------------------------------------------------------------------

namespace {

template <typename From, typename To>
void CastElements(const Tensor& in, Tensor* out) {
  const From* src = in.data<From>();
  To* dst = out->data<To>();
  for (int64_t i = 0; i < in.NumElements(); ++i)
    dst[i] = static_cast<To>(src[i]);
}

template <typename From>
bool CastFrom(const Tensor& in, Tensor* out) {
  switch (out->dtype()) {
    case DT_FLOAT:
      CastElements<From, float>(in, out);
      return true;
    case DT_DOUBLE:
      CastElements<From, double>(in, out);
      return true;
    case DT_INT32:
      CastElements<From, int32_t>(in, out);
      return true;
    case DT_INT64:
      CastElements<From, int64_t>(in, out);
      return true;
    case DT_BOOL:
      CastElements<From, bool>(in, out);
      return true;
    default:
      return false;
  }
}

}  // namespace

absl::StatusOr<Tensor> CastTensor(const Tensor& t, DataType dtype) {
  if (t.dtype() == dtype) return t;
  Tensor out(DataTypeIsPod(dtype) ? dtype : DT_FLOAT, t.shape());
  bool ok = DataTypeIsPod(dtype);
  if (ok) {
    switch (t.dtype()) {
      case DT_FLOAT:
        ok = CastFrom<float>(t, &out);
        break;
      case DT_DOUBLE:
        ok = CastFrom<double>(t, &out);
        break;
      case DT_INT32:
        ok = CastFrom<int32_t>(t, &out);
        break;
      case DT_INT64:
        ok = CastFrom<int64_t>(t, &out);
        break;
      case DT_BOOL:
        ok = CastFrom<bool>(t, &out);
        break;
      default:
        ok = false;
    }
  }
  if (!ok) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot cast a ", DataTypeName(t.dtype()), " tensor to ",
                     DataTypeName(dtype)));
  }
  return out;
}

Output Input::ToOutput(const Scope& scope, DataType dtype_hint,
                       absl::string_view const_name) const {
  if (!tensor_.has_value()) {
    if (!output_.valid()) {
      scope.UpdateStatus(absl::InvalidArgumentError(
          "an op input is an invalid output (did an earlier op fail?)"));
    }
    return output_;
  }
  Tensor value = *tensor_;
  if (literal_ && dtype_hint != DT_INVALID && dtype_hint != value.dtype() &&
      (DataTypeIsNumeric(dtype_hint))) {
    auto cast = CastTensor(value, dtype_hint);
    if (!cast.ok()) {
      scope.UpdateStatus(cast.status());
      return Output();
    }
    value = *std::move(cast);
  }
  return BuildOp(scope.WithOpName(""), "Const", {},
                 {{"value", value}, {"dtype", value.dtype()}}, const_name)
      .output(0);
}

}  // namespace cohort
