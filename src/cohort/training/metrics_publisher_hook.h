// MetricsPublisherHook: puts this task's training progress (global step,
// loss, examples/s, the job's global steps/s, the last step) into the job's
// coordination key-value store under cohort/metrics/<task>
// (coord/task_metrics.h), where `cohort launch` reads it for its progress
// line and its page (docs/ui.md). The role of TensorFlow's StepCounterHook,
// with the coordination service as the summary writer.
//
//   MetricsPublisherOptions o;
//   o.task = "worker:1";
//   o.loss_tensor = "loss:0";
//   o.examples_per_step = 64;
//   o.last_step = 2000;
//   COHORT_ASSIGN_OR_RETURN(o.put, MetricsPutFromEnvironment(env));
//   hooks.push_back(*MetricsPublisherHook::Create(std::move(o)));
//
// At most one value per `interval` (the rate is bounded, whatever the step
// time), and one at End. The writes happen on the hook's own thread: a
// training step never waits for the store, and a slow or unreachable store
// costs samples (the newest replaces one not yet written), never steps. A
// failed write is logged once per run of failures, not returned.
//
// Thread safety: as SessionRunHook; `put` is called from the hook's thread.
#ifndef COHORT_TRAINING_METRICS_PUBLISHER_HOOK_H_
#define COHORT_TRAINING_METRICS_PUBLISHER_HOOK_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "cohort/coord/task_metrics.h"
#include "cohort/training/session_run_hook.h"

namespace cohort {
class Env;
}

namespace cohort::training {

// Writes (overwriting) one key of the job's store.
using MetricsPut = std::function<absl::Status(const std::string& key,
                                              const std::string& value)>;

struct MetricsPublisherOptions {
  std::string task;         // "worker:1"
  std::string loss_tensor;  // empty: no loss published
  int64_t examples_per_step = 0;
  std::optional<int64_t> last_step;
  absl::Duration interval = absl::Seconds(1);
  MetricsPut put;
  Env* env = nullptr;  // null = Env::Default()
};

class MetricsPublisherHook : public SessionRunHook {
 public:
  // InvalidArgument: no task, no put, an interval <= 0, or a negative
  // examples_per_step.
  static absl::StatusOr<std::shared_ptr<MetricsPublisherHook>> Create(
      MetricsPublisherOptions options);
  ~MetricsPublisherHook() override;

  absl::Status Begin(Scope* graph) override;
  absl::StatusOr<std::optional<SessionRunArgs>> BeforeRun(
      SessionRunContext* ctx) override;
  absl::Status AfterRun(SessionRunContext* ctx,
                        const SessionRunValues& values) override;
  // Publishes the last sample and waits (at most 2 s) for it to be written.
  absl::Status End(Session* session) override;

 private:
  explicit MetricsPublisherHook(MetricsPublisherOptions options);
  void Sample(int64_t global_step, std::optional<double> loss, absl::Time now);
  void WriterLoop();
  void StopWriter();

  const MetricsPublisherOptions options_;
  Env* const env_;
  std::string step_tensor_;
  // Training thread only.
  absl::Time window_start_ = absl::InfinitePast();
  int64_t window_local_steps_ = 0;
  int64_t window_first_global_step_ = 0;
  std::optional<coord::TaskMetrics> last_;
  int64_t latest_step_ = 0;
  std::optional<double> latest_loss_;

  absl::Mutex mu_;
  std::optional<coord::TaskMetrics> pending_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread writer_;
};

// The store `cohort launch` gives its tasks (the coordination service named
// by COHORT_COORDINATION_SERVICE_ADDRESS, with COHORT_JOB_TOKEN); each write
// has a 2 s deadline. NotFound when the program does not run under
// `cohort launch` (nothing to publish to).
absl::StatusOr<MetricsPut> MetricsPutFromEnvironment(Env* env);

}  // namespace cohort::training

#endif  // COHORT_TRAINING_METRICS_PUBLISHER_HOOK_H_
