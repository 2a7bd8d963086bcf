#include "python/src/status.h"

#include <pthread.h>

#include <chrono>
#include <string>
#include <thread>

#include "absl/time/time.h"

namespace py = pybind11;

namespace cohort::python {

void ThrowStatus(const absl::Status& status) {
  py::object errors = py::module_::import("cohort.errors");
  py::object error = errors.attr("_from_code")(static_cast<int>(status.code()),
                                               std::string(status.message()));
  PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(error.ptr())),
                  error.ptr());
  throw py::error_already_set();
}

void RunInterruptible(std::function<void()> call,
                      std::function<void()> cancel) {
  // Before the thread starts: this runs Python, which may raise.
  // Python runs signal handlers only in the main thread. Other threads do
  // not poll: a daemon thread that takes the GIL while the interpreter
  // finalizes is ended by pthread_exit, which aborts the process.
  const bool main_thread =
      PyThread_get_thread_ident() ==
      py::module_::import("threading")
          .attr("main_thread")()
          .attr("ident")
          .cast<unsigned long>();  // NOLINT(runtime/int): Python's type.
  auto done = std::make_shared<absl::Notification>();
  std::thread worker([call = std::move(call), done] {
    // The name is set before the call starts (see status.h). At most 15
    // characters; a failure only loses the name.
    pthread_setname_np(pthread_self(), "cohort-pycall");
    call();
    done->Notify();
  });
  bool interrupted = false;
  {
    py::gil_scoped_release release;
    if (!main_thread) done->WaitForNotification();
    while (!done->WaitForNotificationWithTimeout(absl::Milliseconds(50))) {
      py::gil_scoped_acquire acquire;
      if (PyErr_CheckSignals() != 0) {
        interrupted = true;
        break;
      }
    }
  }
  if (!interrupted) {
    worker.join();
    return;
  }
  // The signal handler raised (KeyboardInterrupt): stop the call and leave
  // it to finish on its own; everything it uses is shared with it.
  if (cancel) {
    py::gil_scoped_release release;
    cancel();
  }
  worker.detach();
  throw py::error_already_set();
}

void CallInterruptible(std::function<absl::Status()> call,
                       std::function<void()> cancel) {
  auto result = std::make_shared<absl::Status>();
  RunInterruptible([call = std::move(call), result] { *result = call(); },
                   std::move(cancel));
  ThrowIfError(*result);
}

void CallWithoutGil(const std::function<absl::Status()>& call) {
  absl::Status status;
  {
    py::gil_scoped_release release;
    status = call();
  }
  ThrowIfError(status);
}

}  // namespace cohort::python
