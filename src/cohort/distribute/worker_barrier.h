// WorkerBarrier: what WorkerContext::WaitForOtherWorkers waits at
// (docs/distribute.md). Two kinds:
//
//  - InProcessBarrier: the STANDALONE_CLIENT between-graph barrier among the
//    worker threads of one client process (TensorFlow's `_Barrier`),
//    reusable any number of times.
//  - CoordinationBarrier: the INDEPENDENT_WORKER barrier among the chief and
//    worker tasks of a job, each its own process, through the job's
//    coordination service (CoordinationAgent::WaitAtBarrier), with a
//    deadline.
//
// Thread safety: thread-safe.
#ifndef COHORT_DISTRIBUTE_WORKER_BARRIER_H_
#define COHORT_DISTRIBUTE_WORKER_BARRIER_H_

#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "cohort/coord/coordination_service.h"

namespace cohort {
class Env;
}  // namespace cohort

namespace cohort::coord {
class CoordinationAgent;
}  // namespace cohort::coord

namespace cohort::distribute {

class WorkerBarrier {
 public:
  virtual ~WorkerBarrier() = default;
  // Blocks until every participant called Wait for this use of the barrier.
  virtual absl::Status Wait() = 0;
};

// A reusable barrier of `size` threads. Each use releases when `size`
// threads arrived; the next use starts at once (a generation counter: a
// thread that races ahead to the next use never releases the previous one).
class InProcessBarrier : public WorkerBarrier {
 public:
  // `env` (null = Env::Default()) is the clock of the timeout.
  explicit InProcessBarrier(int size,
                            absl::Duration timeout = absl::Minutes(30),
                            Env* env = nullptr);

  // Blocks until all current participants arrived. DeadlineExceeded after
  // `timeout`, saying how many of how many arrived; the thread then no
  // longer counts as arrived.
  absl::Status Wait() override;
  // A participant that will never wait again (its worker_fn returned, maybe
  // with an error) leaves: the barrier shrinks by one, and a use that was
  // waiting only for it is released. Without this, a failed worker thread
  // would hang every other thread at its next Wait.
  void Leave();

 private:
  const absl::Duration timeout_;
  Env* const env_;
  absl::Mutex mu_;
  int size_ ABSL_GUARDED_BY(mu_);
  int arrived_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
};

// The barrier "worker_barrier" of the coordination service over `tasks`
// (every chief and worker task of the job). Reusable: the agent numbers the
// uses, so every task must call Wait the same number of times.
class CoordinationBarrier : public WorkerBarrier {
 public:
  // `agent` (connected, not owned) must outlive the barrier.
  CoordinationBarrier(coord::CoordinationAgent* agent,
                      std::vector<coord::TaskId> tasks, absl::Duration timeout);

  // Blocks until every task of `tasks` arrived, or `timeout`.
  // Errors: DeadlineExceeded naming the tasks that had not arrived (the
  // service's message) with what to check; the agent's error when it is in
  // ERROR (FailedPrecondition) or the service is unreachable.
  absl::Status Wait() override;

 private:
  coord::CoordinationAgent* const agent_;
  const std::vector<coord::TaskId> tasks_;
  const absl::Duration timeout_;
};

// The barrier id CoordinationBarrier uses at the service.
inline constexpr char kWorkerBarrierId[] = "worker_barrier";

}  // namespace cohort::distribute

#endif  // COHORT_DISTRIBUTE_WORKER_BARRIER_H_
