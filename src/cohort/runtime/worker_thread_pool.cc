#include "cohort/runtime/worker_thread_pool.h"

#include <utility>

namespace cohort::runtime {

StepThreadPool::~StepThreadPool() {
  std::vector<std::thread> threads;
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
    threads.swap(threads_);
  }
  // Threads drain the queue before they see stop_ (WorkerLoop), so nothing
  // scheduled is lost.
  for (auto& t : threads) t.join();
}

void StepThreadPool::Schedule(std::function<void()> fn) {
  absl::MutexLock lock(&mu_);
  queue_.push_back(std::move(fn));
  // Every queued closure needs a thread of its own: it may block until a
  // later closure runs (see the header).
  if (static_cast<size_t>(idle_) < queue_.size()) {
    threads_.emplace_back([this] { WorkerLoop(); });
  }
}

int StepThreadPool::num_threads() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(threads_.size());
}

void StepThreadPool::WorkerLoop() {
  while (true) {
    std::function<void()> fn;
    {
      absl::MutexLock lock(&mu_);
      ++idle_;
      mu_.Await(absl::Condition(
          +[](StepThreadPool* p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(p->mu_) {
            return !p->queue_.empty() || p->stop_;
          },
          this));
      --idle_;
      if (queue_.empty()) return;  // stop_ and nothing left to run.
      fn = std::move(queue_.front());
      queue_.pop_front();
    }
    // The closure and its captures are released outside the lock.
    fn();
  }
}

}  // namespace cohort::runtime
