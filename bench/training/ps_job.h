// The parameter-server job (examples/train/train_ps, the main job) as
// `cohort bench training` measures it: `cohort launch`'s library starts one
// ps and N workers of train_ps (worker:0 is the chief), each training task
// writes when each of its steps finished (--step-times-dir, step_log.h),
// and the job's examples/s is counted over one span common to all workers.
//
// The common span (CommonMeasuredSpan) skips `warmup` steps of each worker
// and starts when the last worker's warm-up ends: max over workers of the
// end of its step `warmup` (1-based). It ends when the first worker stops:
// min over workers of the end of its last step. Every worker's steps that
// end inside (start, end] count. So a worker training alone, before the
// others started or after one stopped, adds nothing, and 2 workers are
// measured only while both run. bench/peers/peer_common.py's common_span
// computes the same for the PyTorch peer.
//
// Thread safety: thread-compatible.
#ifndef COHORT_BENCH_TRAINING_PS_JOB_H_
#define COHORT_BENCH_TRAINING_PS_JOB_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "examples/train/step_log.h"

namespace cohort::bench {

struct CommonSpan {
  int64_t start_unix_us = 0;
  int64_t end_unix_us = 0;
  int64_t steps = 0;     // every worker's steps ending in (start, end]
  int64_t examples = 0;  // their examples (each log's batch)
  double examples_per_second = 0;
};

// The span of `workers` (one log per worker) after `warmup` (>= 1) steps
// each. Errors:
//  - InvalidArgument: no workers, or warmup < 1;
//  - FailedPrecondition: a worker ran no step past its warm-up (naming its
//    task and step count), or the workers' measured steps do not overlap
//    (naming the two tasks): raise the job's steps.
absl::StatusOr<CommonSpan> CommonMeasuredSpan(
    const std::vector<examples::StepLog>& workers, int warmup);

struct PsJobOptions {
  std::string train_ps;  // path of the train_ps binary
  int workers = 1;
  int64_t steps = 1000;  // the job's last global step (train_ps --steps)
  int batch = 64;
  int hidden = 1024;  // units of each hidden layer (train_ps --hidden)
  int warmup = 10;
};

struct PsJobResult {
  CommonSpan span;
  double heldout_accuracy = 0;  // the chief's, at the end
  int64_t global_step = 0;      // the chief's final evaluation's
};

// Runs the job once (blocking until it ends) and measures it. Errors name
// the job's shape and say what to check:
//  - the launcher's (the job could not start, e.g. NotFound for train_ps);
//  - Internal: a task failed (with the launcher's root cause and the tail
//    of the job's output), or a worker wrote no readable step log;
//  - CommonMeasuredSpan's.
absl::StatusOr<PsJobResult> RunPsJob(const PsJobOptions& options);

}  // namespace cohort::bench

#endif  // COHORT_BENCH_TRAINING_PS_JOB_H_
