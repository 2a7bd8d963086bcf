// MonitoredSession: a Session wrapper for training loops (TensorFlow's
// tf.train.MonitoredSession): runs hooks around every step, recovers from
// lost tasks by creating a new session, and knows when to stop.
//
//   auto sess = MonitoredSession::Create(root, std::move(creator), hooks);
//   while (!(*sess)->ShouldStop()) {
//     absl::Status s = (*sess)->Run({}, {"train"}, nullptr);
//     if (absl::IsOutOfRange(s)) break;        // input exhausted: clean
//     if (!s.ok()) return (*sess)->Close(s), s;
//   }
//   COHORT_RETURN_IF_ERROR((*sess)->Close());  // hooks' End, then close
//
// Create: Begin on every hook (in order; they may add nodes), then the
// creator makes a session (finalizing the scaffold into the graph), then a
// new Coordinator and AfterCreateSession on every hook.
//
// Run (one step):
//  - BeforeRun of every hook; their fetches, feeds and targets join the
//    caller's; each hook's AfterRun gets exactly its own fetches' values,
//    the caller only its own. RunOptions: the largest timeout wins.
//  - Feed conflicts: FailedPrecondition "Same tensor is fed by two hooks.
//    Conflict(s): ['x:0']" / "Same tensor is fed by a SessionRunHook and
//    user. Conflict(s): ['x:0']".
//  - AfterRun only when the run succeeded; a RequestStop in any of them makes
//    ShouldStop() true (the current Run still returns its results).
//  - After stop: FailedPrecondition "Run called even after should_stop
//    requested."; after Close: FailedPrecondition "Session is already
//    closed.".
// Recovery (should_recover, the default): an Aborted or Unavailable error
// from creating the session, from a Run (hooks' own session calls
// included), or from the stop check closes the session (errors only
// logged), waits (initial_backoff doubling up to max_backoff, on the Env
// clock), creates a new one (AfterCreateSession again) and retries the same
// Run. After max_recovery of failing attempts the last error is returned.
// Other errors propagate unchanged; a non-preemption error whose cause is a
// preemption error recorded in the coordinator is reported as the latter.
// Close(): End on every hook (with the raw session), then stops the
// coordinator (joining its threads for stop_grace_period) and closes the
// session; an End error is returned after the session is closed anyway.
// Close(status): End only when `status` is OK or OutOfRange (an exhausted
// input is a clean end). A second Close: FailedPrecondition "Session is
// already closed." with no second End.
//
// Thread safety: thread-compatible: one thread drives a MonitoredSession
// (hooks are called on it). Blocking: Run blocks on the session and, while
// recovering, on the Env clock.
#ifndef COHORT_TRAINING_MONITORED_SESSION_H_
#define COHORT_TRAINING_MONITORED_SESSION_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cohort/base/backoff.h"
#include "cohort/graph/builder.h"
#include "cohort/graph/session.h"
#include "cohort/training/coordinator.h"
#include "cohort/training/session_creator.h"
#include "cohort/training/session_run_hook.h"

namespace cohort {
class Env;
}

namespace cohort::training {

struct MonitoredSessionOptions {
  // False: SingularMonitoredSession (no recovery).
  bool should_recover = true;
  Env* env = nullptr;  // null = Env::Default()
  absl::Duration initial_backoff = absl::Seconds(1);
  absl::Duration max_backoff = absl::Seconds(30);
  absl::Duration max_recovery = absl::Seconds(3600);
  absl::Duration stop_grace_period = absl::Seconds(120);
};

class MonitoredSession;

// What RunStepFn's function gets.
class StepContext {
 public:
  // The raw session (no hooks).
  Session* session() const;
  // One step with hooks, as MonitoredSession::Run.
  absl::Status RunWithHooks(
      const std::vector<std::pair<std::string, Tensor>>& feeds,
      const std::vector<std::string>& fetches,
      const std::vector<std::string>& targets, std::vector<Tensor>* outputs);
  // Ends the training loop: ShouldStop() becomes true after the function.
  void RequestStop() { stop_requested_ = true; }

 private:
  friend class MonitoredSession;
  explicit StepContext(MonitoredSession* owner) : owner_(owner) {}
  MonitoredSession* owner_;
  bool stop_requested_ = false;
};

class MonitoredSession {
 public:
  // Runs Begin and creates the session (see the file comment). Errors: the
  // hooks' and the creator's (after recovery gave up, for Aborted or
  // Unavailable).
  static absl::StatusOr<std::unique_ptr<MonitoredSession>> Create(
      const Scope& graph, std::unique_ptr<SessionCreator> creator,
      HookList hooks, MonitoredSessionOptions options = {});
  // Closes the session without End when Close was not called.
  ~MonitoredSession();
  MonitoredSession(const MonitoredSession&) = delete;
  MonitoredSession& operator=(const MonitoredSession&) = delete;

  absl::Status Run(const RunOptions& options,
                   const std::vector<std::pair<std::string, Tensor>>& feeds,
                   const std::vector<std::string>& fetches,
                   const std::vector<std::string>& targets,
                   std::vector<Tensor>* outputs);
  absl::Status Run(const std::vector<std::string>& fetches,
                   const std::vector<std::string>& targets,
                   std::vector<Tensor>* outputs) {
    return Run(RunOptions(), {}, fetches, targets, outputs);
  }

  // Runs `step_fn` (retried after a recovery, like Run); its
  // StepContext::RequestStop ends the loop.
  absl::Status RunStepFn(const std::function<absl::Status(StepContext*)>& fn);

  // True when closed, when a hook or step_fn requested stop, or when the
  // coordinator was stopped. Aborted/Unavailable recorded in the
  // coordinator recover (returns false); any other recorded error: true.
  bool ShouldStop();

  absl::Status Close() { return Close(absl::OkStatus()); }
  absl::Status Close(const absl::Status& status);

  // The current raw session (null while none); for tests and tools.
  Session* raw_session() const { return session_.get(); }

 private:
  MonitoredSession(Scope graph, std::unique_ptr<SessionCreator> creator,
                   HookList hooks, MonitoredSessionOptions options);

  // One creation: the creator, a new coordinator, AfterCreateSession.
  absl::Status CreateSessionOnce();
  // CreateSessionOnce until it works, recovering from preemption errors.
  absl::Status CreateSessionWithRecovery();
  // Closes the broken session (errors logged) and backs off; returns
  // `error` when recovery is off, `error` is not a preemption, or
  // max_recovery has passed.
  absl::Status PrepareRecovery(const absl::Status& error);
  // Runs `attempt` (creating the session first when there is none) until
  // it succeeds or fails for good, recovering from preemption errors.
  absl::Status WithRecovery(const std::function<absl::Status()>& attempt);
  void CloseSessionForRecovery();
  absl::Status RunHooked(
      const RunOptions& options,
      const std::vector<std::pair<std::string, Tensor>>& feeds,
      const std::vector<std::string>& fetches,
      const std::vector<std::string>& targets, std::vector<Tensor>* outputs);
  // The coordinator's preemption error behind `s`, when there is one.
  absl::Status ExplainWithCoordinator(const absl::Status& s) const;
  absl::Status CheckRunnable() const;

  const Scope graph_;
  const std::unique_ptr<SessionCreator> creator_;
  const HookList hooks_;
  const MonitoredSessionOptions options_;
  Env* const env_;

  std::unique_ptr<Session> session_;
  std::unique_ptr<Coordinator> coord_;
  bool stop_requested_ = false;
  bool closed_ = false;
  // Recovery backoff: the waits, and when the failing streak began.
  Backoff backoff_;
  std::optional<absl::Time> recovery_start_;
  friend class StepContext;
};

// True for the errors that mean "a task was lost; make a new session".
bool IsPreemptionError(const absl::Status& s);

}  // namespace cohort::training

#endif  // COHORT_TRAINING_MONITORED_SESSION_H_
