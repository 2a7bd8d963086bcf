#include "cohort/coord/coordination_client.h"

namespace cohort::coord {

void CallCancellation::Cancel() {
  std::function<void()> canceller;
  {
    absl::MutexLock lock(&mu_);
    if (cancelled_) return;
    cancelled_ = true;
    canceller = std::move(canceller_);
  }
  if (canceller) canceller();
}

void CallCancellation::SetCanceller(std::function<void()> canceller) {
  {
    absl::MutexLock lock(&mu_);
    if (!cancelled_) {
      canceller_ = std::move(canceller);
      return;
    }
  }
  canceller();
}

bool CallCancellation::cancelled() {
  absl::MutexLock lock(&mu_);
  return cancelled_;
}

}  // namespace cohort::coord
