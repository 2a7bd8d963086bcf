// DeadlineTimer: runs callbacks at instants of an Env's clock; the one timer
// engine of the project.
//
// The coordination service fires heartbeat checks, barrier deadlines and the
// deadlines of parked gets and watches with one, the barrier coordinator its
// sync timeouts, a worker its RecvTensor deadlines: each at the exact instant
// it falls due (on a FakeEnv, as soon as the fake clock passes it), rather
// than from a periodic scan.
//
// Callbacks run on the timer's own thread, one at a time and in deadline
// order, with no timer lock held; they must not block (they finish RPCs and
// queue work). A callback may Schedule or Cancel on its own timer.
//
// Thread safety: thread-safe.
#ifndef COHORT_BASE_DEADLINE_TIMER_H_
#define COHORT_BASE_DEADLINE_TIMER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <thread>
#include <utility>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "cohort/base/env.h"

namespace cohort {

class DeadlineTimer {
 public:
  explicit DeadlineTimer(Env* env);
  // Stops the thread; callbacks not yet run are dropped.
  ~DeadlineTimer();
  DeadlineTimer(const DeadlineTimer&) = delete;
  DeadlineTimer& operator=(const DeadlineTimer&) = delete;

  // Runs `fn` once Now() >= `when`. Returns an id for Cancel (never 0).
  // Non-blocking.
  uint64_t Schedule(absl::Time when, std::function<void()> fn);
  // Drops a callback that has not started. Returns whether it was dropped.
  bool Cancel(uint64_t id);

 private:
  void Loop();

  Env* const env_;
  absl::Mutex mu_;
  std::multimap<absl::Time, std::pair<uint64_t, std::function<void()>>> queue_
      ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, absl::Time> when_ ABSL_GUARDED_BY(mu_);
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  bool changed_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace cohort

#endif  // COHORT_BASE_DEADLINE_TIMER_H_
