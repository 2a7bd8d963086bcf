// Status -> Python exception, and blocking calls that release the GIL and
// still answer Ctrl-C.
//
// Every error of the C++ side reaches Python as the exception class of its
// status code (cohort.errors: InvalidArgumentError, DeadlineExceededError,
// ...), with the C++ message unchanged; cohort.errors.CohortError is the
// base of all of them.
#ifndef COHORT_PYTHON_SRC_STATUS_H_
#define COHORT_PYTHON_SRC_STATUS_H_

#include <pybind11/pybind11.h>

#include <functional>
#include <memory>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"

namespace cohort::python {

// Sets the Python error for `status` (not OK) and throws
// pybind11::error_already_set. Call with the GIL held.
[[noreturn]] void ThrowStatus(const absl::Status& status);

inline void ThrowIfError(const absl::Status& status) {
  if (!status.ok()) ThrowStatus(status);
}

template <typename T>
T ValueOrThrow(absl::StatusOr<T> value) {
  if (!value.ok()) ThrowStatus(value.status());
  return *std::move(value);
}

// Runs `call` on its own thread with the GIL released, and waits for it
// while checking for signals every 50 ms (in the main thread; other threads
// wait without taking the GIL: they never see signals). On a pending signal
// (Ctrl-C: KeyboardInterrupt) `cancel` runs — it must make `call` return soon,
// or be empty when the call ends by its own deadline — and the Python exception
// is raised without waiting for `call`: `call` must own (share) everything
// it touches. Called with the GIL held. The thread is named "cohort-pycall"
// (/proc/<pid>/task/<tid>/comm) while the call runs: it shows in a debugger
// or `top -H` which thread holds a blocked call, and lets a test send
// SIGINT only once a call is certainly in flight.
void RunInterruptible(std::function<void()> call, std::function<void()> cancel);

// RunInterruptible for a call that returns a StatusOr<T> or a Status.
template <typename T>
T CallInterruptible(std::function<absl::StatusOr<T>()> call,
                    std::function<void()> cancel = nullptr) {
  auto result = std::make_shared<absl::StatusOr<T>>(absl::UnknownError(""));
  RunInterruptible([call = std::move(call), result] { *result = call(); },
                   std::move(cancel));
  return ValueOrThrow(std::move(*result));
}
void CallInterruptible(std::function<absl::Status()> call,
                       std::function<void()> cancel = nullptr);

// Runs `call` on this thread with the GIL released (for calls that end by
// themselves soon: start, stop, close) and raises its error.
void CallWithoutGil(const std::function<absl::Status()>& call);

}  // namespace cohort::python

#endif  // COHORT_PYTHON_SRC_STATUS_H_
