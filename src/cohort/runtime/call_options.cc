#include "cohort/runtime/call_options.h"

#include <utility>

#include "absl/base/const_init.h"
#include "absl/random/random.h"

namespace cohort::runtime {

void CallOptions::StartCancel() {
  std::function<void()> fn;
  {
    absl::MutexLock lock(&mu_);
    if (cancelled_) return;
    cancelled_ = true;
    fn = std::move(cancel_fn_);
    cancel_fn_ = nullptr;
    if (fn) in_callback_ = true;
  }
  if (!fn) return;
  fn();
  absl::MutexLock lock(&mu_);
  in_callback_ = false;
}

void CallOptions::SetCancelCallback(std::function<void()> fn) {
  {
    absl::MutexLock lock(&mu_);
    if (!cancelled_) {
      cancel_fn_ = std::move(fn);
      return;
    }
  }
  fn();
}

void CallOptions::ClearCancelCallback() {
  absl::MutexLock lock(&mu_);
  cancel_fn_ = nullptr;
  // The callback may be running on StartCancel's thread: wait for it, so
  // that what it refers to can be freed once this returns.
  mu_.Await(absl::Condition(
      +[](bool* in_callback) { return !*in_callback; }, &in_callback_));
}

uint64_t RandomNonZeroId() {
  // One generator for the process: absl::BitGen is not thread-safe, and
  // seeding one per call would cost more than the lock.
  static absl::Mutex mu(absl::kConstInit);
  static absl::BitGen* gen = new absl::BitGen;
  absl::MutexLock lock(&mu);
  uint64_t id = 0;
  while (id == 0) id = absl::Uniform<uint64_t>(*gen);
  return id;
}

int64_t NewRequestId() {
  int64_t id = 0;
  while (id == 0) id = static_cast<int64_t>(RandomNonZeroId());
  return id;
}

}  // namespace cohort::runtime
