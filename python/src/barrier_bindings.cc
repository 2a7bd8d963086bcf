// cohort.BarrierTaskContext: PySpark's barrier execution mode API for the
// tasks of `cohort launch`.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>
#include <vector>

#include "cohort/barrier/barrier_task_context.h"
#include "python/src/bindings.h"
#include "python/src/status.h"

namespace py = pybind11;

namespace cohort::python {

void DefineBarrier(py::module_& m) {
  using barrier::BarrierTaskContext;
  using barrier::TaskInfo;

  py::class_<TaskInfo>(m, "BarrierTaskInfo",
                       "One task of the gang (PySpark's BarrierTaskInfo).")
      .def_readonly("address", &TaskInfo::address,
                    "The task's address, host:port.")
      .def("__repr__", [](const TaskInfo& t) {
        return "BarrierTaskInfo(address='" + t.address + "')";
      });

  // The context lives until the process exits (BarrierTaskContext::Get), so
  // Python holds it without owning it.
  py::class_<BarrierTaskContext,
             std::unique_ptr<BarrierTaskContext, py::nodelete>>(
      m, "BarrierTaskContext", R"doc(
The gang of a barrier job: PySpark's pyspark.BarrierTaskContext.

    ctx = cohort.BarrierTaskContext.get()
    ctx.barrier()                       # every task of the gang arrives
    parts = ctx.allGather(f"rows={n}")  # every task's message, by partition

Blocking calls release the GIL; Ctrl-C interrupts them with
KeyboardInterrupt (the context is then cancelled: later syncs raise
CancelledError). A sync that times out raises DeadlineExceededError naming
the partitions that did not arrive.)doc")
      .def_static(
          "get", [] { return ValueOrThrow(BarrierTaskContext::Get()); },
          py::return_value_policy::reference,
          "The context of this task; FailedPreconditionError outside "
          "`cohort launch`, naming the missing variable.")
      .def(
          "barrier",
          [](BarrierTaskContext& ctx) {
            BarrierTaskContext* c = &ctx;
            CallInterruptible([c] { return c->Barrier(); },
                              [c] { c->Cancel(); });
          },
          "Waits until every task of the gang calls barrier().")
      .def(
          "allGather",
          [](BarrierTaskContext& ctx, const std::string& message) {
            BarrierTaskContext* c = &ctx;
            return CallInterruptible<std::vector<std::string>>(
                [c, message] { return c->AllGather(message); },
                [c] { c->Cancel(); });
          },
          py::arg("message") = "",
          "Like barrier(), and returns every task's message ordered by "
          "partition id.")
      .def("partitionId", &BarrierTaskContext::partition_id,
           "This task's partition id (0 .. numTasks() - 1).")
      .def("attemptNumber", &BarrierTaskContext::attempt_number,
           "How many times the gang was restarted before this attempt.")
      .def("numTasks", &BarrierTaskContext::num_tasks,
           "How many tasks the gang has.")
      .def("stageId", &BarrierTaskContext::stage_id)
      .def("taskAttemptId", &BarrierTaskContext::task_attempt_id)
      .def("getTaskInfos", &BarrierTaskContext::GetTaskInfos,
           "Every task of the gang, ordered by partition id.");
}

}  // namespace cohort::python
