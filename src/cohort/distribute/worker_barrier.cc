#include "cohort/distribute/worker_barrier.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "cohort/base/env.h"
#include "cohort/base/status.h"
#include "cohort/coord/coordination_agent.h"

namespace cohort::distribute {

InProcessBarrier::InProcessBarrier(int size, absl::Duration timeout, Env* env)
    : timeout_(timeout),
      env_(env != nullptr ? env : Env::Default()),
      size_(size) {}

absl::Status InProcessBarrier::Wait() {
  absl::MutexLock lock(&mu_);
  const int64_t generation = generation_;
  if (++arrived_ >= size_) {
    arrived_ = 0;
    ++generation_;
    return absl::OkStatus();
  }
  // Waiting for the generation to change (not for arrived_ to reach zero)
  // keeps a fast thread that already arrived at the next use from being
  // mistaken for a late arrival at this one.
  auto released = [this, generation]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return generation_ != generation;
  };
  if (!env_->AwaitWithDeadline(&mu_, absl::Condition(&released),
                               env_->Now() + timeout_)) {
    const int arrived = arrived_;
    --arrived_;  // This thread no longer waits at this use.
    return absl::DeadlineExceededError(absl::StrCat(
        "WaitForOtherWorkers: ", arrived, " of ", size_,
        " worker threads arrived within ", absl::FormatDuration(timeout_),
        "; check that every worker_fn calls WaitForOtherWorkers() as often as "
        "the others and none of them is stuck"));
  }
  return absl::OkStatus();
}

void InProcessBarrier::Leave() {
  absl::MutexLock lock(&mu_);
  --size_;
  if (arrived_ > 0 && arrived_ >= size_) {
    arrived_ = 0;
    ++generation_;
  }
}

CoordinationBarrier::CoordinationBarrier(coord::CoordinationAgent* agent,
                                         std::vector<coord::TaskId> tasks,
                                         absl::Duration timeout)
    : agent_(agent), tasks_(std::move(tasks)), timeout_(timeout) {}

absl::Status CoordinationBarrier::Wait() {
  absl::Status s = agent_->WaitAtBarrier(kWorkerBarrierId, timeout_, tasks_);
  if (s.ok()) return s;
  // The service's message names the barrier and the tasks that had not
  // arrived; add who waited and what to check.
  return absl::Status(
      s.code(),
      absl::StrCat(agent_->task().ToString(),
                   ": WaitForOtherWorkers failed: ", s.message(),
                   ". Check that every chief and worker task runs the same "
                   "number of WaitForOtherWorkers() calls and is alive."));
}

}  // namespace cohort::distribute
