#include "examples/train/step_log.h"

#include <limits>

#include "absl/strings/str_cat.h"
#include "cohort/base/json.h"
#include "cohort/base/status.h"
#include "cohort/graph/checkpoint.h"

namespace cohort::examples {

std::string StepLogFileName(const std::string& task_type, int task_id) {
  if (task_type.empty()) return "local.json";
  return absl::StrCat(task_type, "-", task_id, ".json");
}

absl::Status WriteStepLog(const std::string& path, const StepLog& log) {
  Json j = {{"task", log.task},
            {"batch", log.batch},
            {"step_end_unix_us", log.step_end_unix_us}};
  if (log.global_step.has_value()) j["global_step"] = *log.global_step;
  if (log.heldout_accuracy.has_value()) {
    j["heldout_accuracy"] = *log.heldout_accuracy;
  }
  // Atomic: the bench reads the files once the job ended, but a task killed
  // mid-write must leave no file rather than a truncated one that parses as
  // fewer steps.
  return WriteFileAtomically(path, JsonDump(j) + "\n");
}

absl::StatusOr<StepLog> ParseStepLog(absl::string_view text,
                                     absl::string_view what) {
  COHORT_ASSIGN_OR_RETURN(Json j, ParseJson(text, what));
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": ", why,
                     " (a step log of train_ps "
                     "--step-times-dir: examples/train/step_log.h)"));
  };
  if (!j.is_object()) return bad("not a JSON object");
  StepLog log;
  if (!j.contains("task") || !j["task"].is_string()) {
    return bad("\"task\" must be a string");
  }
  log.task = j["task"].get<std::string>();
  if (!j.contains("batch") || !j["batch"].is_number_integer() ||
      j["batch"].get<int64_t>() <= 0 ||
      j["batch"].get<int64_t>() > std::numeric_limits<int>::max()) {
    return bad("\"batch\" must be a positive integer that fits in an int");
  }
  log.batch = j["batch"].get<int>();
  if (!j.contains("step_end_unix_us") || !j["step_end_unix_us"].is_array()) {
    return bad("\"step_end_unix_us\" must be an array");
  }
  const Json& times = j["step_end_unix_us"];
  log.step_end_unix_us.reserve(times.size());
  for (size_t i = 0; i < times.size(); ++i) {
    if (!times[i].is_number_integer()) {
      return bad(absl::StrCat("step ", i, "'s time is not an integer"));
    }
    const int64_t t = times[i].get<int64_t>();
    // A step cannot end before the one before it: times that go backwards
    // were not written by one training loop (or the wall clock was set
    // back mid-run, which spoils any span measured across it).
    if (i > 0 && t < log.step_end_unix_us.back()) {
      return bad(absl::StrCat("step ", i, " ends at ", t, " us, before step ",
                              i - 1, " (", log.step_end_unix_us.back(),
                              " us)"));
    }
    log.step_end_unix_us.push_back(t);
  }
  if (j.contains("global_step")) {
    if (!j["global_step"].is_number_integer()) {
      return bad("\"global_step\" must be an integer");
    }
    log.global_step = j["global_step"].get<int64_t>();
  }
  if (j.contains("heldout_accuracy")) {
    if (!j["heldout_accuracy"].is_number()) {
      return bad("\"heldout_accuracy\" must be a number");
    }
    log.heldout_accuracy = j["heldout_accuracy"].get<double>();
  }
  return log;
}

absl::StatusOr<StepLog> ReadStepLog(Env* env, const std::string& path) {
  COHORT_ASSIGN_OR_RETURN(std::string text, env->ReadFile(path));
  return ParseStepLog(text, path);
}

}  // namespace cohort::examples
