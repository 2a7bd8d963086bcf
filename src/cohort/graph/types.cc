#include "cohort/graph/types.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace cohort {

std::string ResourceHandle::DebugString() const {
  return absl::StrCat(container.empty() ? "" : container + "/", name, " on '",
                      device, "' (", type_name, ")");
}

std::string DataTypeName(DataType dtype) {
  switch (dtype) {
    case DT_INVALID:
      return "invalid";
    case DT_FLOAT:
      return "float";
    case DT_DOUBLE:
      return "double";
    case DT_INT32:
      return "int32";
    case DT_INT64:
      return "int64";
    case DT_BOOL:
      return "bool";
    case DT_STRING:
      return "string";
    case DT_RESOURCE:
      return "resource";
    default:
      return absl::StrCat("unknown(", static_cast<int>(dtype), ")");
  }
}

bool DataTypeFromName(absl::string_view name, DataType* dtype) {
  if (name == "float" || name == "float32") {
    *dtype = DT_FLOAT;
    return true;
  }
  if (name == "double" || name == "float64") {
    *dtype = DT_DOUBLE;
    return true;
  }
  if (name == "int32") {
    *dtype = DT_INT32;
    return true;
  }
  if (name == "int64") {
    *dtype = DT_INT64;
    return true;
  }
  if (name == "bool") {
    *dtype = DT_BOOL;
    return true;
  }
  if (name == "string") {
    *dtype = DT_STRING;
    return true;
  }
  if (name == "resource") {
    *dtype = DT_RESOURCE;
    return true;
  }
  return false;
}

int DataTypeSize(DataType dtype) {
  switch (dtype) {
    case DT_FLOAT:
      return 4;
    case DT_DOUBLE:
      return 8;
    case DT_INT32:
      return 4;
    case DT_INT64:
      return 8;
    case DT_BOOL:
      return 1;
    default:
      return 0;
  }
}

bool DataTypeIsPod(DataType dtype) { return DataTypeSize(dtype) > 0; }
bool DataTypeIsNumeric(DataType dtype) {
  return dtype == DT_FLOAT || dtype == DT_DOUBLE || dtype == DT_INT32 ||
         dtype == DT_INT64;
}
bool DataTypeIsFloating(DataType dtype) {
  return dtype == DT_FLOAT || dtype == DT_DOUBLE;
}
bool DataTypeIsInteger(DataType dtype) {
  return dtype == DT_INT32 || dtype == DT_INT64;
}

const std::vector<DataType>& AllDataTypes() {
  static const auto* types = new std::vector<DataType>{
      DT_FLOAT, DT_DOUBLE, DT_INT32, DT_INT64, DT_BOOL, DT_STRING, DT_RESOURCE};
  return *types;
}

std::string DataTypeVectorString(const std::vector<DataType>& types) {
  return absl::StrCat("[",
                      absl::StrJoin(types, ", ",
                                    [](std::string* out, DataType t) {
                                      absl::StrAppend(out, DataTypeName(t));
                                    }),
                      "]");
}

}  // namespace cohort
