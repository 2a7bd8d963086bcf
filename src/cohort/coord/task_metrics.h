// Training progress in the job's coordination key-value store: each
// training task publishes its latest TaskMetrics under
// cohort/metrics/<task> (training/metrics_publisher_hook.h, at most once a
// second); the launcher reads the directory to print its progress line and
// to draw the job's page (docs/ui.md).
//
//   coord::TaskMetrics m{.task = "worker:1", .global_step = 1200, ...};
//   store.Insert(coord::MetricsKey(m.task), coord::EncodeTaskMetrics(m));
//   ...
//   coord::MetricsHistory history;
//   history.Add(*coord::DecodeTaskMetrics(value, key));
//
// The value is a JSON object: {"task", "global_step", "loss" (absent when
// not known), "examples_per_sec", "global_steps_per_sec", "last_step" (the
// step training stops at; absent when not known), "time_unix_ms"}.
//
// Thread safety: the functions are pure; MetricsHistory is thread-safe.
#ifndef COHORT_COORD_TASK_METRICS_H_
#define COHORT_COORD_TASK_METRICS_H_

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace cohort::coord {

// The key-value directory the metrics live in.
inline constexpr char kMetricsDir[] = "cohort/metrics";
// A published value longer than this is refused by the reader.
inline constexpr size_t kMaxMetricsValueBytes = 4096;

struct TaskMetrics {
  std::string task;  // "worker:1"
  int64_t global_step = 0;
  std::optional<double> loss;
  double examples_per_sec = 0;      // this task's, over its last interval
  double global_steps_per_sec = 0;  // the job's, as this task saw it
  std::optional<int64_t> last_step;
  int64_t time_unix_ms = 0;  // the task's clock
  // When the reader saw this value (its own clock; not encoded): freshness
  // is judged by it, so a task's skewed clock decides nothing.
  int64_t received_unix_ms = 0;
};

// "cohort/metrics/worker:1".
std::string MetricsKey(absl::string_view task);
std::string EncodeTaskMetrics(const TaskMetrics& m);
// InvalidArgument naming `key` for a value that is too long, not JSON, has
// a field of the wrong type, or a number out of range: steps and times are
// integers in [0, 2^53], rates finite in [0, 1e12].
absl::StatusOr<TaskMetrics> DecodeTaskMetrics(absl::string_view value,
                                              absl::string_view key);

// The points a reader has seen, per task, oldest first: at most
// `max_points` per task (the oldest go first) and at most `max_tasks`
// tasks (a new one beyond is dropped). A value with the same time as the
// task's newest point is not added again.
class MetricsHistory {
 public:
  explicit MetricsHistory(size_t max_points = 600, size_t max_tasks = 4096)
      : max_points_(max_points), max_tasks_(max_tasks) {}

  void Add(const TaskMetrics& m);
  void Clear();
  std::map<std::string, std::vector<TaskMetrics>> Series() const;
  // Each task's newest point.
  std::vector<TaskMetrics> Latest() const;

 private:
  const size_t max_points_;
  const size_t max_tasks_;
  mutable absl::Mutex mu_;
  std::map<std::string, std::deque<TaskMetrics>> series_ ABSL_GUARDED_BY(mu_);
};

// The job's progress from each task's newest point: the highest global
// step and last step; the sum of examples/s of the tasks whose point was
// received within `fresh` before `now` (a finished or lost task no longer
// counts); and, when the last step is known, the time left at the
// global-step rate of the most recently received point, if that is fresh.
struct JobProgress {
  int64_t global_step = 0;
  std::optional<int64_t> last_step;
  double examples_per_sec = 0;
  std::optional<absl::Duration> eta;
  int tasks = 0;  // tasks that published
};
JobProgress ProgressOf(const std::vector<TaskMetrics>& latest, absl::Time now,
                       absl::Duration fresh = absl::Seconds(10));
// "progress: global step 1200/2000 (60%), 5,120 examples/s, ETA 16s";
// empty when no task published yet.
std::string ProgressLine(const JobProgress& p);

}  // namespace cohort::coord

#endif  // COHORT_COORD_TASK_METRICS_H_
