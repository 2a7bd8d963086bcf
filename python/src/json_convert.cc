#include "python/src/json_convert.h"

#include <string>

#include "absl/strings/numbers.h"

namespace py = pybind11;

namespace cohort::python {

nlohmann::ordered_json ToJson(py::handle value, const std::string& what) {
  if (value.is_none()) return nullptr;
  // bool before int: Python's bool is an int.
  if (py::isinstance<py::bool_>(value)) return value.cast<bool>();
  if (py::isinstance<py::int_>(value)) return value.cast<int64_t>();
  if (py::isinstance<py::float_>(value)) return value.cast<double>();
  if (py::isinstance<py::str>(value)) return value.cast<std::string>();
  if (py::isinstance<py::dict>(value)) {
    nlohmann::ordered_json out = nlohmann::ordered_json::object();
    for (auto [k, v] : value.cast<py::dict>()) {
      std::string key = py::isinstance<py::str>(k)
                            ? k.cast<std::string>()
                            : py::str(k).cast<std::string>();
      out[key] = ToJson(v, what);
    }
    return out;
  }
  if (py::isinstance<py::list>(value) || py::isinstance<py::tuple>(value)) {
    nlohmann::ordered_json out = nlohmann::ordered_json::array();
    for (py::handle item : value) out.push_back(ToJson(item, what));
    return out;
  }
  throw py::type_error(
      what + ": expected dict, list, str, int, float, bool or None, got " +
      py::str(py::type::of(value).attr("__name__")).cast<std::string>());
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
