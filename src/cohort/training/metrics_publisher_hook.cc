#include "cohort/training/metrics_publisher_hook.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "cohort/base/env.h"
#include "cohort/base/logging.h"
#include "cohort/base/status.h"
#include "cohort/coord/coordination_client.h"
#include "cohort/coord/framed_coordination.h"
#include "cohort/rpc/transport.h"
#include "cohort/training/training_util.h"

namespace cohort::training {

absl::StatusOr<std::shared_ptr<MetricsPublisherHook>>
MetricsPublisherHook::Create(MetricsPublisherOptions options) {
  if (options.task.empty()) {
    return absl::InvalidArgumentError(
        "MetricsPublisherHook needs the task it publishes for");
  }
  if (!options.put) {
    return absl::InvalidArgumentError(
        "MetricsPublisherHook needs a store to put its metrics into");
  }
  if (options.interval <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("MetricsPublisherHook: interval must be > 0, got ",
                     absl::FormatDuration(options.interval)));
  }
  if (options.examples_per_step < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("MetricsPublisherHook: examples_per_step must be >= 0, "
                     "got ",
                     options.examples_per_step));
  }
  return std::shared_ptr<MetricsPublisherHook>(
      new MetricsPublisherHook(std::move(options)));
}

MetricsPublisherHook::MetricsPublisherHook(MetricsPublisherOptions options)
    : options_(std::move(options)),
      env_(options_.env != nullptr ? options_.env : Env::Default()) {}

MetricsPublisherHook::~MetricsPublisherHook() { StopWriter(); }

absl::Status MetricsPublisherHook::Begin(Scope* graph) {
  COHORT_ASSIGN_OR_RETURN(
      step_tensor_, GlobalStepReadForHook(*graph, "MetricsPublisherHook"));
  absl::MutexLock lock(&mu_);
  if (!writer_.joinable()) {
    stop_ = false;
    writer_ = std::thread([this] { WriterLoop(); });
  }
  return absl::OkStatus();
}

absl::StatusOr<std::optional<SessionRunArgs>> MetricsPublisherHook::BeforeRun(
    SessionRunContext* ctx) {
  SessionRunArgs a;
  a.fetches.push_back(step_tensor_);
  if (!options_.loss_tensor.empty()) a.fetches.push_back(options_.loss_tensor);
  return std::optional<SessionRunArgs>(std::move(a));
}

absl::Status MetricsPublisherHook::AfterRun(SessionRunContext* ctx,
                                            const SessionRunValues& values) {
  if (values.results.empty()) {
    return absl::InternalError("MetricsPublisherHook got no global step back");
  }
  COHORT_ASSIGN_OR_RETURN(int64_t step,
                          GlobalStepValue(values.results[0], "global step"));
  std::optional<double> loss;
  if (values.results.size() > 1) {
    // A loss that is no number is left out of the metrics, not fatal.
    if (absl::StatusOr<double> v =
            ScalarValue(values.results[1], options_.loss_tensor);
        v.ok()) {
      loss = *v;
    }
  }
  const absl::Time now = env_->Now();
  latest_step_ = step;
  latest_loss_ = loss;
  if (window_start_ == absl::InfinitePast()) {
    // The first step only opens the window: it includes the session's
    // start-up, which is no step rate.
    window_start_ = now;
    window_first_global_step_ = step;
    window_local_steps_ = 0;
    return absl::OkStatus();
  }
  ++window_local_steps_;
  if (now - window_start_ >= options_.interval) Sample(step, loss, now);
  return absl::OkStatus();
}

void MetricsPublisherHook::Sample(int64_t global_step,
                                  std::optional<double> loss, absl::Time now) {
  const double secs = absl::ToDoubleSeconds(now - window_start_);
  coord::TaskMetrics m;
  m.task = options_.task;
  m.global_step = global_step;
  m.loss = loss;
  if (secs > 0) {
    m.examples_per_sec =
        window_local_steps_ * options_.examples_per_step / secs;
    m.global_steps_per_sec = (global_step - window_first_global_step_) / secs;
  } else if (last_.has_value()) {
    m.examples_per_sec = last_->examples_per_sec;
    m.global_steps_per_sec = last_->global_steps_per_sec;
  }
  m.last_step = options_.last_step;
  m.time_unix_ms = absl::ToUnixMillis(now);
  window_start_ = now;
  window_first_global_step_ = global_step;
  window_local_steps_ = 0;
  last_ = m;
  absl::MutexLock lock(&mu_);
  pending_ = std::move(m);
}

void MetricsPublisherHook::WriterLoop() {
  bool failing = false;
  for (;;) {
    coord::TaskMetrics m;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](MetricsPublisherHook* h) ABSL_EXCLUSIVE_LOCKS_REQUIRED(h->mu_) {
            return h->stop_ || h->pending_.has_value();
          },
          this));
      if (!pending_.has_value()) return;  // stopped with nothing to write
      m = *std::move(pending_);
      pending_.reset();
      writing_ = true;
    }
    absl::Status s =
        options_.put(coord::MetricsKey(m.task), coord::EncodeTaskMetrics(m));
    if (!s.ok() && !failing) {
      COHORT_LOG(WARNING) << options_.task
                          << ": could not publish training metrics (the "
                             "job's page and progress line miss them until "
                             "a write succeeds): "
                          << s;
    }
    failing = !s.ok();
    absl::MutexLock lock(&mu_);
    writing_ = false;
  }
}

absl::Status MetricsPublisherHook::End(Session* session) {
  if (window_local_steps_ > 0) {
    // The steps since the last sample, the final one among them.
    Sample(latest_step_, latest_loss_, env_->Now());
  }
  {
    // Bounded: a store that does not answer must not hold the job's end.
    absl::MutexLock lock(&mu_);
    mu_.AwaitWithTimeout(
        absl::Condition(
            +[](MetricsPublisherHook* h) ABSL_EXCLUSIVE_LOCKS_REQUIRED(h->mu_) {
              return !h->pending_.has_value() && !h->writing_;
            },
            this),
        absl::Seconds(2));
  }
  StopWriter();
  return absl::OkStatus();
}

void MetricsPublisherHook::StopWriter() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
    pending_.reset();
  }
  if (writer_.joinable()) writer_.join();
}

absl::StatusOr<MetricsPut> MetricsPutFromEnvironment(Env* env) {
  std::optional<std::string> address =
      env->GetVar(coord::kEnvCoordinationAddress);
  if (!address.has_value() || address->empty()) {
    return absl::NotFoundError(absl::StrCat(
        coord::kEnvCoordinationAddress,
        " is not set: the program is not run by `cohort launch`, so there "
        "is no job store to publish metrics to"));
  }
  rpc::TransportSecurity security;
  security.job_token = env->GetVar(rpc::kJobTokenEnvVar).value_or("");
  COHORT_ASSIGN_OR_RETURN(std::unique_ptr<coord::CoordinationClient> client,
                          coord::NewCoordinationClient(*address, security));
  std::shared_ptr<coord::CoordinationClient> shared = std::move(client);
  return MetricsPut([shared](const std::string& key, const std::string& value) {
    coord::InsertKeyValueRequest request;
    request.mutable_kv()->set_key(key);
    request.mutable_kv()->set_value(value);
    request.set_allow_overwrite(true);
    coord::InsertKeyValueResponse response;
    coord::CallOptions call;
    call.timeout = absl::Seconds(2);
    return shared->InsertKeyValue(request, &response, call);
  });
}

}  // namespace cohort::training
