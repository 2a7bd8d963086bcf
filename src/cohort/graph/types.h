// Element types of tensors: names, sizes, C++ <-> DataType mapping, and a
// dispatch macro for kernels templated on the element type.
//
// The DataType enum itself is the proto enum cohort::DataType (graph.proto).
// Supported element types and their C++ types:
//   DT_FLOAT float, DT_DOUBLE double, DT_INT32 int32_t, DT_INT64 int64_t,
//   DT_BOOL bool, DT_STRING std::string, DT_RESOURCE cohort::ResourceHandle.
//
//   COHORT_SWITCH_NUMERIC(dtype, T, { out = Compute<T>(...); },
//                         return absl::InvalidArgumentError(...));
//
// STMTS is compiled for every type of the switch (the macro is not a
// template), so put type-specific code in a function template called with
// T. Commas inside STMTS must be inside parentheses.
//
// Thread safety: everything here is a pure function or constant.
#ifndef COHORT_GRAPH_TYPES_H_
#define COHORT_GRAPH_TYPES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "cohort/graph.pb.h"

namespace cohort {

// Identifies a resource held in a ResourceMgr (see resource_mgr.h). The
// element type of DT_RESOURCE tensors.
struct ResourceHandle {
  std::string device;
  std::string container;
  std::string name;
  std::string type_name;  // C++ type name of the resource, e.g. "Var".

  bool operator==(const ResourceHandle& o) const {
    return device == o.device && container == o.container && name == o.name &&
           type_name == o.type_name;
  }
  // "container/name on device (type)" for error messages.
  std::string DebugString() const;
};

// "float", "double", "int32", "int64", "bool", "string", "resource";
// "invalid" for DT_INVALID and "unknown(N)" otherwise.
std::string DataTypeName(DataType dtype);
// Inverse of DataTypeName (also accepts "float32", "float64"). False if
// unknown.
bool DataTypeFromName(absl::string_view name, DataType* dtype);
// Size of one element in bytes; 0 for DT_STRING, DT_RESOURCE, DT_INVALID
// (their elements are C++ objects, not plain bytes).
int DataTypeSize(DataType dtype);
// True for the types whose elements are plain bytes (numeric and bool).
bool DataTypeIsPod(DataType dtype);
// True for float, double, int32, int64.
bool DataTypeIsNumeric(DataType dtype);
bool DataTypeIsFloating(DataType dtype);
bool DataTypeIsInteger(DataType dtype);
// Every type a tensor may have.
const std::vector<DataType>& AllDataTypes();
// "[float, int32]"
std::string DataTypeVectorString(const std::vector<DataType>& types);

// DataTypeToEnum<T>::value is the DataType of C++ type T.
template <typename T>
struct DataTypeToEnum;
// EnumToDataType<DT>::Type is the C++ type of DataType DT.
template <DataType DT>
struct EnumToDataType;

#define COHORT_MATCH_TYPE_AND_ENUM_(TYPE, ENUM) \
  template <>                                   \
  struct DataTypeToEnum<TYPE> {                 \
    static constexpr DataType value = ENUM;     \
  };                                            \
  template <>                                   \
  struct EnumToDataType<ENUM> {                 \
    using Type = TYPE;                          \
  }

COHORT_MATCH_TYPE_AND_ENUM_(float, DT_FLOAT);
COHORT_MATCH_TYPE_AND_ENUM_(double, DT_DOUBLE);
COHORT_MATCH_TYPE_AND_ENUM_(int32_t, DT_INT32);
COHORT_MATCH_TYPE_AND_ENUM_(int64_t, DT_INT64);
COHORT_MATCH_TYPE_AND_ENUM_(bool, DT_BOOL);
COHORT_MATCH_TYPE_AND_ENUM_(std::string, DT_STRING);
COHORT_MATCH_TYPE_AND_ENUM_(ResourceHandle, DT_RESOURCE);
#undef COHORT_MATCH_TYPE_AND_ENUM_

}  // namespace cohort

// Runs STMTS with `T` bound to the C++ type of `dtype` for the numeric types
// (float, double, int32, int64); runs DEFAULT for anything else.
#define COHORT_SWITCH_NUMERIC(dtype, T, STMTS, DEFAULT) \
  switch (dtype) {                                      \
    case ::cohort::DT_FLOAT: {                          \
      using T = float;                                  \
      STMTS;                                            \
      break;                                            \
    }                                                   \
    case ::cohort::DT_DOUBLE: {                         \
      using T = double;                                 \
      STMTS;                                            \
      break;                                            \
    }                                                   \
    case ::cohort::DT_INT32: {                          \
      using T = int32_t;                                \
      STMTS;                                            \
      break;                                            \
    }                                                   \
    case ::cohort::DT_INT64: {                          \
      using T = int64_t;                                \
      STMTS;                                            \
      break;                                            \
    }                                                   \
    default: {                                          \
      DEFAULT;                                          \
    }                                                   \
  }

// Like COHORT_SWITCH_NUMERIC plus DT_BOOL and DT_STRING.
#define COHORT_SWITCH_ALL(dtype, T, STMTS, DEFAULT)   \
  switch (dtype) {                                    \
    case ::cohort::DT_BOOL: {                         \
      using T = bool;                                 \
      STMTS;                                          \
      break;                                          \
    }                                                 \
    case ::cohort::DT_STRING: {                       \
      using T = std::string;                          \
      STMTS;                                          \
      break;                                          \
    }                                                 \
    case ::cohort::DT_RESOURCE: {                     \
      using T = ::cohort::ResourceHandle;             \
      STMTS;                                          \
      break;                                          \
    }                                                 \
    default:                                          \
      COHORT_SWITCH_NUMERIC(dtype, T, STMTS, DEFAULT) \
  }

#endif  // COHORT_GRAPH_TYPES_H_
