#include "bench/training/ps_job.h"

#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "cohort/base/env.h"
#include "cohort/launch/launcher.h"

namespace cohort::bench {
namespace {

// How many of the job's last output lines an error carries: enough for a
// task's error and the launcher's summary, not a whole run.
constexpr size_t kOutputTail = 20;

// Steps of `times` (sorted) that end in (start, end].
int64_t StepsIn(const std::vector<int64_t>& times, int64_t start, int64_t end) {
  return std::upper_bound(times.begin(), times.end(), end) -
         std::upper_bound(times.begin(), times.end(), start);
}

std::string Shape(int workers) {
  return absl::StrCat("the ps job (1 ps, ", workers, " worker",
                      workers > 1 ? "s" : "", " of train_ps)");
}

// Removes a directory this run created; a failure only leaves a temporary
// directory behind, which is not worth failing a measurement for.
void RemoveDir(const std::string& dir) {
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
}

}  // namespace

absl::StatusOr<CommonSpan> CommonMeasuredSpan(
    const std::vector<examples::StepLog>& workers, int warmup) {
  if (workers.empty()) {
    return absl::InvalidArgumentError("no worker's step log to measure");
  }
  if (warmup < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("the warm-up must be at least one step (got ", warmup,
                     "): the span starts when a warm-up step ends"));
  }
  size_t last_to_start = 0, first_to_stop = 0;
  for (size_t i = 0; i < workers.size(); ++i) {
    const std::vector<int64_t>& t = workers[i].step_end_unix_us;
    if (t.size() <= static_cast<size_t>(warmup)) {
      return absl::FailedPreconditionError(
          absl::StrCat(workers[i].task, " ran ", t.size(),
                       " step(s), none past the warm-up of ", warmup,
                       "; raise the job's steps (--ps-steps)"));
    }
    const std::vector<int64_t>& a = workers[last_to_start].step_end_unix_us;
    if (t[warmup - 1] > a[warmup - 1]) last_to_start = i;
    const std::vector<int64_t>& b = workers[first_to_stop].step_end_unix_us;
    if (t.back() < b.back()) first_to_stop = i;
  }
  CommonSpan span;
  span.start_unix_us = workers[last_to_start].step_end_unix_us[warmup - 1];
  span.end_unix_us = workers[first_to_stop].step_end_unix_us.back();
  if (span.end_unix_us <= span.start_unix_us) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the workers did not train together: ", workers[first_to_stop].task,
        " ended its last step at ", span.end_unix_us, " us (Unix time), ",
        "not after ", workers[last_to_start].task, " ended its warm-up at ",
        span.start_unix_us, " us; raise the job's steps (--ps-steps)"));
  }
  for (const examples::StepLog& w : workers) {
    const int64_t n =
        StepsIn(w.step_end_unix_us, span.start_unix_us, span.end_unix_us);
    span.steps += n;
    span.examples += n * w.batch;
  }
  span.examples_per_second =
      static_cast<double>(span.examples) /
      (static_cast<double>(span.end_unix_us - span.start_unix_us) * 1e-6);
  return span;
}

absl::StatusOr<PsJobResult> RunPsJob(const PsJobOptions& options) {
  std::string dir =
      (std::filesystem::temp_directory_path() / "cohort-bench-ps-XXXXXX")
          .string();
  if (mkdtemp(dir.data()) == nullptr) {
    return absl::InternalError(absl::StrCat(
        "cannot create a directory like ", dir,
        " for the ps job's step logs; check TMPDIR and its free space"));
  }
  launch::LaunchOptions o;
  o.num_workers = options.workers;
  o.num_ps = 1;
  o.command = {options.train_ps,
               "--steps",
               std::to_string(options.steps),
               "--batch",
               std::to_string(options.batch),
               "--hidden",
               std::to_string(options.hidden),
               "--log-every",
               "0",
               "--step-times-dir",
               dir};
  o.progress = false;
  o.stop_grace = absl::Seconds(2);
  absl::Mutex mu;
  std::vector<std::string> lines;
  // Launcher threads deliver both streams; only an error shows them.
  auto keep = [&](const std::string& line) {
    absl::MutexLock lock(&mu);
    lines.push_back(line);
    if (lines.size() > kOutputTail) lines.erase(lines.begin());
  };
  o.output = keep;
  o.messages = keep;
  launch::Launcher launcher(Env::Default(), o);
  absl::StatusOr<launch::LaunchResult> launched = launcher.Run();
  if (launched.ok()) RemoveDir(launched->log_dir);
  if (!launched.ok() || !launched->succeeded) {
    RemoveDir(dir);
    absl::MutexLock lock(&mu);
    const std::string why = !launched.ok()
                                ? std::string(launched.status().message())
                                : launched->failure_summary;
    const std::string message = absl::StrCat(
        Shape(options.workers), " failed; the launcher says: ", why,
        lines.empty() ? "" : "; output ends: ", absl::StrJoin(lines, " | "));
    if (!launched.ok()) {
      return absl::Status(launched.status().code(), message);
    }
    return absl::InternalError(message);
  }
  std::vector<examples::StepLog> logs;
  for (int i = 0; i < options.workers; ++i) {
    const std::string path =
        absl::StrCat(dir, "/", examples::StepLogFileName("worker", i));
    absl::StatusOr<examples::StepLog> log =
        examples::ReadStepLog(Env::Default(), path);
    if (!log.ok()) {
      RemoveDir(dir);
      return absl::InternalError(absl::StrCat(
          Shape(options.workers), " succeeded but worker:", i,
          "'s step log is unreadable: ", log.status().message(), "; is ",
          options.train_ps, " a train_ps with --step-times-dir?"));
    }
    logs.push_back(*std::move(log));
  }
  RemoveDir(dir);
  // worker:0 is the chief (the job has no chief task): its log carries the
  // final evaluation.
  if (!logs[0].heldout_accuracy.has_value() ||
      !logs[0].global_step.has_value()) {
    return absl::InternalError(
        absl::StrCat(Shape(options.workers),
                     ": worker:0 (the chief) logged no final "
                     "held-out evaluation; did its FinalOpsHook run?"));
  }
  absl::StatusOr<CommonSpan> span = CommonMeasuredSpan(logs, options.warmup);
  if (!span.ok()) {
    return absl::Status(
        span.status().code(),
        absl::StrCat(Shape(options.workers), ": ", span.status().message()));
  }
  PsJobResult result;
  result.span = *span;
  result.heldout_accuracy = *logs[0].heldout_accuracy;
  result.global_step = *logs[0].global_step;
  return result;
}

}  // namespace cohort::bench
