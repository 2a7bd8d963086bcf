// Names the tasks that went silent before the coordination service declares
// them lost. Across hosts, a task whose heartbeats stop is most often on a
// partitioned or stalled host that comes back; the cluster launcher gives
// such a task a grace (its services' heartbeat timeout is the launcher's
// heartbeat timeout plus --partition-grace), and this watch says, at the
// heartbeat timeout, who is silent, where it runs and when it will be
// declared lost, and again when it is heard from.
//
//   SilenceWatch watch(env, {{control, launchers}},
//                      absl::Seconds(10), absl::Seconds(70), message);
//   watch.Start();   // checks every silent_after / 4; the destructor stops it
//
// Lines:
//   "launcher:2 (worker:0) on 10.77.0.3 has sent no heartbeat for 10s: its
//    host may be partitioned, stalled or down; it is declared lost 1m10s
//    after its last heartbeat unless it is heard from (...)"
//   "launcher:2 (worker:0) on 10.77.0.3 is heard from again after 23s of
//    silence"
//
// Thread safety: Check() and the watch's thread may run concurrently;
// `message` is called from either, one line at a time.
#ifndef COHORT_LAUNCH_SILENCE_WATCH_H_
#define COHORT_LAUNCH_SILENCE_WATCH_H_

#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "cohort/base/env.h"
#include "cohort/coord/coordination_service.h"

namespace cohort::launch {

class SilenceWatch {
 public:
  struct Watched {
    coord::CoordinationService* service;  // must outlive the watch
    // Each watched task and how the lines name it
    // ("launcher:2 (worker:0) on 10.77.0.3").
    std::vector<std::pair<coord::TaskId, std::string>> tasks;
    // Silent after this long without a heartbeat; 0: the watch's
    // silent_after. (Programs heartbeat at their server's own interval.)
    absl::Duration silent_after = absl::ZeroDuration();
  };

  SilenceWatch(Env* env, std::vector<Watched> watched,
               absl::Duration silent_after, absl::Duration lost_after,
               std::function<void(const std::string&)> message);
  ~SilenceWatch();
  SilenceWatch(const SilenceWatch&) = delete;
  SilenceWatch& operator=(const SilenceWatch&) = delete;

  // Starts the thread that calls Check() every silent_after / 4 (at least
  // every second).
  void Start();
  // One look at every watched task's heartbeat age: a connected task whose
  // age crossed silent_after is named once; a named task that is heard from
  // again (a fresh heartbeat, or registered anew) is named once more.
  void Check();

 private:
  void Loop();

  Env* const env_;
  const std::vector<Watched> watched_;
  const absl::Duration silent_after_;
  const absl::Duration lost_after_;
  const std::function<void(const std::string&)> message_;

  absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  // Task name -> when it was found silent (its last heartbeat).
  std::map<std::string, absl::Time> silent_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace cohort::launch

#endif  // COHORT_LAUNCH_SILENCE_WATCH_H_
