// The _cohort extension module; the package cohort/__init__.py re-exports
// its names.
#include <pybind11/pybind11.h>

#include "python/src/bindings.h"

PYBIND11_MODULE(_cohort, m) {
  m.doc() = "cohort's C++ runtime (import cohort, not this module)";
  cohort::python::DefineCluster(m);
  cohort::python::DefineBarrier(m);
  cohort::python::DefineCoordination(m);
  cohort::python::DefineRuntime(m);
}
