// Coordinator: a stop flag with the error that raised it, shared by the
// threads of one training session (a minimal tf.train.Coordinator).
// MonitoredSession makes a new one for every session it creates and hands
// it to hooks' AfterCreateSession; hooks may start threads through it.
//
//   coord->StartThread([coord] { while (!coord->ShouldStop()) Work(); });
//   ...
//   coord->RequestStop(absl::UnavailableError("ps:0 lost"));
//   coord->Join(absl::Seconds(120));
//
// Thread safety: thread-safe.
#ifndef COHORT_TRAINING_COORDINATOR_H_
#define COHORT_TRAINING_COORDINATOR_H_

#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace cohort {
class Env;
}

namespace cohort::training {

class Coordinator {
 public:
  // `env` (null = Env::Default()) is the clock Join waits on.
  explicit Coordinator(Env* env = nullptr);
  // Joins every started thread (blocks until they return).
  ~Coordinator();
  Coordinator(const Coordinator&) = delete;
  Coordinator& operator=(const Coordinator&) = delete;

  // Asks every thread to stop. The first non-OK status is kept and
  // returned by RaiseRequestedException; later ones are ignored.
  void RequestStop(const absl::Status& status = absl::OkStatus());
  bool ShouldStop() const;
  // The status given to the first RequestStop that had one; OK otherwise.
  absl::Status RaiseRequestedException() const;

  // Runs `fn` on a new thread tracked by Join.
  void StartThread(std::function<void()> fn);
  // Requests stop, then waits up to `grace` (this Env's clock) for the
  // started threads to return. Returns the requested exception, or
  // DeadlineExceeded naming how many threads still run after `grace`
  // (they are joined by the destructor).
  absl::Status Join(absl::Duration grace);

 private:
  Env* const env_;
  mutable absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status exception_ ABSL_GUARDED_BY(mu_);
  int running_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::thread> threads_ ABSL_GUARDED_BY(mu_);
};

}  // namespace cohort::training

#endif  // COHORT_TRAINING_COORDINATOR_H_
