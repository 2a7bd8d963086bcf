#include "cohort/base/backoff.h"

#include <algorithm>

namespace cohort {

Backoff::Backoff(absl::Duration initial, absl::Duration max, double jitter)
    : initial_(std::max(initial, absl::ZeroDuration())),
      max_(std::max(max, initial_)),
      jitter_(std::clamp(jitter, 0.0, 1.0)),
      current_(initial_) {}

absl::Duration Backoff::Next() {
  absl::Duration wait = current_;
  if (jitter_ > 0) {
    wait *= absl::Uniform(rng_, 1.0 - jitter_, 1.0 + jitter_);
  }
  current_ = std::min(current_ * 2, max_);
  return wait;
}

}  // namespace cohort
