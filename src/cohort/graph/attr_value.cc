#include "cohort/graph/attr_value.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cohort/base/status.h"

namespace cohort {

AttrValue MakeAttrValue(absl::string_view v) {
  AttrValue a;
  a.set_s(std::string(v));
  return a;
}
AttrValue MakeAttrValue(const std::string& v) {
  return MakeAttrValue(absl::string_view(v));
}
AttrValue MakeAttrValue(const char* v) {
  return MakeAttrValue(absl::string_view(v));
}
AttrValue MakeAttrValue(int64_t v) {
  AttrValue a;
  a.set_i(v);
  return a;
}
AttrValue MakeAttrValue(int32_t v) {
  return MakeAttrValue(static_cast<int64_t>(v));
}
AttrValue MakeAttrValue(float v) {
  AttrValue a;
  a.set_f(v);
  return a;
}
AttrValue MakeAttrValue(double v) {
  return MakeAttrValue(static_cast<float>(v));
}
AttrValue MakeAttrValue(bool v) {
  AttrValue a;
  a.set_b(v);
  return a;
}
AttrValue MakeAttrValue(DataType v) {
  AttrValue a;
  a.set_type(v);
  return a;
}
AttrValue MakeAttrValue(const TensorShape& v) {
  AttrValue a;
  v.AsProto(a.mutable_shape());
  return a;
}
AttrValue MakeAttrValue(const PartialTensorShape& v) {
  AttrValue a;
  v.AsProto(a.mutable_shape());
  return a;
}
AttrValue MakeAttrValue(const Tensor& v) {
  AttrValue a;
  v.AsProto(a.mutable_tensor());
  return a;
}
AttrValue MakeAttrValue(const std::vector<std::string>& v) {
  AttrValue a;
  auto* l = a.mutable_list();
  for (const auto& x : v) l->add_s(x);
  return a;
}
AttrValue MakeAttrValue(const std::vector<int64_t>& v) {
  AttrValue a;
  auto* l = a.mutable_list();
  for (auto x : v) l->add_i(x);
  return a;
}
AttrValue MakeAttrValue(const std::vector<int32_t>& v) {
  AttrValue a;
  auto* l = a.mutable_list();
  for (auto x : v) l->add_i(x);
  return a;
}
AttrValue MakeAttrValue(const std::vector<float>& v) {
  AttrValue a;
  auto* l = a.mutable_list();
  for (auto x : v) l->add_f(x);
  return a;
}
AttrValue MakeAttrValue(const std::vector<bool>& v) {
  AttrValue a;
  auto* l = a.mutable_list();
  for (bool x : v) l->add_b(x);
  return a;
}
AttrValue MakeAttrValue(const std::vector<DataType>& v) {
  AttrValue a;
  auto* l = a.mutable_list();
  for (auto x : v) l->add_type(x);
  return a;
}
AttrValue MakeAttrValue(const std::vector<PartialTensorShape>& v) {
  AttrValue a;
  auto* l = a.mutable_list();
  for (const auto& x : v) x.AsProto(l->add_shape());
  return a;
}

std::string AttrValueTypeName(const AttrValue& v) {
  switch (v.value_case()) {
    case AttrValue::kS:
      return "string";
    case AttrValue::kI:
      return "int";
    case AttrValue::kF:
      return "float";
    case AttrValue::kB:
      return "bool";
    case AttrValue::kType:
      return "type";
    case AttrValue::kShape:
      return "shape";
    case AttrValue::kTensor:
      return "tensor";
    case AttrValue::kList: {
      const auto& l = v.list();
      if (l.s_size() > 0) return "list(string)";
      if (l.i_size() > 0) return "list(int)";
      if (l.f_size() > 0) return "list(float)";
      if (l.b_size() > 0) return "list(bool)";
      if (l.type_size() > 0) return "list(type)";
      if (l.shape_size() > 0) return "list(shape)";
      if (l.tensor_size() > 0) return "list(tensor)";
      return "list(?)";
    }
    default:
      return "none";
  }
}

std::string AttrValueDebugString(const AttrValue& v) {
  switch (v.value_case()) {
    case AttrValue::kS:
      return absl::StrCat("\"", v.s(), "\"");
    case AttrValue::kI:
      return absl::StrCat(v.i());
    case AttrValue::kF:
      return absl::StrCat(v.f());
    case AttrValue::kB:
      return v.b() ? "true" : "false";
    case AttrValue::kType:
      return DataTypeName(v.type());
    case AttrValue::kShape:
      return PartialTensorShape::FromProto(v.shape()).DebugString();
    case AttrValue::kTensor: {
      auto t = Tensor::FromProto(v.tensor());
      return t.ok() ? t->DebugString(4) : "<bad tensor>";
    }
    case AttrValue::kList: {
      const auto& l = v.list();
      std::vector<std::string> parts;
      for (const auto& s : l.s()) parts.push_back(absl::StrCat("\"", s, "\""));
      for (auto i : l.i()) parts.push_back(absl::StrCat(i));
      for (auto f : l.f()) parts.push_back(absl::StrCat(f));
      for (bool b : l.b()) parts.push_back(b ? "true" : "false");
      for (auto t : l.type())
        parts.push_back(DataTypeName(static_cast<DataType>(t)));
      for (const auto& s : l.shape())
        parts.push_back(PartialTensorShape::FromProto(s).DebugString());
      if (l.tensor_size() > 0)
        parts.push_back(absl::StrCat(l.tensor_size(), " tensors"));
      return absl::StrCat("[", absl::StrJoin(parts, ", "), "]");
    }
    default:
      return "<none>";
  }
}

namespace {

absl::StatusOr<const AttrValue*> Find(const AttrMap& attrs,
                                      absl::string_view node_name,
                                      absl::string_view attr_name,
                                      AttrValue::ValueCase want,
                                      absl::string_view want_name) {
  auto it = attrs.find(std::string(attr_name));
  if (it == attrs.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("node '", node_name, "': missing attr '", attr_name, "' (",
                     want_name, ")"));
  }
  const AttrValue& v = it->second;
  if (v.value_case() != want) {
    // An empty list literal is acceptable for any list type.
    if (!(want == AttrValue::kList && v.value_case() == AttrValue::kList)) {
      return absl::InvalidArgumentError(
          absl::StrCat("node '", node_name, "': attr '", attr_name, "' is a ",
                       AttrValueTypeName(v), ", expected ", want_name));
    }
  }
  return &v;
}

absl::Status ListTypeError(absl::string_view node_name,
                           absl::string_view attr_name, const AttrValue& v,
                           absl::string_view want_name) {
  return absl::InvalidArgumentError(
      absl::StrCat("node '", node_name, "': attr '", attr_name, "' is a ",
                   AttrValueTypeName(v), ", expected ", want_name));
}

// True when a list holds only elements of the field `count` reports.
bool ListOnly(const AttrValue::ListValue& l, int count) {
  int total = l.s_size() + l.i_size() + l.f_size() + l.b_size() +
              l.type_size() + l.shape_size() + l.tensor_size();
  return total == count;
}

}  // namespace

#define COHORT_FIND_ATTR_(var, kind, name)      \
  COHORT_ASSIGN_OR_RETURN(const AttrValue* var, \
                          Find(attrs, node_name, attr_name, kind, name))

absl::Status GetAttrFromMap(const AttrMap& attrs, absl::string_view node_name,
                            absl::string_view attr_name, std::string* out) {
  COHORT_FIND_ATTR_(v, AttrValue::kS, "string");
  *out = v->s();
  return absl::OkStatus();
}
absl::Status GetAttrFromMap(const AttrMap& attrs, absl::string_view node_name,
                            absl::string_view attr_name, int64_t* out) {
  COHORT_FIND_ATTR_(v, AttrValue::kI, "int");
  *out = v->i();
  return absl::OkStatus();
}
absl::Status GetAttrFromMap(const AttrMap& attrs, absl::string_view node_name,
                            absl::string_view attr_name, int32_t* out) {
  COHORT_FIND_ATTR_(v, AttrValue::kI, "int");
  if (v->i() < INT32_MIN || v->i() > INT32_MAX) {
    return absl::InvalidArgumentError(
        absl::StrCat("node '", node_name, "': attr '", attr_name,
                     "' = ", v->i(), " does not fit in int32"));
  }
  *out = static_cast<int32_t>(v->i());
  return absl::OkStatus();
}
absl::Status GetAttrFromMap(const AttrMap& attrs, absl::string_view node_name,
                            absl::string_view attr_name, float* out) {
  COHORT_FIND_ATTR_(v, AttrValue::kF, "float");
  *out = v->f();
  return absl::OkStatus();
}
absl::Status GetAttrFromMap(const AttrMap& attrs, absl::string_view node_name,
                            absl::string_view attr_name, bool* out) {
  COHORT_FIND_ATTR_(v, AttrValue::kB, "bool");
  *out = v->b();
  return absl::OkStatus();
}
absl::Status GetAttrFromMap(const AttrMap& attrs, absl::string_view node_name,
                            absl::string_view attr_name, DataType* out) {
  COHORT_FIND_ATTR_(v, AttrValue::kType, "type");
  *out = v->type();
  return absl::OkStatus();
}
absl::Status GetAttrFromMap(const AttrMap& attrs, absl::string_view node_name,
                            absl::string_view attr_name, TensorShape* out) {
  COHORT_FIND_ATTR_(v, AttrValue::kShape, "shape");
  auto s = TensorShape::FromProto(v->shape());
  if (!s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("node '", node_name, "': attr '", attr_name,
                     "': ", s.status().message()));
  }
  *out = *std::move(s);
  return absl::OkStatus();
}
absl::Status GetAttrFromMap(const AttrMap& attrs, absl::string_view node_name,
                            absl::string_view attr_name,
                            PartialTensorShape* out) {
  COHORT_FIND_ATTR_(v, AttrValue::kShape, "shape");
  *out = PartialTensorShape::FromProto(v->shape());
  return absl::OkStatus();
}
absl::Status GetAttrFromMap(const AttrMap& attrs, absl::string_view node_name,
                            absl::string_view attr_name, Tensor* out) {
  COHORT_FIND_ATTR_(v, AttrValue::kTensor, "tensor");
  auto t = Tensor::FromProto(v->tensor());
  if (!t.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("node '", node_name, "': attr '", attr_name,
                     "': ", t.status().message()));
  }
  *out = *std::move(t);
  return absl::OkStatus();
}
absl::Status GetAttrFromMap(const AttrMap& attrs, absl::string_view node_name,
                            absl::string_view attr_name,
                            std::vector<std::string>* out) {
  COHORT_FIND_ATTR_(v, AttrValue::kList, "list(string)");
  if (!ListOnly(v->list(), v->list().s_size())) {
    return ListTypeError(node_name, attr_name, *v, "list(string)");
  }
  out->assign(v->list().s().begin(), v->list().s().end());
  return absl::OkStatus();
}
absl::Status GetAttrFromMap(const AttrMap& attrs, absl::string_view node_name,
                            absl::string_view attr_name,
                            std::vector<int64_t>* out) {
  COHORT_FIND_ATTR_(v, AttrValue::kList, "list(int)");
  if (!ListOnly(v->list(), v->list().i_size())) {
    return ListTypeError(node_name, attr_name, *v, "list(int)");
  }
  out->assign(v->list().i().begin(), v->list().i().end());
  return absl::OkStatus();
}
absl::Status GetAttrFromMap(const AttrMap& attrs, absl::string_view node_name,
                            absl::string_view attr_name,
                            std::vector<int32_t>* out) {
  std::vector<int64_t> v64;
  COHORT_RETURN_IF_ERROR(GetAttrFromMap(attrs, node_name, attr_name, &v64));
  out->assign(v64.begin(), v64.end());
  return absl::OkStatus();
}
absl::Status GetAttrFromMap(const AttrMap& attrs, absl::string_view node_name,
                            absl::string_view attr_name,
                            std::vector<float>* out) {
  COHORT_FIND_ATTR_(v, AttrValue::kList, "list(float)");
  if (!ListOnly(v->list(), v->list().f_size())) {
    return ListTypeError(node_name, attr_name, *v, "list(float)");
  }
  out->assign(v->list().f().begin(), v->list().f().end());
  return absl::OkStatus();
}
absl::Status GetAttrFromMap(const AttrMap& attrs, absl::string_view node_name,
                            absl::string_view attr_name,
                            std::vector<DataType>* out) {
  COHORT_FIND_ATTR_(v, AttrValue::kList, "list(type)");
  if (!ListOnly(v->list(), v->list().type_size())) {
    return ListTypeError(node_name, attr_name, *v, "list(type)");
  }
  out->clear();
  for (int t : v->list().type()) out->push_back(static_cast<DataType>(t));
  return absl::OkStatus();
}
absl::Status GetAttrFromMap(const AttrMap& attrs, absl::string_view node_name,
                            absl::string_view attr_name,
                            std::vector<PartialTensorShape>* out) {
  COHORT_FIND_ATTR_(v, AttrValue::kList, "list(shape)");
  if (!ListOnly(v->list(), v->list().shape_size())) {
    return ListTypeError(node_name, attr_name, *v, "list(shape)");
  }
  out->clear();
  for (const auto& s : v->list().shape())
    out->push_back(PartialTensorShape::FromProto(s));
  return absl::OkStatus();
}

}  // namespace cohort
