// The basic hooks of a training loop (TensorFlow's
// basic_session_run_hooks.py), with TensorFlow's messages:
//
//   SecondOrStepTimer    "every N seconds or every N steps" bookkeeping
//   StopAtStepHook       requests stop at a global step
//   CheckpointSaverHook  saves checkpoints (at session creation, every N
//                        steps or seconds, at the end), with listeners
//   StepCounterHook      logs "global_step/sec: <rate>"; with an output
//                        directory also writes it (and examples/sec) as
//                        TensorBoard scalars (summary_writer.h)
//   SummarySaverHook     writes scalar tensors as TensorBoard summaries
//                        every N steps or seconds
//   LoggingTensorHook    logs tensor values every N iterations or seconds
//   NanTensorHook        fails (or stops) when the loss is NaN
//   FinalOpsHook         runs ops at End and keeps their values
// GlobalStepWaiterHook has its own header.
//
// Hooks that need the global step look it up at Begin (training_util.h)
// and fail there with FailedPrecondition "Global step should be created to
// use <Hook>.". Invalid arguments are reported by each hook's Create
// (InvalidArgument with TF's ValueError text).
//
// Thread safety: as SessionRunHook: called from the training thread only.
// Time comes from the Env given at creation (null = Env::Default()).
#ifndef COHORT_TRAINING_BASIC_SESSION_RUN_HOOKS_H_
#define COHORT_TRAINING_BASIC_SESSION_RUN_HOOKS_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cohort/training/saver.h"
#include "cohort/training/scaffold.h"
#include "cohort/training/session_run_hook.h"
#include "cohort/training/summary_writer.h"

namespace cohort {
class Env;
}

namespace cohort::training {

class SecondOrStepTimer {
 public:
  // InvalidArgument "Either every_secs or every_steps should be provided."
  // / "Can not provide both every_secs and every_steps.".
  static absl::StatusOr<SecondOrStepTimer> Create(
      std::optional<absl::Duration> every_secs,
      std::optional<int64_t> every_steps, Env* env = nullptr);

  // Never triggered: true; the last triggered step: false; otherwise true
  // when every_secs have passed or step >= last + every_steps.
  bool ShouldTriggerForStep(int64_t step) const;
  // Records a trigger at `step` now; returns the elapsed time and steps
  // since the previous trigger (nullopt on the first).
  std::optional<std::pair<absl::Duration, int64_t>> UpdateLastTriggeredStep(
      int64_t step);
  std::optional<int64_t> last_triggered_step() const { return last_step_; }
  void Reset();

 private:
  SecondOrStepTimer(std::optional<absl::Duration> every_secs,
                    std::optional<int64_t> every_steps, Env* env);
  std::optional<absl::Duration> every_secs_;
  std::optional<int64_t> every_steps_;
  Env* env_;
  std::optional<absl::Time> last_time_;
  std::optional<int64_t> last_step_;
};

class StopAtStepHook : public SessionRunHook {
 public:
  // Exactly one: InvalidArgument "Only one of num_steps or last_step can be
  // specified." / "One of num_steps or last_step must be specified.".
  static absl::StatusOr<std::shared_ptr<StopAtStepHook>> Create(
      std::optional<int64_t> num_steps, std::optional<int64_t> last_step);

  absl::Status Begin(Scope* graph) override;
  // With num_steps: last_step = current global step + num_steps (once).
  absl::Status AfterCreateSession(Session* session,
                                  Coordinator* coord) override;
  absl::StatusOr<std::optional<SessionRunArgs>> BeforeRun(
      SessionRunContext* ctx) override;
  absl::Status AfterRun(SessionRunContext* ctx,
                        const SessionRunValues& values) override;

 private:
  StopAtStepHook(std::optional<int64_t> num_steps,
                 std::optional<int64_t> last_step)
      : num_steps_(num_steps), last_step_(last_step) {}
  std::optional<int64_t> num_steps_;
  std::optional<int64_t> last_step_;
  std::string step_tensor_;
};

// Called around each checkpoint CheckpointSaverHook writes.
class CheckpointSaverListener {
 public:
  virtual ~CheckpointSaverListener() = default;
  virtual std::string name() const { return "CheckpointSaverListener"; }
  virtual absl::Status Begin() { return absl::OkStatus(); }
  virtual absl::Status BeforeSave(Session* session, int64_t step) {
    return absl::OkStatus();
  }
  // true = request that training stop.
  virtual absl::StatusOr<bool> AfterSave(Session* session, int64_t step) {
    return false;
  }
  virtual absl::Status End(Session* session, int64_t step) {
    return absl::OkStatus();
  }
};

struct CheckpointSaverHookOptions {
  std::string checkpoint_dir;
  std::optional<absl::Duration> save_secs;
  std::optional<int64_t> save_steps;
  // At most one of saver and scaffold (the scaffold's saver, once
  // finalized); neither: a Saver built over the graph at Begin.
  std::shared_ptr<Saver> saver;
  std::shared_ptr<Scaffold> scaffold;
  std::string checkpoint_basename = "model.ckpt";
  std::vector<std::shared_ptr<CheckpointSaverListener>> listeners;
  Env* env = nullptr;
};

class CheckpointSaverHook : public SessionRunHook {
 public:
  // Logs "Create CheckpointSaverHook.". InvalidArgument "You cannot provide
  // both saver and scaffold." and the timer's errors.
  static absl::StatusOr<std::shared_ptr<CheckpointSaverHook>> Create(
      CheckpointSaverHookOptions options);

  absl::Status Begin(Scope* graph) override;
  // Saves at once: the state at the current global step.
  absl::Status AfterCreateSession(Session* session,
                                  Coordinator* coord) override;
  absl::StatusOr<std::optional<SessionRunArgs>> BeforeRun(
      SessionRunContext* ctx) override;
  absl::Status AfterRun(SessionRunContext* ctx,
                        const SessionRunValues& values) override;
  // Saves unless the final step was just saved; listeners' End.
  absl::Status End(Session* session) override;

 private:
  CheckpointSaverHook(CheckpointSaverHookOptions options,
                      SecondOrStepTimer timer);
  // One save; StatusOr<true> when a listener asked to stop.
  absl::StatusOr<bool> Save(Session* session, int64_t step);
  Saver* saver() const;

  CheckpointSaverHookOptions options_;
  SecondOrStepTimer timer_;
  std::shared_ptr<Saver> own_saver_;
  std::string step_tensor_;
};

class StepCounterHook : public SessionRunHook {
 public:
  // Exactly one of them: InvalidArgument "exactly one of every_n_steps and
  // every_n_secs should be provided.".
  // `output_dir` non-empty: each rate is also written there as the scalar
  // "global_step/sec" at the global step (TensorFlow's), and, with
  // `examples_per_step` > 0, "examples/sec" = the rate x examples_per_step
  // (for an asynchronous job, each global step is one batch of one task).
  // Errors of the event file (summary_writer.h) come from Begin.
  static absl::StatusOr<std::shared_ptr<StepCounterHook>> Create(
      std::optional<int64_t> every_n_steps = 100,
      std::optional<absl::Duration> every_n_secs = std::nullopt,
      Env* env = nullptr, std::string output_dir = "",
      int64_t examples_per_step = 0);

  absl::Status Begin(Scope* graph) override;
  absl::StatusOr<std::optional<SessionRunArgs>> BeforeRun(
      SessionRunContext* ctx) override;
  absl::Status AfterRun(SessionRunContext* ctx,
                        const SessionRunValues& values) override;

 private:
  StepCounterHook(SecondOrStepTimer timer, Env* env, std::string output_dir,
                  int64_t examples_per_step)
      : timer_(timer),
        env_(env),
        output_dir_(std::move(output_dir)),
        examples_per_step_(examples_per_step) {}
  SecondOrStepTimer timer_;
  Env* const env_;
  const std::string output_dir_;
  const int64_t examples_per_step_;
  std::shared_ptr<EventFileWriter> writer_;
  bool write_failed_ = false;
  std::string step_tensor_;
  std::string summary_tag_;
  std::optional<int64_t> last_global_step_;
  int global_step_check_count_ = 0;
};

// TensorFlow's SummarySaverHook for scalars: every `save_steps` global
// steps (or `save_secs`), from the first run on, fetches each (tag, tensor
// name) of `scalars` (float, double or integer scalars) and writes them to
// `output_dir` at the global step read after the run; the first run also
// writes a SessionLog START. TensorFlow takes a summary op; cohort's graphs
// have no summary ops, so the hook takes the tensors to summarise. A write
// that fails is logged and training goes on (TensorFlow's writer is
// asynchronous and only logs).
class SummarySaverHook : public SessionRunHook {
 public:
  // InvalidArgument: no scalars, no output_dir, or not exactly one of
  // save_steps and save_secs ("exactly one of save_steps and save_secs
  // should be provided.").
  static absl::StatusOr<std::shared_ptr<SummarySaverHook>> Create(
      std::vector<std::pair<std::string, std::string>> scalars,
      std::string output_dir, std::optional<int64_t> save_steps = 100,
      std::optional<absl::Duration> save_secs = std::nullopt,
      Env* env = nullptr);

  absl::Status Begin(Scope* graph) override;
  absl::StatusOr<std::optional<SessionRunArgs>> BeforeRun(
      SessionRunContext* ctx) override;
  absl::Status AfterRun(SessionRunContext* ctx,
                        const SessionRunValues& values) override;

 private:
  SummarySaverHook(std::vector<std::pair<std::string, std::string>> scalars,
                   std::string output_dir, SecondOrStepTimer timer, Env* env)
      : scalars_(std::move(scalars)),
        output_dir_(std::move(output_dir)),
        timer_(timer),
        env_(env) {}

  const std::vector<std::pair<std::string, std::string>> scalars_;
  const std::string output_dir_;
  SecondOrStepTimer timer_;
  Env* const env_;
  std::shared_ptr<EventFileWriter> writer_;
  bool write_failed_ = false;
  std::string step_tensor_;
  std::optional<int64_t> next_step_;
  bool request_summary_ = false;
};

class LoggingTensorHook : public SessionRunHook {
 public:
  // `tensors`: (tag, tensor name) in log order. InvalidArgument "either
  // at_end and/or exactly one of every_n_iter and every_n_secs must be
  // provided." / "invalid every_n_iter=<n>.".
  static absl::StatusOr<std::shared_ptr<LoggingTensorHook>> Create(
      std::vector<std::pair<std::string, std::string>> tensors,
      std::optional<int64_t> every_n_iter,
      std::optional<absl::Duration> every_n_secs = std::nullopt,
      bool at_end = false, Env* env = nullptr);

  absl::Status Begin(Scope* graph) override;
  absl::StatusOr<std::optional<SessionRunArgs>> BeforeRun(
      SessionRunContext* ctx) override;
  absl::Status AfterRun(SessionRunContext* ctx,
                        const SessionRunValues& values) override;
  absl::Status End(Session* session) override;

 private:
  LoggingTensorHook(std::vector<std::pair<std::string, std::string>> tensors,
                    SecondOrStepTimer timer, bool log_every, bool at_end)
      : tensors_(std::move(tensors)),
        timer_(timer),
        log_every_(log_every),
        at_end_(at_end) {}
  void Log(const std::vector<Tensor>& values);

  const std::vector<std::pair<std::string, std::string>> tensors_;
  SecondOrStepTimer timer_;
  const bool log_every_;
  const bool at_end_;
  int64_t iter_count_ = 0;
  bool should_trigger_ = false;
};

class NanTensorHook : public SessionRunHook {
 public:
  // `loss`: a float or double scalar tensor name.
  explicit NanTensorHook(std::string loss, bool fail_on_nan_loss = true)
      : loss_(std::move(loss)), fail_on_nan_loss_(fail_on_nan_loss) {}
  absl::StatusOr<std::optional<SessionRunArgs>> BeforeRun(
      SessionRunContext* ctx) override;
  // NaN: logs ERROR "Model diverged with loss = NaN." and fails with
  // FailedPrecondition "NaN loss during training."; or, without
  // fail_on_nan_loss, logs a WARNING and requests stop.
  absl::Status AfterRun(SessionRunContext* ctx,
                        const SessionRunValues& values) override;

 private:
  const std::string loss_;
  const bool fail_on_nan_loss_;
};

class FinalOpsHook : public SessionRunHook {
 public:
  FinalOpsHook(std::vector<std::string> final_ops,
               std::vector<std::pair<std::string, Tensor>> feeds = {})
      : final_ops_(std::move(final_ops)), feeds_(std::move(feeds)) {}
  // Fetches the ops' tensors; OutOfRange is logged (TF's warning) and
  // returned.
  absl::Status End(Session* session) override;
  const std::vector<Tensor>& final_ops_values() const { return values_; }

 private:
  const std::vector<std::string> final_ops_;
  const std::vector<std::pair<std::string, Tensor>> feeds_;
  std::vector<Tensor> values_;
};

}  // namespace cohort::training

#endif  // COHORT_TRAINING_BASIC_SESSION_RUN_HOOKS_H_
