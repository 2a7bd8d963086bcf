// Test helpers of the training stack: captured log lines, a fake-clock
// driver, a counter model, and Session wrappers that share one session's
// variables (a stand-in for a ps) and inject errors.
//
// Thread safety: LogCapture and FaultPlan are thread-safe; the rest are
// used from one test thread.
#ifndef COHORT_TRAINING_TRAINING_TEST_UTIL_H_
#define COHORT_TRAINING_TRAINING_TEST_UTIL_H_

#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "cohort/base/fake_env.h"
#include "cohort/graph/builder.h"
#include "cohort/graph/session.h"
#include "cohort/training/session_factory.h"

namespace cohort::training::testing {

// Captures every log line while alive (one at a time per process).
class LogCapture {
 public:
  LogCapture();
  ~LogCapture();
  std::vector<std::string> Lines() const;
  // Lines containing `text`.
  int Count(const std::string& text) const;
};

// Runs `fn` on a thread; while it runs, advances `env` by `step` each time
// a thread is parked on it. Returns the total time advanced.
absl::Duration DriveClock(FakeEnv* env, absl::Duration step,
                          const std::function<void()>& fn);

// A fresh directory under TEST_TMPDIR or /tmp.
std::string TempDir(const std::string& name);
bool FileExists(const std::string& path);
std::string ReadFileOrDie(const std::string& path);

// global_step; w (float, 0); "train" increments both by 1; "x" a float
// placeholder and "x_out" = Identity(x).
void BuildCounterModel(const Scope& root);

// Scripted failures of Session::Run calls, shared by sessions.
class FaultPlan {
 public:
  // The next Run calls (of any session using this plan) return these.
  void FailNextRuns(std::vector<absl::Status> errors);
  absl::Status Next();
  int runs() const;

 private:
  mutable absl::Mutex mu_;
  std::deque<absl::Status> errors_ ABSL_GUARDED_BY(mu_);
  int runs_ ABSL_GUARDED_BY(mu_) = 0;
};

// Delegates to a shared session (not closed by Close), after consulting
// the plan.
class SharedSession : public Session {
 public:
  SharedSession(std::shared_ptr<Session> inner, std::shared_ptr<FaultPlan> plan)
      : inner_(std::move(inner)), plan_(std::move(plan)) {}
  absl::Status Extend(const GraphDef& graph) override {
    return inner_->Extend(graph);
  }
  absl::Status Run(const RunOptions& options,
                   const std::vector<std::pair<std::string, Tensor>>& feeds,
                   const std::vector<std::string>& fetches,
                   const std::vector<std::string>& targets,
                   std::vector<Tensor>* outputs) override;
  absl::StatusOr<CallableHandle> MakeCallable(
      const CallableOptions& options) override {
    return inner_->MakeCallable(options);
  }
  absl::Status RunCallable(CallableHandle handle,
                           const std::vector<Tensor>& feeds,
                           std::vector<Tensor>* fetches,
                           const RunOptions* options) override {
    return inner_->RunCallable(handle, feeds, fetches, options);
  }
  absl::Status ReleaseCallable(CallableHandle handle) override {
    return inner_->ReleaseCallable(handle);
  }
  absl::Status Close() override;
  absl::Status Reset(const std::vector<std::string>& containers) override {
    return inner_->Reset(containers);
  }
  bool closed() const { return closed_; }

 private:
  std::shared_ptr<Session> inner_;
  std::shared_ptr<FaultPlan> plan_;
  bool closed_ = false;
};

// A factory whose sessions all share one LocalSession (made from the first
// graph it sees), like tasks sharing a ps. `created` counts sessions.
struct SharedLocalCluster {
  std::shared_ptr<Session> local;
  std::shared_ptr<FaultPlan> plan = std::make_shared<FaultPlan>();
  std::shared_ptr<std::atomic<int>> created =
      std::make_shared<std::atomic<int>>(0);
  // Errors returned by the next factory calls instead of a session.
  std::shared_ptr<FaultPlan> create_plan = std::make_shared<FaultPlan>();
  SessionFactory factory();
};

}  // namespace cohort::training::testing

#endif  // COHORT_TRAINING_TRAINING_TEST_UTIL_H_
