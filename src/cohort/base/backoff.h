// Backoff: the waits between retries of one operation. Each wait doubles,
// from `initial` up to `max`; with `jitter` j > 0 each wait is scaled by a
// random factor in [1 - j, 1 + j], so that many clients retrying after the
// same failure (a coordinator restarting, a ps coming back) spread out
// instead of arriving together.
//
//   Backoff backoff(absl::Milliseconds(50), absl::Seconds(1), /*jitter=*/0.5);
//   while (!(s = Call()).ok() && IsTransient(s)) {
//     env->SleepFor(std::min(backoff.Next(), deadline - env->Now()));
//   }
//
// The caller owns the deadline and the sleeping (through its Env, so that
// tests run on a fake clock); Backoff only says how long.
//
// Thread safety: thread-compatible (one retry loop owns one Backoff).
#ifndef COHORT_BASE_BACKOFF_H_
#define COHORT_BASE_BACKOFF_H_

#include "absl/random/random.h"
#include "absl/time/time.h"

namespace cohort {

class Backoff {
 public:
  // `jitter` is clamped to [0, 1], a negative `initial` to zero, and a
  // `max` below `initial` to `initial`.
  Backoff(absl::Duration initial, absl::Duration max, double jitter = 0);

  // The wait before the next retry (the current wait, jittered); the wait
  // after it is twice as long, up to `max`.
  absl::Duration Next();

  // The wait Next() will scale, without jitter and without advancing: for a
  // caller that must decide whether one more wait still fits its budget.
  absl::Duration current() const { return current_; }

  // Back to `initial`, after a success ends a run of failures.
  void Reset() { current_ = initial_; }

 private:
  const absl::Duration initial_;
  const absl::Duration max_;
  const double jitter_;
  absl::Duration current_;
  absl::BitGen rng_;
};

}  // namespace cohort

#endif  // COHORT_BASE_BACKOFF_H_
