#include "cohort/graph/cancellation.h"

#include <vector>

namespace cohort {

void CancellationManager::StartCancel() {
  absl::flat_hash_map<CancellationToken, CancelCallback> callbacks;
  {
    absl::MutexLock lock(&mu_);
    if (cancelled_) return;
    cancelled_ = true;
    callbacks.swap(callbacks_);
  }
  for (auto& [token, cb] : callbacks) cb();
  absl::MutexLock lock(&mu_);
  callbacks_done_ = true;
}

bool CancellationManager::RegisterCallback(CancellationToken token,
                                           CancelCallback callback) {
  absl::MutexLock lock(&mu_);
  if (cancelled_) return false;
  callbacks_.emplace(token, std::move(callback));
  return true;
}

bool CancellationManager::DeregisterCallback(CancellationToken token) {
  absl::MutexLock lock(&mu_);
  if (!cancelled_) {
    callbacks_.erase(token);
    return true;
  }
  // Cancellation is running or done: wait until callbacks have finished.
  mu_.Await(absl::Condition(&callbacks_done_));
  return false;
}

}  // namespace cohort
