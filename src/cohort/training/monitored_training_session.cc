#include "cohort/training/monitored_training_session.h"

#include <utility>

#include "cohort/base/status.h"
#include "cohort/training/basic_session_run_hooks.h"

namespace cohort::training {

absl::StatusOr<std::unique_ptr<MonitoredSession>> MonitoredTrainingSession(
    const Scope& graph, MonitoredTrainingSessionOptions o) {
  std::shared_ptr<Scaffold> scaffold =
      o.scaffold != nullptr ? o.scaffold : std::make_shared<Scaffold>();
  SessionCreatorOptions c;
  c.master = o.master;
  c.config = o.config;
  c.env = o.env;
  c.factory = o.session_factory;
  c.recovery_wait = o.recovery_wait;

  MonitoredSessionOptions m;
  m.should_recover = o.should_recover;
  m.env = o.env;
  m.initial_backoff = o.recovery_wait;
  m.max_recovery = o.max_recovery;
  m.stop_grace_period = o.stop_grace_period;

  if (!o.is_chief) {
    auto creator =
        std::make_unique<WorkerSessionCreator>(scaffold, c, o.max_wait);
    return MonitoredSession::Create(graph, std::move(creator), o.hooks, m);
  }

  // TF's USE_DEFAULT: neither given means every 600 s.
  std::optional<int64_t> steps = o.save_checkpoint_steps;
  std::optional<absl::Duration> secs = o.save_checkpoint_secs;
  if (!steps.has_value() && !secs.has_value()) secs = absl::Seconds(600);
  bool save = (steps.has_value() && *steps > 0) ||
              (secs.has_value() && *secs > absl::ZeroDuration());

  HookList hooks = o.chief_only_hooks;
  if (!o.checkpoint_dir.empty()) {
    if (o.log_step_count_steps > 0) {
      COHORT_ASSIGN_OR_RETURN(
          auto counter,
          StepCounterHook::Create(o.log_step_count_steps, std::nullopt, o.env));
      hooks.push_back(std::move(counter));
    }
    if (save) {
      CheckpointSaverHookOptions h;
      h.checkpoint_dir = o.checkpoint_dir;
      if (steps.has_value() && *steps > 0) {
        h.save_steps = steps;
      } else {
        h.save_secs = secs;
      }
      h.scaffold = scaffold;
      h.env = o.env;
      COHORT_ASSIGN_OR_RETURN(auto saver_hook,
                              CheckpointSaverHook::Create(std::move(h)));
      hooks.push_back(std::move(saver_hook));
    }
  }
  hooks.insert(hooks.end(), o.hooks.begin(), o.hooks.end());
  auto creator =
      std::make_unique<ChiefSessionCreator>(scaffold, c, o.checkpoint_dir);
  return MonitoredSession::Create(graph, std::move(creator), std::move(hooks),
                                  m);
}

}  // namespace cohort::training
