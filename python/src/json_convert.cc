#include "python/src/json_convert.h"

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "python/src/status.h"

namespace py = pybind11;

namespace cohort::python {
namespace {

// Deeper input is refused (a dict that contains itself would otherwise
// recurse until the C++ stack overflows); a cluster nests 3 levels.
constexpr int kMaxDepth = 32;

nlohmann::ordered_json ToJsonAt(py::handle value, const std::string& what,
                                int depth) {
  if (depth > kMaxDepth) {
    ThrowStatus(absl::InvalidArgumentError(
        absl::StrCat(what, ": nested more than ", kMaxDepth,
                     " levels deep (does it contain itself?)")));
  }
  if (value.is_none()) return nullptr;
  // bool before int: Python's bool is an int.
  if (py::isinstance<py::bool_>(value)) return value.cast<bool>();
  if (py::isinstance<py::int_>(value)) {
    const int64_t v = PyLong_AsLongLong(value.ptr());
    if (v == -1 && PyErr_Occurred() != nullptr) {
      PyErr_Clear();
      ThrowStatus(absl::InvalidArgumentError(absl::StrCat(
          what, ": the integer ", py::str(value).cast<std::string>(),
          " does not fit in 64 bits")));
    }
    return v;
  }
  if (py::isinstance<py::float_>(value)) return value.cast<double>();
  if (py::isinstance<py::str>(value)) return value.cast<std::string>();
  if (py::isinstance<py::dict>(value)) {
    nlohmann::ordered_json out = nlohmann::ordered_json::object();
    for (auto [k, v] : value.cast<py::dict>()) {
      std::string key = py::isinstance<py::str>(k)
                            ? k.cast<std::string>()
                            : py::str(k).cast<std::string>();
      if (out.contains(key)) {
        // {0: a, "0": b}: both keys are "0" in JSON; neither may win.
        ThrowStatus(absl::InvalidArgumentError(absl::StrCat(
            what, ": two keys of one dict are both \"", key, "\"")));
      }
      out[key] = ToJsonAt(v, what, depth + 1);
    }
    return out;
  }
  if (py::isinstance<py::list>(value) || py::isinstance<py::tuple>(value)) {
    nlohmann::ordered_json out = nlohmann::ordered_json::array();
    for (py::handle item : value) {
      out.push_back(ToJsonAt(item, what, depth + 1));
    }
    return out;
  }
  throw py::type_error(
      what + ": expected dict, list, str, int, float, bool or None, got " +
      py::str(py::type::of(value).attr("__name__")).cast<std::string>());
}

}  // namespace

nlohmann::ordered_json ToJson(py::handle value, const std::string& what) {
  return ToJsonAt(value, what, 0);
}

template <typename JsonT>
py::object FromJson(const JsonT& value, int int_keys_at_depth, int depth) {
  if (value.is_null()) return py::none();
  if (value.is_boolean()) return py::bool_(value.template get<bool>());
  if (value.is_number_integer()) {
    return py::int_(value.template get<int64_t>());
  }
  if (value.is_number()) return py::float_(value.template get<double>());
  if (value.is_string()) return py::str(value.template get<std::string>());
  if (value.is_array()) {
    py::list out;
    for (const auto& item : value) {
      out.append(FromJson(item, int_keys_at_depth, depth + 1));
    }
    return out;
  }
  py::dict out;
  for (auto it = value.begin(); it != value.end(); ++it) {
    py::object v = FromJson(it.value(), int_keys_at_depth, depth + 1);
    int index;
    if (depth == int_keys_at_depth && absl::SimpleAtoi(it.key(), &index)) {
      out[py::int_(index)] = v;
    } else {
      out[py::str(it.key())] = v;
    }
  }
  return out;
}

template py::object FromJson(const nlohmann::json&, int, int);
template py::object FromJson(const nlohmann::ordered_json&, int, int);

}  // namespace cohort::python
