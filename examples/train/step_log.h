// StepLog: when each training step of one task of the parameter-server job
// finished. train_ps --step-times-dir DIR writes one per training task when
// its loop ends; `cohort bench training` reads them to count the examples
// every worker trained over one span common to all of them (a task's own
// window would count the time a worker trains alone, before the others
// start or after they stop, as if the job ran at that rate).
//
// File: DIR/<job>-<index>.json (StepLogFileName), one JSON object:
//   {"task": "worker:1", "batch": 64,
//    "step_end_unix_us": [1795000000000000, ...],   // one per local step
//    "global_step": 400, "heldout_accuracy": 0.93}  // the chief only
// Times are the wall clock (microseconds since the Unix epoch) when the
// step's Session::Run returned, so the tasks of one host share a clock.
//
// Thread safety: stateless functions; thread-safe.
#ifndef COHORT_EXAMPLES_TRAIN_STEP_LOG_H_
#define COHORT_EXAMPLES_TRAIN_STEP_LOG_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "cohort/base/env.h"

namespace cohort::examples {

struct StepLog {
  std::string task;  // "worker:1", "chief:0" or "local"
  int batch = 0;     // examples per step
  std::vector<int64_t> step_end_unix_us;
  // Set by the chief only: its final held-out evaluation.
  std::optional<int64_t> global_step;
  std::optional<double> heldout_accuracy;
};

// "worker-1.json" for ("worker", 1); "local.json" for an empty task type
// (train_ps run outside a cluster).
std::string StepLogFileName(const std::string& task_type, int task_id);

// Writes `log` to `path` (atomically: a reader never sees half a file).
// Internal naming the path when it cannot be written.
absl::Status WriteStepLog(const std::string& path, const StepLog& log);

// Parses a StepLog; `what` (a path) names it in errors. InvalidArgument
// when it is not JSON, lacks "task", "batch" or "step_end_unix_us", has a
// field of the wrong type, a batch that is not positive, or step times that
// go backwards (naming the step).
absl::StatusOr<StepLog> ParseStepLog(absl::string_view text,
                                     absl::string_view what);

// Reads `path` through `env` and parses it. Errors: Env::ReadFile's
// (NotFound when the file does not exist), then ParseStepLog's.
absl::StatusOr<StepLog> ReadStepLog(Env* env, const std::string& path);

}  // namespace cohort::examples

#endif  // COHORT_EXAMPLES_TRAIN_STEP_LOG_H_
