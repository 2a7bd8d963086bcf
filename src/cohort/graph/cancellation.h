// CancellationManager: lets a step (or anything long-running) be cancelled,
// running registered callbacks once.
//
// Contract: StartCancel() runs every registered callback exactly once, on
// the cancelling thread, outside the manager's lock; callbacks registered
// after cancellation are refused (RegisterCallback returns false, and the
// caller must act as cancelled). DeregisterCallback returns false when the
// callback is running or has run; it then blocks until that callback has
// finished, so the caller may free what the callback uses.
//
// Thread safety: thread-safe.
#ifndef COHORT_GRAPH_CANCELLATION_H_
#define COHORT_GRAPH_CANCELLATION_H_

#include <cstdint>
#include <functional>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"

namespace cohort {

using CancellationToken = int64_t;
using CancelCallback = std::function<void()>;

class CancellationManager {
 public:
  CancellationManager() = default;
  CancellationManager(const CancellationManager&) = delete;
  CancellationManager& operator=(const CancellationManager&) = delete;

  // Cancels; idempotent. Blocks while callbacks run.
  void StartCancel();
  bool IsCancelled() const {
    absl::MutexLock lock(&mu_);
    return cancelled_;
  }
  CancellationToken GetCancellationToken() {
    absl::MutexLock lock(&mu_);
    return next_token_++;
  }
  // False (callback not stored) when already cancelled. Non-blocking.
  bool RegisterCallback(CancellationToken token, CancelCallback callback);
  // True when removed before running; see the file comment.
  bool DeregisterCallback(CancellationToken token);

 private:
  mutable absl::Mutex mu_;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  bool callbacks_done_ ABSL_GUARDED_BY(mu_) = false;
  CancellationToken next_token_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<CancellationToken, CancelCallback> callbacks_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace cohort

#endif  // COHORT_GRAPH_CANCELLATION_H_
