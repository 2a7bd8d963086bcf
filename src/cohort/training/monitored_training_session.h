// MonitoredTrainingSession: a MonitoredSession set up for (distributed)
// training in one call (TensorFlow's tf.train.MonitoredTrainingSession).
//
//   Scope root = Scope::NewRootScope();
//   auto step = ops::GetOrCreateGlobalStep(root);
//   ... model, "train" op that also increments the global step ...
//   MonitoredTrainingSessionOptions o;
//   o.checkpoint_dir = "/tmp/ckpt";
//   o.hooks = {*StopAtStepHook::Create(std::nullopt, 1000)};
//   COHORT_ASSIGN_OR_RETURN(auto sess, MonitoredTrainingSession(root, o));
//   while (!sess->ShouldStop()) COHORT_RETURN_IF_ERROR(sess->Run({}, {"train"},
//   nullptr)); COHORT_RETURN_IF_ERROR(sess->Close());
//
// Chief (is_chief): hooks = chief_only_hooks, StepCounterHook(every
// log_step_count_steps; when checkpoint_dir is set and the count > 0;
// writing global_step/sec to summary_dir), SummarySaverHook(summary_scalars
// every save_summaries_steps; when checkpoint_dir is set and there are any),
// CheckpointSaverHook(checkpoint_dir, steps|secs; when checkpoint_dir is set
// and saving is on), then `hooks`; creator = ChiefSessionCreator (restores
// the latest checkpoint of checkpoint_dir, else initialises).
// Worker: only `hooks`; creator = WorkerSessionCreator (waits up to
// max_wait for the chief to make the model ready, polling every
// recovery_wait).
// Inside a distribute coordinator's worker_fn (distribute/worker_context.h)
// the context decides instead (TF): master "" becomes the context's master
// target, `config` is merged over the context's session config; hooks =
// `hooks`, chief_only_hooks when the context is chief, StepCounterHook when
// the strategy says should_save_summary, CheckpointSaverHook when it says
// should_checkpoint; the creator is a chief's when there is no strategy or
// it says experimental_should_init, else a worker's.
// Checkpoint cadence (TF): neither steps nor secs given: every 600 s; one
// given: only that one; a value <= 0 disables saving.
//
// Errors: those of the hooks' creation and Begin, and of
// MonitoredSession::Create.
// Thread safety: as MonitoredSession.
#ifndef COHORT_TRAINING_MONITORED_TRAINING_SESSION_H_
#define COHORT_TRAINING_MONITORED_TRAINING_SESSION_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cohort/config.pb.h"
#include "cohort/graph/builder.h"
#include "cohort/training/monitored_session.h"
#include "cohort/training/scaffold.h"
#include "cohort/training/session_factory.h"
#include "cohort/training/session_run_hook.h"

namespace cohort {
class Env;
}

namespace cohort::training {

struct MonitoredTrainingSessionOptions {
  std::string master;  // "", "local" or "grpc://host:port"
  bool is_chief = true;
  std::string checkpoint_dir;          // empty: no checkpoints, no step counter
  std::shared_ptr<Scaffold> scaffold;  // null = a default Scaffold
  HookList hooks;
  HookList chief_only_hooks;
  std::optional<int64_t> save_checkpoint_steps;
  std::optional<absl::Duration> save_checkpoint_secs;
  int64_t log_step_count_steps = 100;
  // TensorBoard summaries (summary_writer.h), written by the task that
  // counts steps: the StepCounterHook's global_step/sec (and examples/sec
  // when examples_per_step > 0), and every save_summaries_steps the scalar
  // tensors of summary_scalars (tag, tensor name) through a
  // SummarySaverHook. TensorFlow takes a summary op instead. summary_dir
  // empty: checkpoint_dir.
  std::string summary_dir;
  int64_t save_summaries_steps = 100;
  std::vector<std::pair<std::string, std::string>> summary_scalars;
  int64_t examples_per_step = 0;
  absl::Duration stop_grace_period = absl::Seconds(120);
  absl::Duration max_wait = absl::Seconds(7200);
  // Worker's wait between readiness checks, and the first recovery backoff.
  absl::Duration recovery_wait = absl::Seconds(1);
  absl::Duration max_recovery = absl::Seconds(3600);
  bool should_recover = true;
  ConfigProto config;
  Env* env = nullptr;              // null = Env::Default()
  SessionFactory session_factory;  // null = DefaultSessionFactory(env)
};

absl::StatusOr<std::unique_ptr<MonitoredSession>> MonitoredTrainingSession(
    const Scope& graph, MonitoredTrainingSessionOptions options);

}  // namespace cohort::training

#endif  // COHORT_TRAINING_MONITORED_TRAINING_SESSION_H_
