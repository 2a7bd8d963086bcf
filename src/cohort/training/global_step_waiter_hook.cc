#include "cohort/training/global_step_waiter_hook.h"

#include "cohort/base/env.h"
#include "cohort/base/logging.h"
#include "cohort/base/status.h"
#include "cohort/training/training_util.h"

namespace cohort::training {

GlobalStepWaiterHook::GlobalStepWaiterHook(int64_t wait_until_step, Env* env)
    : wait_until_step_(wait_until_step),
      env_(env != nullptr ? env : Env::Default()) {}

absl::Status GlobalStepWaiterHook::Begin(Scope* graph) {
  // A hook reused by a new MonitoredSession waits again.
  worker_is_started_ = false;
  // The underscore is TensorFlow's class name, kept for log searches.
  COHORT_ASSIGN_OR_RETURN(
      step_tensor_, GlobalStepReadForHook(*graph, "_GlobalStepWaiterHook"));
  // A worker may start before the chief initialized the variables; TF's
  // read then gives the initial value instead of failing the worker.
  COHORT_ASSIGN_OR_RETURN(step_initialized_tensor_,
                          GetOrCreateGlobalStepIsInitialized(*graph));
  return absl::OkStatus();
}

absl::StatusOr<std::optional<SessionRunArgs>> GlobalStepWaiterHook::BeforeRun(
    SessionRunContext* ctx) {
  if (worker_is_started_) return std::optional<SessionRunArgs>();
  if (wait_until_step_ <= 0) {
    worker_is_started_ = true;
    return std::optional<SessionRunArgs>();
  }
  COHORT_LOG(INFO) << "Waiting for global step " << wait_until_step_
                   << " before starting training.";
  // Progress is counted from 0, not from the first value read (TF).
  int64_t last_logged_step = 0;
  while (true) {
    COHORT_ASSIGN_OR_RETURN(
        int64_t current,
        ReadGlobalStep(ctx->session(), step_tensor_, step_initialized_tensor_));
    if (current >= wait_until_step_) {
      worker_is_started_ = true;
      return std::optional<SessionRunArgs>();
    }
    if (current - last_logged_step > 1000) {
      COHORT_LOG(INFO) << "Waiting for global step " << wait_until_step_
                       << " before starting training. Current step is "
                       << current << ".";
      last_logged_step = current;
    }
    env_->SleepFor(kPollInterval);
  }
}

}  // namespace cohort::training
