#include "cohort/graph/op_registry.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "cohort/base/status.h"

namespace cohort {

const OpDef::AttrDef* OpDef::FindAttr(absl::string_view attr_name) const {
  for (const auto& a : attrs) {
    if (a.name == attr_name) return &a;
  }
  return nullptr;
}

OpDefBuilder::OpDefBuilder(std::string op_name) : name_(std::move(op_name)) {}
OpDefBuilder& OpDefBuilder::Input(std::string spec) {
  inputs_.push_back(std::move(spec));
  return *this;
}
OpDefBuilder& OpDefBuilder::Output(std::string spec) {
  outputs_.push_back(std::move(spec));
  return *this;
}
OpDefBuilder& OpDefBuilder::Attr(std::string spec) {
  attrs_.push_back(std::move(spec));
  return *this;
}
OpDefBuilder& OpDefBuilder::RequireDefault(std::string attr_name,
                                           std::string why) {
  require_default_.emplace_back(std::move(attr_name), std::move(why));
  return *this;
}
OpDefBuilder& OpDefBuilder::SetIsStateful() {
  stateful_ = true;
  return *this;
}
OpDefBuilder& OpDefBuilder::SetShapeFn(ShapeFn fn) {
  shape_fn_ = std::move(fn);
  return *this;
}
OpDefBuilder& OpDefBuilder::Doc(std::string doc) {
  doc_ = std::move(doc);
  return *this;
}

namespace {

bool IsValidName(absl::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!absl::ascii_isalnum(c) && c != '_') return false;
  }
  return !absl::ascii_isdigit(s[0]);
}

absl::Status SpecError(absl::string_view op, absl::string_view spec,
                       absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("op '", op, "': bad spec \"", spec, "\": ", why));
}

// Parses a default value `text` for an attr of type `type`.
absl::Status ParseDefault(absl::string_view type, absl::string_view text,
                          AttrValue* out) {
  text = absl::StripAsciiWhitespace(text);
  auto parse_list = [&](std::vector<std::string>* items) -> bool {
    if (!absl::ConsumePrefix(&text, "[") || !absl::ConsumeSuffix(&text, "]")) {
      return false;
    }
    items->clear();
    if (absl::StripAsciiWhitespace(text).empty()) return true;
    for (absl::string_view p : absl::StrSplit(text, ',')) {
      items->push_back(std::string(absl::StripAsciiWhitespace(p)));
    }
    return true;
  };
  auto unquote = [](absl::string_view s, std::string* o) {
    if (s.size() >= 2 && (s[0] == '\'' || s[0] == '"') && s.back() == s[0]) {
      *o = std::string(s.substr(1, s.size() - 2));
      return true;
    }
    return false;
  };
  if (type == "int") {
    int64_t v;
    if (!absl::SimpleAtoi(text, &v))
      return absl::InvalidArgumentError("not an int");
    out->set_i(v);
  } else if (type == "float") {
    float v;
    if (!absl::SimpleAtof(text, &v))
      return absl::InvalidArgumentError("not a float");
    out->set_f(v);
  } else if (type == "bool") {
    if (text == "true")
      out->set_b(true);
    else if (text == "false")
      out->set_b(false);
    else
      return absl::InvalidArgumentError("not a bool");
  } else if (type == "string") {
    std::string s;
    if (!unquote(text, &s))
      return absl::InvalidArgumentError("not a quoted string");
    out->set_s(s);
  } else if (type == "type") {
    DataType t;
    if (!DataTypeFromName(text, &t))
      return absl::InvalidArgumentError("not a type");
    out->set_type(t);
  } else if (type == "shape") {
    if (text == "<unknown>") {
      out->mutable_shape()->set_unknown_rank(true);
      return absl::OkStatus();
    }
    std::vector<std::string> items;
    if (!parse_list(&items))
      return absl::InvalidArgumentError("not a shape like [2,?]");
    auto* s = out->mutable_shape();
    for (const auto& it : items) {
      int64_t d = -1;
      if (it != "?" && !absl::SimpleAtoi(it, &d)) {
        return absl::InvalidArgumentError("bad dimension");
      }
      s->add_dim()->set_size(d);
    }
  } else if (absl::StartsWith(type, "list(")) {
    std::vector<std::string> items;
    if (!parse_list(&items))
      return absl::InvalidArgumentError("not a list like [1,2]");
    auto* l = out->mutable_list();
    for (const auto& it : items) {
      if (type == "list(int)") {
        int64_t v;
        if (!absl::SimpleAtoi(it, &v))
          return absl::InvalidArgumentError("not an int");
        l->add_i(v);
      } else if (type == "list(float)") {
        float v;
        if (!absl::SimpleAtof(it, &v))
          return absl::InvalidArgumentError("not a float");
        l->add_f(v);
      } else if (type == "list(type)") {
        DataType t;
        if (!DataTypeFromName(it, &t))
          return absl::InvalidArgumentError("not a type");
        l->add_type(t);
      } else if (type == "list(string)") {
        std::string s;
        if (!unquote(it, &s))
          return absl::InvalidArgumentError("not a quoted string");
        l->add_s(s);
      } else {
        return absl::InvalidArgumentError(
            "defaults of this list type must be []");
      }
    }
  } else {
    return absl::InvalidArgumentError("this attr type cannot have a default");
  }
  return absl::OkStatus();
}

const char* const kAttrTypes[] = {
    "string",     "int",        "float",        "bool",        "type",
    "shape",      "tensor",     "list(string)", "list(int)",   "list(float)",
    "list(bool)", "list(type)", "list(shape)",  "list(tensor)"};

bool IsAttrType(absl::string_view t) {
  for (const char* k : kAttrTypes) {
    if (t == k) return true;
  }
  return false;
}

absl::Status ParseAttr(absl::string_view op, absl::string_view spec,
                       OpDef::AttrDef* attr) {
  std::pair<absl::string_view, absl::string_view> parts =
      absl::StrSplit(spec, absl::MaxSplits(':', 1));
  attr->name = std::string(absl::StripAsciiWhitespace(parts.first));
  if (!IsValidName(attr->name)) return SpecError(op, spec, "bad attr name");
  absl::string_view rest = absl::StripAsciiWhitespace(parts.second);
  // Find the default separator: a '=' not part of ">=".
  size_t eq = absl::string_view::npos;
  for (size_t i = 0; i < rest.size(); ++i) {
    if (rest[i] == '=' && (i == 0 || rest[i - 1] != '>')) {
      eq = i;
      break;
    }
  }
  absl::string_view type_part = rest;
  absl::string_view default_part;
  if (eq != absl::string_view::npos) {
    type_part = absl::StripAsciiWhitespace(rest.substr(0, eq));
    default_part = absl::StripAsciiWhitespace(rest.substr(eq + 1));
    attr->has_default = true;
  }
  if (absl::StartsWith(type_part, "{")) {
    if (!absl::EndsWith(type_part, "}"))
      return SpecError(op, spec, "unclosed {");
    attr->type = "type";
    absl::string_view inner = type_part.substr(1, type_part.size() - 2);
    for (absl::string_view t : absl::StrSplit(inner, ',')) {
      DataType dt;
      if (!DataTypeFromName(absl::StripAsciiWhitespace(t), &dt)) {
        return SpecError(op, spec, absl::StrCat("unknown type '", t, "'"));
      }
      attr->allowed_types.push_back(dt);
    }
  } else {
    size_t ge = type_part.find(">=");
    if (ge != absl::string_view::npos) {
      if (!absl::SimpleAtoi(
              absl::StripAsciiWhitespace(type_part.substr(ge + 2)),
              &attr->minimum)) {
        return SpecError(op, spec, "bad minimum after >=");
      }
      attr->has_minimum = true;
      type_part = absl::StripAsciiWhitespace(type_part.substr(0, ge));
    }
    attr->type = std::string(type_part);
    if (!IsAttrType(attr->type)) {
      return SpecError(op, spec,
                       absl::StrCat("unknown attr type '", attr->type, "'"));
    }
  }
  if (attr->has_default) {
    absl::Status s =
        ParseDefault(attr->type, default_part, &attr->default_value);
    if (!s.ok())
      return SpecError(op, spec, absl::StrCat("default: ", s.message()));
  }
  return absl::OkStatus();
}

absl::Status ParseArg(absl::string_view op, absl::string_view spec,
                      OpDef::ArgDef* arg) {
  arg->spec = std::string(spec);
  std::vector<absl::string_view> parts =
      absl::StrSplit(spec, absl::MaxSplits(':', 1));
  if (parts.size() != 2) return SpecError(op, spec, "expected 'name: type'");
  arg->name = std::string(absl::StripAsciiWhitespace(parts[0]));
  if (!IsValidName(arg->name)) return SpecError(op, spec, "bad argument name");
  absl::string_view type = absl::StripAsciiWhitespace(parts[1]);
  size_t star = type.find('*');
  if (star != absl::string_view::npos) {
    arg->number_attr =
        std::string(absl::StripAsciiWhitespace(type.substr(0, star)));
    type = absl::StripAsciiWhitespace(type.substr(star + 1));
    if (!IsValidName(arg->number_attr))
      return SpecError(op, spec, "bad number attr");
  }
  DataType dt;
  if (DataTypeFromName(type, &dt)) {
    arg->type = dt;
  } else if (IsValidName(type)) {
    arg->type_attr = std::string(type);
  } else {
    return SpecError(op, spec, "bad type");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<OpDef> OpDefBuilder::Finalize() const {
  OpDef def;
  def.name = name_;
  if (!IsValidName(name_)) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad op name '", name_, "'"));
  }
  for (const auto& spec : attrs_) {
    OpDef::AttrDef a;
    COHORT_RETURN_IF_ERROR(ParseAttr(name_, spec, &a));
    if (def.FindAttr(a.name) != nullptr) {
      return SpecError(name_, spec, "duplicate attr");
    }
    def.attrs.push_back(std::move(a));
  }
  for (const auto& required : require_default_) {
    const std::string& attr_name = required.first;
    const std::string& why = required.second;
    auto it = std::find_if(
        def.attrs.begin(), def.attrs.end(),
        [&](const OpDef::AttrDef& a) { return a.name == attr_name; });
    // Only a default can be required: an attr without one would refuse
    // every node.
    if (it == def.attrs.end() || !it->has_default) {
      return SpecError(name_, attr_name,
                       "RequireDefault names no attr declared with a default");
    }
    it->require_default = true;
    it->unsupported_why = why;
  }
  auto add_args = [&](const std::vector<std::string>& specs,
                      std::vector<OpDef::ArgDef>* out) -> absl::Status {
    for (const auto& spec : specs) {
      OpDef::ArgDef arg;
      COHORT_RETURN_IF_ERROR(ParseArg(name_, spec, &arg));
      if (!arg.type_attr.empty()) {
        const OpDef::AttrDef* a = def.FindAttr(arg.type_attr);
        if (a == nullptr || a->type != "type") {
          return SpecError(name_, spec,
                           absl::StrCat("'", arg.type_attr,
                                        "' is neither a type nor a declared "
                                        "attr of type 'type'"));
        }
      }
      if (!arg.number_attr.empty()) {
        const OpDef::AttrDef* a = def.FindAttr(arg.number_attr);
        if (a == nullptr) {
          OpDef::AttrDef n;
          n.name = arg.number_attr;
          n.type = "int";
          n.has_minimum = true;
          n.minimum = 1;
          def.attrs.push_back(std::move(n));
        } else if (a->type != "int") {
          return SpecError(name_, spec, "number attr must be an int");
        }
      }
      out->push_back(std::move(arg));
    }
    return absl::OkStatus();
  };
  COHORT_RETURN_IF_ERROR(add_args(inputs_, &def.inputs));
  COHORT_RETURN_IF_ERROR(add_args(outputs_, &def.outputs));
  def.is_stateful = stateful_;
  def.shape_fn = shape_fn_;
  def.doc = doc_;
  return def;
}

absl::Status OpRegistry::Register(const OpDefBuilder& builder) {
  COHORT_ASSIGN_OR_RETURN(OpDef def, builder.Finalize());
  absl::MutexLock lock(&mu_);
  auto [it, inserted] = ops_.try_emplace(def.name, nullptr);
  if (!inserted) {
    return absl::AlreadyExistsError(
        absl::StrCat("op '", def.name, "' is already registered"));
  }
  it->second = std::make_unique<OpDef>(std::move(def));
  return absl::OkStatus();
}

const OpDef* OpRegistry::LookUp(absl::string_view op_name) const {
  absl::ReaderMutexLock lock(&mu_);
  auto it = ops_.find(op_name);
  return it == ops_.end() ? nullptr : it->second.get();
}

absl::StatusOr<const OpDef*> OpRegistry::LookUpForNode(
    const NodeDef& node) const {
  const OpDef* def = LookUp(node.op());
  if (def == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("node '", node.name(), "': unknown op '", node.op(),
                     "'; check the op name and that its Register...Ops "
                     "function was called"));
  }
  return def;
}

std::vector<std::string> OpRegistry::ListOps() const {
  std::vector<std::string> names;
  {
    absl::ReaderMutexLock lock(&mu_);
    for (const auto& [name, def] : ops_) names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

void AddDefaultAttrs(const OpDef& op_def, NodeDef* node) {
  for (const auto& a : op_def.attrs) {
    if (a.has_default && node->attr().count(a.name) == 0) {
      (*node->mutable_attr())[a.name] = a.default_value;
    }
  }
}

std::string NodeDebugName(const NodeDef& node) {
  return absl::StrCat("node '", node.name(), "' (op ", node.op(), ")");
}

absl::Status AttachNodeName(const absl::Status& status, const NodeDef& node) {
  if (status.ok()) return status;
  // Avoid "node 'x' (op A): node 'x': ..." when the message already names it.
  if (absl::StartsWith(status.message(),
                       absl::StrCat("node '", node.name(), "'"))) {
    return status;
  }
  return Annotate(status, NodeDebugName(node));
}

absl::Status ValidateNodeDef(const NodeDef& node, const OpDef& op_def) {
  auto error = [&](absl::string_view msg) {
    return absl::InvalidArgumentError(
        absl::StrCat(NodeDebugName(node), ": ", msg));
  };
  for (const auto& [name, value] : node.attr()) {
    // Attrs named "_..." are internal to whoever wrote the graph
    // (TensorFlow's "_class" colocation list, "_output_shapes", ...): no
    // OpDef declares them, so they are carried along unvalidated, as
    // TensorFlow does. Readers that understand one (the placer reads
    // "_class") check it themselves.
    if (absl::StartsWith(name, "_")) continue;
    if (op_def.FindAttr(name) == nullptr) {
      return error(
          absl::StrCat("unknown attr '", name, "' for op ", op_def.name));
    }
  }
  for (const auto& a : op_def.attrs) {
    auto it = node.attr().find(a.name);
    if (it == node.attr().end()) {
      return error(absl::StrCat("missing attr '", a.name, "' (", a.type, ")"));
    }
    const AttrValue& v = it->second;
    std::string have = AttrValueTypeName(v);
    bool ok = have == a.type ||
              (have == "list(?)" && absl::StartsWith(a.type, "list("));
    if (!ok) {
      return error(absl::StrCat("attr '", a.name, "' is a ", have, " (",
                                AttrValueDebugString(v), "), expected ",
                                a.type));
    }
    if (a.type == "type" && !a.allowed_types.empty() &&
        std::find(a.allowed_types.begin(), a.allowed_types.end(), v.type()) ==
            a.allowed_types.end()) {
      return error(absl::StrCat("attr '", a.name, "' is ",
                                DataTypeName(v.type()), ", allowed ",
                                DataTypeVectorString(a.allowed_types)));
    }
    if (a.type == "type" && DataTypeName(v.type()).rfind("unknown", 0) == 0) {
      return error(absl::StrCat("attr '", a.name, "' has an unknown type ",
                                static_cast<int>(v.type())));
    }
    // Serialized comparison: AttrValue has no operator==, and a default
    // and the value TensorFlow writes for it serialize alike (a scalar or a
    // type; no maps, so the bytes are deterministic).
    if (a.require_default &&
        v.SerializeAsString() != a.default_value.SerializeAsString()) {
      return absl::UnimplementedError(absl::StrCat(
          NodeDebugName(node), ": attr '", a.name, "' is ",
          AttrValueDebugString(v),
          "; cohort supports only TensorFlow's "
          "default ",
          AttrValueDebugString(a.default_value), " (", a.unsupported_why, ")"));
    }
    if (a.has_minimum) {
      int64_t n = a.type == "int" ? v.i()
                  : v.has_list()
                      ? v.list().s_size() + v.list().i_size() +
                            v.list().f_size() + v.list().b_size() +
                            v.list().type_size() + v.list().shape_size() +
                            v.list().tensor_size()
                      : 0;
      if (n < a.minimum) {
        return error(absl::StrCat("attr '", a.name, "' is ", n,
                                  ", must be at least ", a.minimum));
      }
    }
  }
  // Data inputs first, then control inputs.
  int data_inputs = 0;
  bool seen_control = false;
  for (const auto& in : node.input()) {
    if (absl::StartsWith(in, "^")) {
      seen_control = true;
    } else {
      if (seen_control) {
        return error(absl::StrCat("data input '", in,
                                  "' comes after a control input; control "
                                  "inputs (^node) must be last"));
      }
      ++data_inputs;
    }
  }
  // In int64, each term bounded by the inputs the node really has: a
  // number attr such as AddN's N comes from the GraphDef, and an int cast
  // or a sum that wraps would let N = 2^32+1 pass as 1 and then size the
  // node's input type list (found by fuzz_graph_def).
  int64_t expected = 0;
  for (const auto& arg : op_def.inputs) {
    if (arg.number_attr.empty()) {
      ++expected;
      continue;
    }
    const int64_t count = node.attr().at(arg.number_attr).i();
    if (count < 0 || count > data_inputs) {
      return error(absl::StrCat("attr '", arg.number_attr, "' is ", count,
                                " but the node has ", data_inputs,
                                " data inputs"));
    }
    expected += count;
  }
  if (data_inputs != expected) {
    return error(absl::StrCat("has ", data_inputs, " data inputs, op ",
                              op_def.name, " takes ", expected));
  }
  return absl::OkStatus();
}

absl::Status InOutTypesForNode(const NodeDef& node, const OpDef& op_def,
                               std::vector<DataType>* input_types,
                               std::vector<DataType>* output_types) {
  auto expand = [&](const std::vector<OpDef::ArgDef>& args,
                    std::vector<DataType>* out) -> absl::Status {
    out->clear();
    for (const auto& arg : args) {
      DataType t = arg.type;
      if (!arg.type_attr.empty()) {
        COHORT_RETURN_IF_ERROR(
            AttachNodeName(GetNodeAttr(node, arg.type_attr, &t), node));
      }
      int64_t n = 1;
      if (!arg.number_attr.empty()) {
        COHORT_RETURN_IF_ERROR(
            AttachNodeName(GetNodeAttr(node, arg.number_attr, &n), node));
      }
      for (int64_t i = 0; i < n; ++i) out->push_back(t);
    }
    return absl::OkStatus();
  };
  if (input_types != nullptr)
    COHORT_RETURN_IF_ERROR(expand(op_def.inputs, input_types));
  if (output_types != nullptr)
    COHORT_RETURN_IF_ERROR(expand(op_def.outputs, output_types));
  return absl::OkStatus();
}

InferenceContext::InferenceContext(const NodeDef* node, const OpDef* op_def,
                                   std::vector<PartialTensorShape> input_shapes,
                                   std::vector<DataType> input_types,
                                   std::vector<const Tensor*> input_tensors,
                                   int num_outputs)
    : node_(node),
      op_def_(op_def),
      inputs_(std::move(input_shapes)),
      input_types_(std::move(input_types)),
      input_tensors_(std::move(input_tensors)),
      outputs_(num_outputs) {}

absl::Status InferenceContext::InvalidArgument(
    absl::string_view message) const {
  return absl::InvalidArgumentError(
      absl::StrCat(NodeDebugName(*node_), ": ", message));
}

absl::Status InferenceContext::WithRank(const PartialTensorShape& shape,
                                        int rank,
                                        PartialTensorShape* out) const {
  if (shape.unknown_rank()) {
    *out = PartialTensorShape::UnknownDims(rank);
    return absl::OkStatus();
  }
  if (shape.dims() != rank) {
    return InvalidArgument(
        absl::StrCat("shape ", shape.DebugString(), " must have rank ", rank));
  }
  *out = shape;
  return absl::OkStatus();
}

absl::Status InferenceContext::WithRankAtLeast(const PartialTensorShape& shape,
                                               int rank,
                                               PartialTensorShape* out) const {
  if (!shape.unknown_rank() && shape.dims() < rank) {
    return InvalidArgument(absl::StrCat("shape ", shape.DebugString(),
                                        " must have rank at least ", rank));
  }
  *out = shape;
  return absl::OkStatus();
}

absl::Status InferenceContext::Merge(const PartialTensorShape& a,
                                     const PartialTensorShape& b,
                                     PartialTensorShape* out) const {
  auto m = a.MergeWith(b);
  if (!m.ok()) return InvalidArgument(m.status().message());
  *out = *std::move(m);
  return absl::OkStatus();
}

absl::Status InferShapes(const NodeDef& node, const OpDef& op_def,
                         const std::vector<PartialTensorShape>& input_shapes,
                         const std::vector<DataType>& input_types,
                         const std::vector<const Tensor*>& input_tensors,
                         int num_outputs,
                         std::vector<PartialTensorShape>* out) {
  InferenceContext c(&node, &op_def, input_shapes, input_types, input_tensors,
                     num_outputs);
  if (op_def.shape_fn) {
    COHORT_RETURN_IF_ERROR(AttachNodeName(op_def.shape_fn(&c), node));
  }
  *out = c.outputs();
  return absl::OkStatus();
}

namespace shape_fns {

absl::Status Unknown(InferenceContext* c) {
  for (int i = 0; i < c->num_outputs(); ++i) {
    c->set_output(i, PartialTensorShape::UnknownRank());
  }
  return absl::OkStatus();
}

absl::Status Unchanged(InferenceContext* c) {
  c->set_output(0, c->input(0));
  return absl::OkStatus();
}

absl::Status Scalar(InferenceContext* c) {
  for (int i = 0; i < c->num_outputs(); ++i)
    c->set_output(i, PartialTensorShape::Scalar());
  return absl::OkStatus();
}

absl::Status NoOutputs(InferenceContext* c) { return absl::OkStatus(); }

absl::Status BroadcastShapes(const InferenceContext& c,
                             const PartialTensorShape& a,
                             const PartialTensorShape& b,
                             PartialTensorShape* out) {
  if (a.unknown_rank() || b.unknown_rank()) {
    *out = PartialTensorShape::UnknownRank();
    return absl::OkStatus();
  }
  int rank = std::max(a.dims(), b.dims());
  std::vector<int64_t> dims(rank);
  for (int i = 0; i < rank; ++i) {
    int ia = a.dims() - rank + i, ib = b.dims() - rank + i;
    int64_t da = ia >= 0 ? a.dim_size(ia) : 1;
    int64_t db = ib >= 0 ? b.dim_size(ib) : 1;
    if (da == 1) {
      dims[i] = db;
    } else if (db == 1) {
      dims[i] = da;
    } else if (da < 0) {
      dims[i] = db;  // db > 1 or unknown
    } else if (db < 0) {
      dims[i] = da;
    } else if (da == db) {
      dims[i] = da;
    } else {
      return c.InvalidArgument(absl::StrCat(
          "incompatible shapes for broadcasting: ", a.DebugString(), " and ",
          b.DebugString()));
    }
  }
  *out = PartialTensorShape(absl::Span<const int64_t>(dims));
  return absl::OkStatus();
}

absl::Status BroadcastBinaryOp(InferenceContext* c) {
  PartialTensorShape out;
  COHORT_RETURN_IF_ERROR(BroadcastShapes(*c, c->input(0), c->input(1), &out));
  c->set_output(0, std::move(out));
  return absl::OkStatus();
}

}  // namespace shape_fns
}  // namespace cohort
