#include "cohort/training/coordinator.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "cohort/base/env.h"

namespace cohort::training {

Coordinator::Coordinator(Env* env)
    : env_(env != nullptr ? env : Env::Default()) {}

Coordinator::~Coordinator() {
  RequestStop();
  std::vector<std::thread> threads;
  {
    absl::MutexLock lock(&mu_);
    threads.swap(threads_);
  }
  for (auto& t : threads) t.join();
}

void Coordinator::RequestStop(const absl::Status& status) {
  absl::MutexLock lock(&mu_);
  stop_ = true;
  if (exception_.ok() && !status.ok()) exception_ = status;
}

bool Coordinator::ShouldStop() const {
  absl::MutexLock lock(&mu_);
  return stop_;
}

absl::Status Coordinator::RaiseRequestedException() const {
  absl::MutexLock lock(&mu_);
  return exception_;
}

void Coordinator::StartThread(std::function<void()> fn) {
  absl::MutexLock lock(&mu_);
  ++running_;
  threads_.emplace_back([this, fn = std::move(fn)] {
    fn();
    absl::MutexLock done(&mu_);
    --running_;
  });
}

absl::Status Coordinator::Join(absl::Duration grace) {
  RequestStop();
  std::vector<std::thread> threads;
  {
    absl::MutexLock lock(&mu_);
    auto all_done = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return running_ == 0;
    };
    // No thread running: nothing to wait for (and no wait on the clock).
    if (!all_done() &&
        !env_->AwaitWithDeadline(&mu_, absl::Condition(&all_done),
                                 env_->Now() + grace)) {
      return absl::DeadlineExceededError(
          absl::StrCat("Coordinator stopped with ", running_,
                       " thread(s) still running after the grace period of ",
                       absl::FormatDuration(grace)));
    }
    threads.swap(threads_);
  }
  // Every thread has returned from its function; join without the lock.
  for (auto& t : threads) t.join();
  return RaiseRequestedException();
}

}  // namespace cohort::training
