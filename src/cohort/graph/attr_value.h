// Node attributes: building AttrValue protos from C++ values and reading them
// back with type checks.
//
// Attribute type names (as used in op definitions, see op_registry.h):
//   "string" "int" "float" "bool" "type" "shape" "tensor" and
//   "list(string)" "list(int)" "list(float)" "list(bool)" "list(type)"
//   "list(shape)" "list(tensor)".
//
// GetNodeAttr returns InvalidArgument naming the node and the attribute when
// the attribute is missing or has another type ("node 'dense/MatMul': attr
// 'transpose_a' is an int, expected bool").
//
// Thread safety: pure functions.
#ifndef COHORT_GRAPH_ATTR_VALUE_H_
#define COHORT_GRAPH_ATTR_VALUE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "cohort/graph.pb.h"
#include "cohort/graph/tensor.h"
#include "cohort/graph/tensor_shape.h"

namespace cohort {

using AttrMap = google::protobuf::Map<std::string, AttrValue>;

// --- C++ value -> AttrValue ------------------------------------------------
AttrValue MakeAttrValue(absl::string_view v);
AttrValue MakeAttrValue(const std::string& v);
AttrValue MakeAttrValue(const char* v);
AttrValue MakeAttrValue(int64_t v);
AttrValue MakeAttrValue(int32_t v);
AttrValue MakeAttrValue(float v);
AttrValue MakeAttrValue(double v);
AttrValue MakeAttrValue(bool v);
AttrValue MakeAttrValue(DataType v);
AttrValue MakeAttrValue(const TensorShape& v);
AttrValue MakeAttrValue(const PartialTensorShape& v);
AttrValue MakeAttrValue(const Tensor& v);
AttrValue MakeAttrValue(const std::vector<std::string>& v);
AttrValue MakeAttrValue(const std::vector<int64_t>& v);
AttrValue MakeAttrValue(const std::vector<int32_t>& v);
AttrValue MakeAttrValue(const std::vector<float>& v);
AttrValue MakeAttrValue(const std::vector<bool>& v);
AttrValue MakeAttrValue(const std::vector<DataType>& v);
AttrValue MakeAttrValue(const std::vector<PartialTensorShape>& v);
inline AttrValue MakeAttrValue(const AttrValue& v) { return v; }

// The attribute type name of `v` ("int", "list(type)", ...). An empty list
// reports "list(?)" (it is compatible with every list type).
std::string AttrValueTypeName(const AttrValue& v);
// Short rendering for messages: "3", "float", "[1,2]", "\"SAME\"".
std::string AttrValueDebugString(const AttrValue& v);

// --- AttrValue -> C++ value --------------------------------------------------
// `node_name` is used only in error messages.
absl::Status GetAttrFromMap(const AttrMap& attrs, absl::string_view node_name,
                            absl::string_view attr_name, std::string* out);
absl::Status GetAttrFromMap(const AttrMap& attrs, absl::string_view node_name,
                            absl::string_view attr_name, int64_t* out);
absl::Status GetAttrFromMap(const AttrMap& attrs, absl::string_view node_name,
                            absl::string_view attr_name, int32_t* out);
absl::Status GetAttrFromMap(const AttrMap& attrs, absl::string_view node_name,
                            absl::string_view attr_name, float* out);
absl::Status GetAttrFromMap(const AttrMap& attrs, absl::string_view node_name,
                            absl::string_view attr_name, bool* out);
absl::Status GetAttrFromMap(const AttrMap& attrs, absl::string_view node_name,
                            absl::string_view attr_name, DataType* out);
absl::Status GetAttrFromMap(const AttrMap& attrs, absl::string_view node_name,
                            absl::string_view attr_name, TensorShape* out);
absl::Status GetAttrFromMap(const AttrMap& attrs, absl::string_view node_name,
                            absl::string_view attr_name,
                            PartialTensorShape* out);
absl::Status GetAttrFromMap(const AttrMap& attrs, absl::string_view node_name,
                            absl::string_view attr_name, Tensor* out);
absl::Status GetAttrFromMap(const AttrMap& attrs, absl::string_view node_name,
                            absl::string_view attr_name,
                            std::vector<std::string>* out);
absl::Status GetAttrFromMap(const AttrMap& attrs, absl::string_view node_name,
                            absl::string_view attr_name,
                            std::vector<int64_t>* out);
absl::Status GetAttrFromMap(const AttrMap& attrs, absl::string_view node_name,
                            absl::string_view attr_name,
                            std::vector<int32_t>* out);
absl::Status GetAttrFromMap(const AttrMap& attrs, absl::string_view node_name,
                            absl::string_view attr_name,
                            std::vector<float>* out);
absl::Status GetAttrFromMap(const AttrMap& attrs, absl::string_view node_name,
                            absl::string_view attr_name,
                            std::vector<DataType>* out);
absl::Status GetAttrFromMap(const AttrMap& attrs, absl::string_view node_name,
                            absl::string_view attr_name,
                            std::vector<PartialTensorShape>* out);

template <typename T>
absl::Status GetNodeAttr(const NodeDef& node, absl::string_view attr_name,
                         T* out) {
  return GetAttrFromMap(node.attr(), node.name(), attr_name, out);
}
// True when `node` has the attribute.
inline bool HasNodeAttr(const NodeDef& node, absl::string_view attr_name) {
  return node.attr().count(std::string(attr_name)) > 0;
}

}  // namespace cohort

#endif  // COHORT_GRAPH_ATTR_VALUE_H_
