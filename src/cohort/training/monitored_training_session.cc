#include "cohort/training/monitored_training_session.h"

#include <utility>

#include "cohort/base/status.h"
#include "cohort/distribute/worker_context.h"
#include "cohort/training/basic_session_run_hooks.h"

namespace cohort::training {

namespace {

// The StepCounterHook and CheckpointSaverHook a chief (or, in a worker
// context, the task the strategy names) adds when checkpoint_dir is set.
// With them, the SummarySaverHook of summary_scalars. TensorFlow's rule:
// summaries go to summary_dir, which defaults to checkpoint_dir.
absl::Status AddCounterHook(const MonitoredTrainingSessionOptions& o,
                            HookList* hooks) {
  if (o.checkpoint_dir.empty()) return absl::OkStatus();
  const std::string summary_dir =
      o.summary_dir.empty() ? o.checkpoint_dir : o.summary_dir;
  if (o.log_step_count_steps > 0) {
    COHORT_ASSIGN_OR_RETURN(
        auto counter,
        StepCounterHook::Create(o.log_step_count_steps, std::nullopt, o.env,
                                summary_dir, o.examples_per_step));
    hooks->push_back(std::move(counter));
  }
  if (!o.summary_scalars.empty() && o.save_summaries_steps > 0) {
    COHORT_ASSIGN_OR_RETURN(
        auto summaries,
        SummarySaverHook::Create(o.summary_scalars, summary_dir,
                                 o.save_summaries_steps, std::nullopt, o.env));
    hooks->push_back(std::move(summaries));
  }
  return absl::OkStatus();
}

absl::Status AddSaverHook(const MonitoredTrainingSessionOptions& o,
                          const std::shared_ptr<Scaffold>& scaffold,
                          HookList* hooks) {
  if (o.checkpoint_dir.empty()) return absl::OkStatus();
  // TF's USE_DEFAULT: neither given means every 600 s; a value <= 0 turns
  // saving off.
  std::optional<int64_t> steps = o.save_checkpoint_steps;
  std::optional<absl::Duration> secs = o.save_checkpoint_secs;
  if (!steps.has_value() && !secs.has_value()) secs = absl::Seconds(600);
  CheckpointSaverHookOptions h;
  if (steps.has_value() && *steps > 0) {
    h.save_steps = steps;
  } else if (secs.has_value() && *secs > absl::ZeroDuration()) {
    h.save_secs = secs;
  } else {
    return absl::OkStatus();
  }
  h.checkpoint_dir = o.checkpoint_dir;
  h.scaffold = scaffold;
  h.env = o.env;
  COHORT_ASSIGN_OR_RETURN(auto saver_hook,
                          CheckpointSaverHook::Create(std::move(h)));
  hooks->push_back(std::move(saver_hook));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<MonitoredSession>> MonitoredTrainingSession(
    const Scope& graph, MonitoredTrainingSessionOptions o) {
  std::shared_ptr<Scaffold> scaffold =
      o.scaffold != nullptr ? o.scaffold : std::make_shared<Scaffold>();
  const distribute::WorkerContext* context = distribute::CurrentWorkerContext();
  SessionCreatorOptions c;
  c.master = o.master;
  c.config = o.config;
  if (context != nullptr) {
    if (c.master.empty()) c.master = context->master_target();
    // The caller's settings over the context's (TF merges the same way).
    c.config = context->session_config();
    c.config.MergeFrom(o.config);
  }
  c.env = o.env;
  c.factory = o.session_factory;
  c.recovery_wait = o.recovery_wait;

  MonitoredSessionOptions m;
  m.should_recover = o.should_recover;
  m.env = o.env;
  m.initial_backoff = o.recovery_wait;
  m.max_recovery = o.max_recovery;
  m.stop_grace_period = o.stop_grace_period;

  HookList hooks;
  bool chief_creator = o.is_chief;
  if (context != nullptr) {
    // In a worker_fn the strategy decides who counts, saves and initialises.
    hooks = o.hooks;
    if (context->is_chief()) {
      hooks.insert(hooks.end(), o.chief_only_hooks.begin(),
                   o.chief_only_hooks.end());
    }
    if (context->should_save_summary()) {
      COHORT_RETURN_IF_ERROR(AddCounterHook(o, &hooks));
    }
    if (context->should_checkpoint()) {
      COHORT_RETURN_IF_ERROR(AddSaverHook(o, scaffold, &hooks));
    }
    chief_creator =
        context->strategy() == nullptr || context->experimental_should_init();
  } else if (o.is_chief) {
    hooks = o.chief_only_hooks;
    COHORT_RETURN_IF_ERROR(AddCounterHook(o, &hooks));
    COHORT_RETURN_IF_ERROR(AddSaverHook(o, scaffold, &hooks));
    hooks.insert(hooks.end(), o.hooks.begin(), o.hooks.end());
  } else {
    hooks = o.hooks;
  }
  std::unique_ptr<SessionCreator> creator;
  if (chief_creator) {
    creator =
        std::make_unique<ChiefSessionCreator>(scaffold, c, o.checkpoint_dir);
  } else {
    creator = std::make_unique<WorkerSessionCreator>(scaffold, c, o.max_wait);
  }
  return MonitoredSession::Create(graph, std::move(creator), std::move(hooks),
                                  m);
}

}  // namespace cohort::training
