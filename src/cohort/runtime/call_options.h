// CallOptions: the deadline and the cancellation of one outgoing runtime
// call (master -> worker, worker -> worker), whichever transport carries it.
//
//   CallOptions opts;
//   opts.set_deadline(absl::Now() + absl::Seconds(5));
//   worker->RunGraphAsync(&opts, &req, &resp, done);
//   ...
//   opts.StartCancel();   // the call ends Cancelled (done still runs once)
//
// Contract: the implementation of a call registers a cancel callback for
// as long as the call runs (SetCancelCallback/ClearCancelCallback);
// StartCancel runs it at most once, also when it is registered after
// StartCancel was called. The CallOptions must outlive the call's `done`.
//
// Thread safety: thread-safe.
#ifndef COHORT_RUNTIME_CALL_OPTIONS_H_
#define COHORT_RUNTIME_CALL_OPTIONS_H_

#include <cstdint>
#include <functional>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace cohort::runtime {

class CallOptions {
 public:
  CallOptions() = default;
  CallOptions(const CallOptions&) = delete;
  CallOptions& operator=(const CallOptions&) = delete;

  // InfiniteFuture = no deadline.
  absl::Time deadline() const {
    absl::MutexLock lock(&mu_);
    return deadline_;
  }
  void set_deadline(absl::Time deadline) {
    absl::MutexLock lock(&mu_);
    deadline_ = deadline;
  }

  // Cancels the call: runs the registered callback (now or when one is
  // registered). Idempotent.
  void StartCancel();
  bool cancelled() const {
    absl::MutexLock lock(&mu_);
    return cancelled_;
  }

  // For implementations: `fn` is run by StartCancel (at once when the call
  // was already cancelled). Never call while holding a lock `fn` takes.
  void SetCancelCallback(std::function<void()> fn);
  // Removes the callback; if StartCancel is running it right now, waits
  // until it returned (so what it refers to may be freed afterwards).
  void ClearCancelCallback();

 private:
  mutable absl::Mutex mu_;
  absl::Time deadline_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  std::function<void()> cancel_fn_ ABSL_GUARDED_BY(mu_);
  bool in_callback_ ABSL_GUARDED_BY(mu_) = false;
};

// A fresh random non-zero id for a non-idempotent call (RunStep, RunGraph,
// RecvTensor...): a retry of the same call reuses it, so the callee can
// refuse the repeat (recent_request_ids.h). Thread-safe.
int64_t NewRequestId();

// A random non-zero 64-bit value (incarnations, session handles).
uint64_t RandomNonZeroId();

}  // namespace cohort::runtime

#endif  // COHORT_RUNTIME_CALL_OPTIONS_H_
