#include "cohort/training/basic_session_run_hooks.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "cohort/base/env.h"
#include "cohort/base/logging.h"
#include "cohort/base/status.h"
#include "cohort/training/training_util.h"

namespace cohort::training {
namespace {

SessionRunArgs Fetch(const std::string& tensor) {
  SessionRunArgs a;
  a.fetches.push_back(tensor);
  return a;
}

absl::StatusOr<int64_t> StepValue(const SessionRunValues& values) {
  if (values.results.size() != 1) {
    return absl::InternalError("hook got no global step back");
  }
  // int32 or int64, as TensorFlow allows for the global step.
  return GlobalStepValue(values.results[0], "global step");
}

absl::Status FindGlobalStep(Scope* graph, const std::string& hook,
                            std::string* tensor) {
  COHORT_ASSIGN_OR_RETURN(*tensor, GlobalStepReadForHook(*graph, hook));
  return absl::OkStatus();
}

absl::Time Now(Env* env) {
  return (env != nullptr ? env : Env::Default())->Now();
}

// As TensorFlow's asynchronous writer: a summary that cannot be written
// (a full disk) is logged, once per run of failures, and training goes on.
void WarnOnce(const absl::Status& written, bool* failed) {
  if (!written.ok() && !*failed) {
    COHORT_LOG(WARNING) << "summaries are not being written (training goes "
                           "on): "
                        << written;
  }
  *failed = !written.ok();
}

// A tensor as LoggingTensorHook prints it: scalars bare, like numpy.
std::string FormatValue(const Tensor& t) {
  if (t.NumElements() == 1 && t.shape().dims() == 0) {
    switch (t.dtype()) {
      case DT_FLOAT:
        return absl::StrCat(t.scalar<float>());
      case DT_DOUBLE:
        return absl::StrCat(t.scalar<double>());
      case DT_INT32:
        return absl::StrCat(t.scalar<int32_t>());
      case DT_INT64:
        return absl::StrCat(t.scalar<int64_t>());
      case DT_BOOL:
        return t.scalar<bool>() ? "True" : "False";
      case DT_STRING:
        return t.scalar<std::string>();
      default:
        break;
    }
  }
  return t.DebugString();
}

}  // namespace

// --- SecondOrStepTimer ---------------------------------------------------

absl::StatusOr<SecondOrStepTimer> SecondOrStepTimer::Create(
    std::optional<absl::Duration> every_secs,
    std::optional<int64_t> every_steps, Env* env) {
  if (!every_secs.has_value() && !every_steps.has_value()) {
    return absl::InvalidArgumentError(
        "Either every_secs or every_steps should be provided.");
  }
  if (every_secs.has_value() && every_steps.has_value()) {
    return absl::InvalidArgumentError(
        "Can not provide both every_secs and every_steps.");
  }
  return SecondOrStepTimer(every_secs, every_steps, env);
}

SecondOrStepTimer::SecondOrStepTimer(std::optional<absl::Duration> every_secs,
                                     std::optional<int64_t> every_steps,
                                     Env* env)
    : every_secs_(every_secs),
      every_steps_(every_steps),
      env_(env != nullptr ? env : Env::Default()) {}

bool SecondOrStepTimer::ShouldTriggerForStep(int64_t step) const {
  if (!last_step_.has_value()) return true;
  if (*last_step_ == step) return false;
  if (every_secs_.has_value() && env_->Now() >= *last_time_ + *every_secs_) {
    return true;
  }
  if (every_steps_.has_value() && step >= *last_step_ + *every_steps_) {
    return true;
  }
  return false;
}

std::optional<std::pair<absl::Duration, int64_t>>
SecondOrStepTimer::UpdateLastTriggeredStep(int64_t step) {
  absl::Time now = env_->Now();
  std::optional<std::pair<absl::Duration, int64_t>> elapsed;
  if (last_time_.has_value()) {
    elapsed = std::make_pair(now - *last_time_, step - *last_step_);
  }
  last_time_ = now;
  last_step_ = step;
  return elapsed;
}

void SecondOrStepTimer::Reset() {
  last_time_.reset();
  last_step_.reset();
}

// --- StopAtStepHook ------------------------------------------------------

absl::StatusOr<std::shared_ptr<StopAtStepHook>> StopAtStepHook::Create(
    std::optional<int64_t> num_steps, std::optional<int64_t> last_step) {
  if (num_steps.has_value() && last_step.has_value()) {
    return absl::InvalidArgumentError(
        "Only one of num_steps or last_step can be specified.");
  }
  if (!num_steps.has_value() && !last_step.has_value()) {
    return absl::InvalidArgumentError(
        "One of num_steps or last_step must be specified.");
  }
  return std::shared_ptr<StopAtStepHook>(
      new StopAtStepHook(num_steps, last_step));
}

absl::Status StopAtStepHook::Begin(Scope* graph) {
  return FindGlobalStep(graph, "StopAtStepHook", &step_tensor_);
}

absl::Status StopAtStepHook::AfterCreateSession(Session* session,
                                                Coordinator* coord) {
  // Only once: a recovered session keeps the target of the first.
  if (!last_step_.has_value()) {
    COHORT_ASSIGN_OR_RETURN(int64_t step,
                            ReadGlobalStep(session, step_tensor_));
    last_step_ = step + *num_steps_;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::optional<SessionRunArgs>> StopAtStepHook::BeforeRun(
    SessionRunContext* ctx) {
  return std::optional<SessionRunArgs>(Fetch(step_tensor_));
}

absl::Status StopAtStepHook::AfterRun(SessionRunContext* ctx,
                                      const SessionRunValues& values) {
  COHORT_ASSIGN_OR_RETURN(int64_t stale, StepValue(values));
  // The fetched value may precede this step's increment; re-read only when
  // the stop may be due.
  if (stale + 1 >= *last_step_) {
    COHORT_ASSIGN_OR_RETURN(int64_t step,
                            ReadGlobalStep(ctx->session(), step_tensor_));
    if (step >= *last_step_) ctx->RequestStop();
  }
  return absl::OkStatus();
}

// --- CheckpointSaverHook -------------------------------------------------

absl::StatusOr<std::shared_ptr<CheckpointSaverHook>>
CheckpointSaverHook::Create(CheckpointSaverHookOptions options) {
  COHORT_LOG(INFO) << "Create CheckpointSaverHook.";
  if (options.saver != nullptr && options.scaffold != nullptr) {
    return absl::InvalidArgumentError(
        "You cannot provide both saver and scaffold.");
  }
  COHORT_ASSIGN_OR_RETURN(
      SecondOrStepTimer timer,
      SecondOrStepTimer::Create(options.save_secs, options.save_steps,
                                options.env));
  return std::shared_ptr<CheckpointSaverHook>(
      new CheckpointSaverHook(std::move(options), timer));
}

CheckpointSaverHook::CheckpointSaverHook(CheckpointSaverHookOptions options,
                                         SecondOrStepTimer timer)
    : options_(std::move(options)), timer_(timer) {}

Saver* CheckpointSaverHook::saver() const {
  if (options_.saver != nullptr) return options_.saver.get();
  if (options_.scaffold != nullptr) return options_.scaffold->saver.get();
  return own_saver_.get();
}

absl::Status CheckpointSaverHook::Begin(Scope* graph) {
  COHORT_RETURN_IF_ERROR(
      FindGlobalStep(graph, "CheckpointSaverHook", &step_tensor_));
  if (options_.saver == nullptr && options_.scaffold == nullptr &&
      own_saver_ == nullptr) {
    COHORT_ASSIGN_OR_RETURN(own_saver_, Saver::Build(*graph));
  }
  for (const auto& l : options_.listeners) COHORT_RETURN_IF_ERROR(l->Begin());
  return absl::OkStatus();
}

absl::StatusOr<bool> CheckpointSaverHook::Save(Session* session, int64_t step) {
  Saver* s = saver();
  if (s == nullptr) {
    return absl::FailedPreconditionError(
        "CheckpointSaverHook has no saver: its scaffold was not finalized");
  }
  // TF logs the listener calls always; here only when there are some.
  const bool listeners = !options_.listeners.empty();
  if (listeners) {
    COHORT_LOG(INFO) << "Calling checkpoint listeners before saving "
                        "checkpoint "
                     << step << "...";
  }
  for (const auto& l : options_.listeners) {
    COHORT_RETURN_IF_ERROR(l->BeforeSave(session, step));
  }
  COHORT_LOG(INFO) << "Saving checkpoints for " << step << " into "
                   << options_.checkpoint_dir << "/"
                   << options_.checkpoint_basename << ".";
  COHORT_RETURN_IF_ERROR(s->Save(session, options_.checkpoint_dir, step,
                                 options_.checkpoint_basename)
                             .status());
  if (listeners) {
    COHORT_LOG(INFO) << "Calling checkpoint listeners after saving checkpoint "
                     << step << "...";
  }
  bool should_stop = false;
  for (const auto& l : options_.listeners) {
    COHORT_ASSIGN_OR_RETURN(bool stop, l->AfterSave(session, step));
    if (stop) {
      COHORT_LOG(INFO) << "A CheckpointSaverListener requested that training "
                          "be stopped. listener: "
                       << l->name();
      should_stop = true;
    }
  }
  return should_stop;
}

absl::Status CheckpointSaverHook::AfterCreateSession(Session* session,
                                                     Coordinator* coord) {
  COHORT_ASSIGN_OR_RETURN(int64_t step, ReadGlobalStep(session, step_tensor_));
  // TF: "The checkpoint saved here is the state at step global_step".
  COHORT_RETURN_IF_ERROR(Save(session, step).status());
  timer_.UpdateLastTriggeredStep(step);
  return absl::OkStatus();
}

absl::StatusOr<std::optional<SessionRunArgs>> CheckpointSaverHook::BeforeRun(
    SessionRunContext* ctx) {
  return std::optional<SessionRunArgs>(Fetch(step_tensor_));
}

absl::Status CheckpointSaverHook::AfterRun(SessionRunContext* ctx,
                                           const SessionRunValues& values) {
  COHORT_ASSIGN_OR_RETURN(int64_t stale, StepValue(values));
  if (!timer_.ShouldTriggerForStep(stale + 1)) return absl::OkStatus();
  COHORT_ASSIGN_OR_RETURN(int64_t step,
                          ReadGlobalStep(ctx->session(), step_tensor_));
  if (!timer_.ShouldTriggerForStep(step)) return absl::OkStatus();
  timer_.UpdateLastTriggeredStep(step);
  COHORT_ASSIGN_OR_RETURN(bool stop, Save(ctx->session(), step));
  if (stop) ctx->RequestStop();
  return absl::OkStatus();
}

absl::Status CheckpointSaverHook::End(Session* session) {
  COHORT_ASSIGN_OR_RETURN(int64_t last, ReadGlobalStep(session, step_tensor_));
  if (timer_.last_triggered_step() != last) {
    COHORT_RETURN_IF_ERROR(Save(session, last).status());
  }
  for (const auto& l : options_.listeners) {
    COHORT_RETURN_IF_ERROR(l->End(session, last));
  }
  return absl::OkStatus();
}

// --- StepCounterHook -----------------------------------------------------

absl::StatusOr<std::shared_ptr<StepCounterHook>> StepCounterHook::Create(
    std::optional<int64_t> every_n_steps,
    std::optional<absl::Duration> every_n_secs, Env* env,
    std::string output_dir, int64_t examples_per_step) {
  if (every_n_steps.has_value() == every_n_secs.has_value()) {
    return absl::InvalidArgumentError(
        "exactly one of every_n_steps and every_n_secs should be provided.");
  }
  if (examples_per_step < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "examples_per_step must be >= 0, got ", examples_per_step));
  }
  COHORT_ASSIGN_OR_RETURN(
      SecondOrStepTimer timer,
      SecondOrStepTimer::Create(every_n_secs, every_n_steps, env));
  return std::shared_ptr<StepCounterHook>(new StepCounterHook(
      timer, env, std::move(output_dir), examples_per_step));
}

absl::Status StepCounterHook::Begin(Scope* graph) {
  COHORT_RETURN_IF_ERROR(
      FindGlobalStep(graph, "StepCounterHook", &step_tensor_));
  summary_tag_ = "global_step/sec";
  if (!output_dir_.empty() && writer_ == nullptr) {
    COHORT_ASSIGN_OR_RETURN(writer_, SummaryWriterFor(output_dir_, Now(env_)));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::optional<SessionRunArgs>> StepCounterHook::BeforeRun(
    SessionRunContext* ctx) {
  return std::optional<SessionRunArgs>(Fetch(step_tensor_));
}

absl::Status StepCounterHook::AfterRun(SessionRunContext* ctx,
                                       const SessionRunValues& values) {
  COHORT_ASSIGN_OR_RETURN(int64_t stale, StepValue(values));
  if (timer_.ShouldTriggerForStep(stale + 1)) {
    COHORT_ASSIGN_OR_RETURN(int64_t step,
                            ReadGlobalStep(ctx->session(), step_tensor_));
    if (timer_.ShouldTriggerForStep(step)) {
      auto elapsed = timer_.UpdateLastTriggeredStep(step);
      if (elapsed.has_value() && elapsed->first > absl::ZeroDuration()) {
        double rate = static_cast<double>(elapsed->second) /
                      absl::ToDoubleSeconds(elapsed->first);
        COHORT_LOG(INFO) << absl::StrFormat("%s: %g", summary_tag_, rate);
        if (writer_ != nullptr) {
          std::vector<std::pair<std::string, float>> scalars = {
              {summary_tag_, static_cast<float>(rate)}};
          if (examples_per_step_ > 0) {
            scalars.emplace_back("examples/sec",
                                 static_cast<float>(rate * examples_per_step_));
          }
          WarnOnce(writer_->AddScalars(step, scalars, Now(env_)),
                   &write_failed_);
        }
      }
    }
  }
  if (last_global_step_.has_value() && stale == *last_global_step_) {
    if (++global_step_check_count_ % 20 == 0) {
      global_step_check_count_ = 0;
      COHORT_LOG(WARNING)
          << "It seems that global step (tf.train.get_global_step) has not "
             "been increased. Current value (could be stable): "
          << stale << " vs previous value: " << *last_global_step_
          << ". You could increase the global step by passing "
             "tf.train.get_global_step() to Optimizer.apply_gradients or "
             "Optimizer.minimize.";
    }
  } else {
    global_step_check_count_ = 0;
  }
  last_global_step_ = stale;
  return absl::OkStatus();
}

// --- SummarySaverHook ----------------------------------------------------

absl::StatusOr<std::shared_ptr<SummarySaverHook>> SummarySaverHook::Create(
    std::vector<std::pair<std::string, std::string>> scalars,
    std::string output_dir, std::optional<int64_t> save_steps,
    std::optional<absl::Duration> save_secs, Env* env) {
  if (save_steps.has_value() == save_secs.has_value()) {
    return absl::InvalidArgumentError(
        "exactly one of save_steps and save_secs should be provided.");
  }
  if (scalars.empty()) {
    return absl::InvalidArgumentError(
        "SummarySaverHook needs at least one (tag, tensor) to summarise");
  }
  if (output_dir.empty()) {
    return absl::InvalidArgumentError(
        "SummarySaverHook needs an output_dir for its event file");
  }
  COHORT_ASSIGN_OR_RETURN(
      SecondOrStepTimer timer,
      SecondOrStepTimer::Create(save_secs, save_steps, env));
  return std::shared_ptr<SummarySaverHook>(new SummarySaverHook(
      std::move(scalars), std::move(output_dir), timer, env));
}

absl::Status SummarySaverHook::Begin(Scope* graph) {
  COHORT_RETURN_IF_ERROR(
      FindGlobalStep(graph, "SummarySaverHook", &step_tensor_));
  if (writer_ == nullptr) {
    COHORT_ASSIGN_OR_RETURN(writer_, SummaryWriterFor(output_dir_, Now(env_)));
  }
  next_step_.reset();
  return absl::OkStatus();
}

absl::StatusOr<std::optional<SessionRunArgs>> SummarySaverHook::BeforeRun(
    SessionRunContext* ctx) {
  // As TensorFlow: the first run always writes; later ones when the timer
  // says the step about to run is due.
  request_summary_ =
      !next_step_.has_value() || timer_.ShouldTriggerForStep(*next_step_);
  SessionRunArgs a = Fetch(step_tensor_);
  if (request_summary_) {
    for (const auto& [tag, tensor] : scalars_) a.fetches.push_back(tensor);
  }
  return std::optional<SessionRunArgs>(std::move(a));
}

absl::Status SummarySaverHook::AfterRun(SessionRunContext* ctx,
                                        const SessionRunValues& values) {
  if (values.results.empty()) {
    return absl::InternalError("SummarySaverHook got no global step back");
  }
  // As TensorFlow: the step fetched with the run is stale by this run's
  // increment; when writing, the step is read again after the run.
  COHORT_ASSIGN_OR_RETURN(int64_t stale,
                          GlobalStepValue(values.results[0], "global step"));
  int64_t step = stale + 1;
  if (!next_step_.has_value() || request_summary_) {
    COHORT_ASSIGN_OR_RETURN(step, ReadGlobalStep(ctx->session(), step_tensor_));
  }
  if (!next_step_.has_value()) {
    WarnOnce(writer_->AddSessionStart(step, Now(env_)), &write_failed_);
  }
  if (request_summary_) {
    if (values.results.size() != 1 + scalars_.size()) {
      return absl::InternalError("SummarySaverHook got too few values back");
    }
    timer_.UpdateLastTriggeredStep(step);
    std::vector<std::pair<std::string, float>> out;
    for (size_t i = 0; i < scalars_.size(); ++i) {
      absl::StatusOr<double> v =
          ScalarValue(values.results[i + 1], scalars_[i].second);
      if (!v.ok()) {
        return Annotate(v.status(), absl::StrCat("SummarySaverHook, tag ",
                                                 scalars_[i].first));
      }
      out.emplace_back(scalars_[i].first, static_cast<float>(*v));
    }
    WarnOnce(writer_->AddScalars(step, out, Now(env_)), &write_failed_);
  }
  next_step_ = step + 1;
  return absl::OkStatus();
}

// --- LoggingTensorHook ---------------------------------------------------

absl::StatusOr<std::shared_ptr<LoggingTensorHook>> LoggingTensorHook::Create(
    std::vector<std::pair<std::string, std::string>> tensors,
    std::optional<int64_t> every_n_iter,
    std::optional<absl::Duration> every_n_secs, bool at_end, Env* env) {
  bool only_at_end =
      at_end && !every_n_iter.has_value() && !every_n_secs.has_value();
  if (!only_at_end && every_n_iter.has_value() == every_n_secs.has_value()) {
    return absl::InvalidArgumentError(
        "either at_end and/or exactly one of every_n_iter and every_n_secs "
        "must be provided.");
  }
  if (every_n_iter.has_value() && *every_n_iter <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid every_n_iter=", *every_n_iter, "."));
  }
  // An at-end-only hook still needs a timer value; it never triggers.
  COHORT_ASSIGN_OR_RETURN(
      SecondOrStepTimer timer,
      only_at_end ? SecondOrStepTimer::Create(std::nullopt, int64_t{1}, env)
                  : SecondOrStepTimer::Create(every_n_secs, every_n_iter, env));
  return std::shared_ptr<LoggingTensorHook>(
      new LoggingTensorHook(std::move(tensors), timer, !only_at_end, at_end));
}

absl::Status LoggingTensorHook::Begin(Scope* graph) {
  timer_.Reset();
  iter_count_ = 0;
  return absl::OkStatus();
}

absl::StatusOr<std::optional<SessionRunArgs>> LoggingTensorHook::BeforeRun(
    SessionRunContext* ctx) {
  should_trigger_ = log_every_ && timer_.ShouldTriggerForStep(iter_count_);
  if (!should_trigger_) return std::optional<SessionRunArgs>();
  SessionRunArgs a;
  for (const auto& t : tensors_) a.fetches.push_back(t.second);
  return std::optional<SessionRunArgs>(std::move(a));
}

void LoggingTensorHook::Log(const std::vector<Tensor>& values) {
  auto elapsed = timer_.UpdateLastTriggeredStep(iter_count_);
  std::vector<std::string> stats;
  for (size_t i = 0; i < tensors_.size() && i < values.size(); ++i) {
    stats.push_back(
        absl::StrCat(tensors_[i].first, " = ", FormatValue(values[i])));
  }
  if (elapsed.has_value()) {
    COHORT_LOG(INFO) << absl::StrFormat("%s (%.3f sec)",
                                        absl::StrJoin(stats, ", "),
                                        absl::ToDoubleSeconds(elapsed->first));
  } else {
    COHORT_LOG(INFO) << absl::StrJoin(stats, ", ");
  }
}

absl::Status LoggingTensorHook::AfterRun(SessionRunContext* ctx,
                                         const SessionRunValues& values) {
  if (should_trigger_) Log(values.results);
  ++iter_count_;
  return absl::OkStatus();
}

absl::Status LoggingTensorHook::End(Session* session) {
  if (!at_end_) return absl::OkStatus();
  std::vector<std::string> fetches;
  for (const auto& t : tensors_) fetches.push_back(t.second);
  std::vector<Tensor> values;
  COHORT_RETURN_IF_ERROR(session->Run({}, fetches, {}, &values));
  Log(values);
  return absl::OkStatus();
}

// --- NanTensorHook -------------------------------------------------------

absl::StatusOr<std::optional<SessionRunArgs>> NanTensorHook::BeforeRun(
    SessionRunContext* ctx) {
  return std::optional<SessionRunArgs>(Fetch(loss_));
}

absl::Status NanTensorHook::AfterRun(SessionRunContext* ctx,
                                     const SessionRunValues& values) {
  if (values.results.size() != 1 || values.results[0].NumElements() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("NanTensorHook: loss '", loss_, "' is not a scalar"));
  }
  const Tensor& t = values.results[0];
  double loss;
  if (t.dtype() == DT_FLOAT) {
    loss = t.flat<float>()(0);
  } else if (t.dtype() == DT_DOUBLE) {
    loss = t.flat<double>()(0);
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("NanTensorHook: loss '", loss_, "' is ",
                     DataTypeName(t.dtype()), ", not float or double"));
  }
  if (!std::isnan(loss)) return absl::OkStatus();
  constexpr char kMessage[] = "Model diverged with loss = NaN.";
  if (fail_on_nan_loss_) {
    COHORT_LOG(ERROR) << kMessage;
    // TF raises NanLossDuringTrainingError, whose text is this.
    return absl::FailedPreconditionError("NaN loss during training.");
  }
  COHORT_LOG(WARNING) << kMessage;
  ctx->RequestStop();
  return absl::OkStatus();
}

// --- FinalOpsHook --------------------------------------------------------

absl::Status FinalOpsHook::End(Session* session) {
  if (final_ops_.empty()) return absl::OkStatus();
  absl::Status s = session->Run(feeds_, final_ops_, {}, &values_);
  if (absl::IsOutOfRange(s)) {
    COHORT_LOG(WARNING)
        << "An OutOfRangeError or StopIteration exception is raised by the "
           "code in FinalOpsHook. This typically means the Ops running by the "
           "FinalOpsHook have a dependency back to some input source, which "
           "should not happen. For example, for metrics in "
           "tf.estimator.Estimator, all metrics functions return two Ops: "
           "`value_op` and  `update_op`. Estimator.evaluate calls the "
           "`update_op` for each batch of the data in input source and, once "
           "it is exhausted, it call the `value_op` to get the metric values. "
           "The `value_op` here should have dependency back to variables "
           "reading only, rather than reading another batch from input. "
           "Otherwise, the `value_op`, executed by `FinalOpsHook`, triggers "
           "another data reading, which ends OutOfRangeError/StopIteration. "
           "Please fix that.";
  }
  return s;
}

}  // namespace cohort::training
