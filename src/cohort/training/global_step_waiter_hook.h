// GlobalStepWaiterHook: holds a worker back until the global step reaches
// `wait_until_step`, so workers join a model that has started to train
// (TensorFlow's _GlobalStepWaiterHook; typical wait_until_step =
// K * log(task_id + 1), the chief 0).
//
//   Begin                 worker_is_started = false; finds the global step
//                         as training_util's GetGlobalStep does (the
//                         GLOBAL_STEP collection, else the op "global_step";
//                         int32 or int64) and its read, else
//                         FailedPrecondition "Global step should be created
//                         to use _GlobalStepWaiterHook."; a global step of
//                         the wrong type or shape is GetGlobalStep's
//                         InvalidArgument.
//   BeforeRun             started: returns nothing at once. wait_until_step
//                         <= 0: starts, no read, no log. Otherwise logs
//                         "Waiting for global step <N> before starting
//                         training." once per call, then reads the step
//                         through ctx->session() until it is >= N, sleeping
//                         0.5 s (Env) between reads and logging "Waiting for
//                         global step <N> before starting training. Current
//                         step is <M>." whenever M - last logged (0 at first)
//                         > 1000. A global step variable not yet initialized
//                         (the chief has not run its initializer) reads as 0,
//                         as TensorFlow's global step read does, and the hook
//                         keeps waiting. Other read errors are returned as
//                         is (the hook is not started; MonitoredSession
//                         recovers from Aborted/Unavailable and calls
//                         BeforeRun again).
// It adds no fetches, never requests stop and does not change the graph.
//
// Thread safety: as SessionRunHook. BeforeRun blocks on the session and
// the Env clock.
#ifndef COHORT_TRAINING_GLOBAL_STEP_WAITER_HOOK_H_
#define COHORT_TRAINING_GLOBAL_STEP_WAITER_HOOK_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/time/time.h"
#include "cohort/training/session_run_hook.h"

namespace cohort {
class Env;
}

namespace cohort::training {

class GlobalStepWaiterHook : public SessionRunHook {
 public:
  static constexpr absl::Duration kPollInterval = absl::Milliseconds(500);

  // `env` (null = Env::Default()) is slept on between reads.
  explicit GlobalStepWaiterHook(int64_t wait_until_step, Env* env = nullptr);

  absl::Status Begin(Scope* graph) override;
  absl::StatusOr<std::optional<SessionRunArgs>> BeforeRun(
      SessionRunContext* ctx) override;

  bool worker_is_started() const { return worker_is_started_; }

 private:
  const int64_t wait_until_step_;
  Env* const env_;
  std::string step_tensor_;
  // "" when the global step is not a variable.
  std::string step_initialized_tensor_;
  bool worker_is_started_ = false;
};

}  // namespace cohort::training

#endif  // COHORT_TRAINING_GLOBAL_STEP_WAITER_HOOK_H_
