// StepThreadPool: the threads that run RunGraph steps on a worker.
//
// Executor::Run blocks its thread until the step ends, which includes
// waiting for tensors from other tasks. A fixed pool could therefore fill
// up with steps that wait on steps still queued behind them (on this or
// another task), and the device's own pool must stay free for kernels. So
// this pool grows: Schedule starts a new thread whenever no thread is idle,
// and idle threads stay for reuse. The number of threads is the peak number
// of concurrent steps.
//
// Thread safety: thread-safe. The destructor runs every queued closure and
// joins the threads; closures must not destroy the pool.
#ifndef COHORT_RUNTIME_WORKER_THREAD_POOL_H_
#define COHORT_RUNTIME_WORKER_THREAD_POOL_H_

#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace cohort::runtime {

class StepThreadPool {
 public:
  StepThreadPool() = default;
  ~StepThreadPool();
  StepThreadPool(const StepThreadPool&) = delete;
  StepThreadPool& operator=(const StepThreadPool&) = delete;

  // Runs `fn` on a pool thread soon. Never blocks (may start a thread).
  void Schedule(std::function<void()> fn);
  // Threads started so far (for tests).
  int num_threads() const;

 private:
  void WorkerLoop();

  mutable absl::Mutex mu_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  int idle_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_ ABSL_GUARDED_BY(mu_);
};

}  // namespace cohort::runtime

#endif  // COHORT_RUNTIME_WORKER_THREAD_POOL_H_
