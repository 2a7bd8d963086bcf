// Python objects <-> JSON values (dict, list, str, int, float, bool, None),
// for the parts of the API whose C++ side speaks JSON (ClusterSpec's dict
// form, resolve()).
#ifndef COHORT_PYTHON_SRC_JSON_CONVERT_H_
#define COHORT_PYTHON_SRC_JSON_CONVERT_H_

#include <pybind11/pybind11.h>

#include <string>

#include "nlohmann/json.hpp"

namespace cohort::python {

// Keys of dicts become strings (int keys in decimal); dict order is kept.
// Other types raise TypeError naming `what` and the type.
nlohmann::ordered_json ToJson(pybind11::handle value, const std::string& what);

// Objects become dicts whose keys stay strings, except where
// `int_keys_at_depth` is the depth (0 = top level) of an object whose keys
// are all decimal integers: those become ints (a sparse job's task map).
template <typename JsonT>
pybind11::object FromJson(const JsonT& value, int int_keys_at_depth = -1,
                          int depth = 0);

}  // namespace cohort::python

#endif  // COHORT_PYTHON_SRC_JSON_CONVERT_H_
