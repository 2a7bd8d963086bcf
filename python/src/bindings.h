// The parts of the _cohort extension module, one function per area.
#ifndef COHORT_PYTHON_SRC_BINDINGS_H_
#define COHORT_PYTHON_SRC_BINDINGS_H_

#include <pybind11/pybind11.h>

#include "cohort/cluster/cluster_spec.h"

namespace cohort::python {

void DefineCluster(pybind11::module_& m);       // cluster_bindings.cc
void DefineBarrier(pybind11::module_& m);       // barrier_bindings.cc
void DefineCoordination(pybind11::module_& m);  // coordination_bindings.cc
void DefineRuntime(pybind11::module_& m);       // runtime_bindings.cc

// A cohort.ClusterSpec or a dict {job: [address, ...] or {index: address}}
// as a ClusterSpec; TypeError or InvalidArgumentError naming the problem.
ClusterSpec SpecFromPython(pybind11::handle cluster);

}  // namespace cohort::python

#endif  // COHORT_PYTHON_SRC_BINDINGS_H_
