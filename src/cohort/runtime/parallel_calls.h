// CallAll: starts `n` asynchronous calls (WorkerInterface style: each ends
// by calling its `done` exactly once, on any thread) and waits for every
// one of them; returns their statuses by index. The master uses it to fan a
// request out to tasks (discovery, registration, Reset, Close).
//
// Blocks until the last `done` ran; bound each call with CallOptions.
#ifndef COHORT_RUNTIME_PARALLEL_CALLS_H_
#define COHORT_RUNTIME_PARALLEL_CALLS_H_

#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/blocking_counter.h"
#include "cohort/runtime/worker_interface.h"

namespace cohort::runtime {

inline std::vector<absl::Status> CallAll(
    int n, const std::function<void(int i, StatusCallback done)>& start) {
  std::vector<absl::Status> statuses(n);
  absl::BlockingCounter pending(n);
  for (int i = 0; i < n; ++i) {
    start(i, [&statuses, &pending, i](const absl::Status& s) {
      statuses[i] = s;
      pending.DecrementCount();
    });
  }
  pending.Wait();
  return statuses;
}

}  // namespace cohort::runtime

#endif  // COHORT_RUNTIME_PARALLEL_CALLS_H_
