#include "cohort/base/deadline_timer.h"

#include <vector>

namespace cohort {

DeadlineTimer::DeadlineTimer(Env* env) : env_(env) {
  thread_ = std::thread([this] { Loop(); });
}

DeadlineTimer::~DeadlineTimer() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
}

uint64_t DeadlineTimer::Schedule(absl::Time when, std::function<void()> fn) {
  absl::MutexLock lock(&mu_);
  const uint64_t id = next_id_++;
  if (queue_.empty() || when < queue_.begin()->first) changed_ = true;
  queue_.emplace(when, std::make_pair(id, std::move(fn)));
  when_[id] = when;
  return id;
}

bool DeadlineTimer::Cancel(uint64_t id) {
  absl::MutexLock lock(&mu_);
  auto it = when_.find(id);
  if (it == when_.end()) return false;
  auto range = queue_.equal_range(it->second);
  for (auto q = range.first; q != range.second; ++q) {
    if (q->second.first == id) {
      queue_.erase(q);
      break;
    }
  }
  when_.erase(it);
  return true;
}

void DeadlineTimer::Loop() {
  absl::MutexLock lock(&mu_);
  while (!stop_) {
    const absl::Time next =
        queue_.empty() ? absl::InfiniteFuture() : queue_.begin()->first;
    changed_ = false;
    auto woken = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return stop_ || changed_;
    };
    if (next > env_->Now()) {
      env_->AwaitWithDeadline(&mu_, absl::Condition(&woken), next);
      continue;  // Re-evaluate: stopped, a new earlier entry, or due.
    }
    std::vector<std::function<void()>> due;
    const absl::Time now = env_->Now();
    while (!queue_.empty() && queue_.begin()->first <= now) {
      when_.erase(queue_.begin()->second.first);
      due.push_back(std::move(queue_.begin()->second.second));
      queue_.erase(queue_.begin());
    }
    mu_.Unlock();
    for (auto& fn : due) fn();
    due.clear();
    mu_.Lock();
  }
}

}  // namespace cohort
