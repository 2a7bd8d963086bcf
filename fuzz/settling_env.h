// SettlingEnv: a FakeEnv for fuzz harnesses whose code under test runs
// deadlines on a timer thread (the coordination service's DeadlineTimer, the
// barrier coordinator's timer loop). AdvanceAndSettle() moves the fake clock
// and returns once that thread has fired everything that fell due, so an
// input behaves the same on every run instead of racing the timer.
//
// How: AwaitWithDeadline polls like FakeEnv's (every millisecond of real
// time, and at once when AdvanceAndSettle moves the clock) and, at each poll
// where the waiter's condition is false and its deadline lies ahead,
// records the clock reading. Such a poll, made with the waiter's mutex held,
// proves that the waiter has no change pending (no re-plan) and nothing
// due; one made at or after the advanced time means the timer has caught
// up.
//
// Thread safety: thread-safe. Meant for exactly one thread waiting in
// AwaitWithDeadline at a time (one timer thread per Env).
#ifndef COHORT_FUZZ_SETTLING_ENV_H_
#define COHORT_FUZZ_SETTLING_ENV_H_

#include <atomic>
#include <cstdint>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "cohort/base/fake_env.h"
#include "cohort/base/logging.h"

namespace cohort::fuzz {

class SettlingEnv : public FakeEnv {
 public:
  bool AwaitWithDeadline(absl::Mutex* mu, const absl::Condition& cond,
                         absl::Time deadline) override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    while (!cond.Eval()) {
      const absl::Time now = Now();
      if (now >= deadline) {
        absl::MutexLock lock(&idle_mu_);
        waiter_mu_ = nullptr;
        return false;
      }
      const uint64_t moves = clock_moves_.load();
      {
        absl::MutexLock lock(&idle_mu_);
        if (now > idle_at_) idle_at_ = now;
        waiter_mu_ = mu;
      }
      // Wakes on the waiter's own condition, or when AdvanceAndSettle moved
      // the clock and pokes `mu`.
      auto woken = [&cond, moves, this]() {
        return cond.Eval() || clock_moves_.load() != moves;
      };
      mu->AwaitWithTimeout(absl::Condition(&woken), absl::Milliseconds(1));
    }
    absl::MutexLock lock(&idle_mu_);
    waiter_mu_ = nullptr;
    return true;
  }

  // Moves the clock by `d`, then blocks until the timer thread has run
  // everything due at the new time and waits again. CHECK-fails when it
  // does not within 30 s of real time (a hung timer thread is a bug).
  void AdvanceAndSettle(absl::Duration d) {
    AdvanceTime(d);
    const absl::Time target = Now();
    clock_moves_.fetch_add(1);
    absl::Mutex* waiter_mu = nullptr;
    {
      absl::MutexLock lock(&idle_mu_);
      waiter_mu = waiter_mu_;
    }
    // Releasing the waiter's mutex makes it re-evaluate its condition, which
    // now holds (the caller keeps the waiter's owner alive meanwhile).
    if (waiter_mu != nullptr) {
      waiter_mu->Lock();
      waiter_mu->Unlock();
    }
    absl::MutexLock lock(&idle_mu_);
    auto caught_up = [this, target]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(idle_mu_) {
      return idle_at_ >= target;
    };
    COHORT_CHECK(idle_mu_.AwaitWithTimeout(absl::Condition(&caught_up),
                                           absl::Seconds(30)))
        << "the timer thread did not catch up with the fake clock in 30 s";
  }

 private:
  // Bumped by AdvanceAndSettle; publishes nothing else (the clock has its
  // own lock), it only wakes the waiter.
  std::atomic<uint64_t> clock_moves_{0};
  absl::Mutex idle_mu_;
  // The mutex the waiter holds while it polls; nullptr when none waits.
  absl::Mutex* waiter_mu_ ABSL_GUARDED_BY(idle_mu_) = nullptr;
  // The latest clock reading at which the waiter was idle.
  absl::Time idle_at_ ABSL_GUARDED_BY(idle_mu_) = absl::InfinitePast();
};

}  // namespace cohort::fuzz

#endif  // COHORT_FUZZ_SETTLING_ENV_H_
