#include "cohort/coord/task_metrics.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cohort/base/json.h"

namespace cohort::coord {

std::string MetricsKey(absl::string_view task) {
  return absl::StrCat(kMetricsDir, "/", task);
}

std::string EncodeTaskMetrics(const TaskMetrics& m) {
  Json j;
  j["task"] = m.task;
  j["global_step"] = m.global_step;
  if (m.loss.has_value() && std::isfinite(*m.loss)) j["loss"] = *m.loss;
  j["examples_per_sec"] = m.examples_per_sec;
  j["global_steps_per_sec"] = m.global_steps_per_sec;
  if (m.last_step.has_value()) j["last_step"] = *m.last_step;
  j["time_unix_ms"] = m.time_unix_ms;
  return JsonDump(j);
}

namespace {

// The largest integer a double holds exactly.
constexpr double kMaxInteger = 9007199254740992.0;  // 2^53
constexpr double kMaxRate = 1e12;

absl::Status Number(const Json& j, const char* field, absl::string_view key,
                    bool required, bool integer, std::optional<double>* out) {
  auto it = j.find(field);
  if (it == j.end() || it->is_null()) {
    if (!required) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrCat("metrics at ", key, ": \"", field, "\" is missing"));
  }
  if (!it->is_number()) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics at ", key, ": \"", field,
                     "\" must be a number, got ", JsonTypeName(*it)));
  }
  const double v = it->get<double>();
  const double max = integer ? kMaxInteger : kMaxRate;
  if (!std::isfinite(v) || v < 0 || v > max ||
      (integer && v != std::floor(v))) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics at ", key, ": \"", field, "\" must be ",
                     integer ? "an integer" : "a number", " in [0, ", max,
                     "], got ", JsonPreview(*it)));
  }
  *out = v;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<TaskMetrics> DecodeTaskMetrics(absl::string_view value,
                                              absl::string_view key) {
  if (value.size() > kMaxMetricsValueBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "metrics at ", key, " are ", value.size(), " bytes, more than the ",
        kMaxMetricsValueBytes, " a task's metrics may take"));
  }
  auto parsed = ParseJson(value, absl::StrCat("metrics at ", key));
  if (!parsed.ok()) return parsed.status();
  const Json& j = *parsed;
  if (!j.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics at ", key, " must be a JSON object"));
  }
  TaskMetrics m;
  auto task =
      JsonOptionalString(j, "task", absl::StrCat("metrics at ", key), "task");
  if (!task.ok()) return task.status();
  if (!task->has_value() || (*task)->empty() || (*task)->size() > 128) {
    return absl::InvalidArgumentError(absl::StrCat(
        "metrics at ", key, ": \"task\" must name the task (1-128 chars)"));
  }
  m.task = **task;
  std::optional<double> step, loss, eps, gps, last, time;
  for (auto [field, required, integer, out] :
       {std::make_tuple("global_step", true, true, &step),
        std::make_tuple("examples_per_sec", true, false, &eps),
        std::make_tuple("global_steps_per_sec", true, false, &gps),
        std::make_tuple("last_step", false, true, &last),
        std::make_tuple("time_unix_ms", true, true, &time)}) {
    if (absl::Status s = Number(j, field, key, required, integer, out);
        !s.ok()) {
      return s;
    }
  }
  // A loss can be any finite number (JSON has no NaN or infinity).
  if (auto it = j.find("loss"); it != j.end() && !it->is_null()) {
    if (!it->is_number()) {
      return absl::InvalidArgumentError(
          absl::StrCat("metrics at ", key, ": \"loss\" must be a number, got ",
                       JsonTypeName(*it)));
    }
    loss = it->get<double>();
  }
  m.global_step = static_cast<int64_t>(*step);
  m.loss = loss;
  m.examples_per_sec = *eps;
  m.global_steps_per_sec = *gps;
  if (last.has_value()) m.last_step = static_cast<int64_t>(*last);
  m.time_unix_ms = static_cast<int64_t>(*time);
  return m;
}

void MetricsHistory::Clear() {
  absl::MutexLock lock(&mu_);
  series_.clear();
}

void MetricsHistory::Add(const TaskMetrics& m) {
  absl::MutexLock lock(&mu_);
  if (series_.size() >= max_tasks_ && series_.count(m.task) == 0) return;
  std::deque<TaskMetrics>& s = series_[m.task];
  if (!s.empty() && s.back().time_unix_ms == m.time_unix_ms) return;
  s.push_back(m);
  while (s.size() > max_points_) s.pop_front();
}

std::map<std::string, std::vector<TaskMetrics>> MetricsHistory::Series() const {
  absl::MutexLock lock(&mu_);
  std::map<std::string, std::vector<TaskMetrics>> out;
  for (const auto& [task, points] : series_) {
    out[task].assign(points.begin(), points.end());
  }
  return out;
}

std::vector<TaskMetrics> MetricsHistory::Latest() const {
  absl::MutexLock lock(&mu_);
  std::vector<TaskMetrics> out;
  for (const auto& [task, points] : series_) out.push_back(points.back());
  return out;
}

JobProgress ProgressOf(const std::vector<TaskMetrics>& latest, absl::Time now,
                       absl::Duration fresh) {
  JobProgress p;
  const int64_t fresh_after = absl::ToUnixMillis(now - fresh);
  const TaskMetrics* newest = nullptr;
  for (const TaskMetrics& m : latest) {
    ++p.tasks;
    p.global_step = std::max(p.global_step, m.global_step);
    if (m.last_step.has_value()) {
      p.last_step = std::max(p.last_step.value_or(0), *m.last_step);
    }
    if (m.received_unix_ms < fresh_after) continue;
    p.examples_per_sec += m.examples_per_sec;
    if (newest == nullptr || m.received_unix_ms > newest->received_unix_ms) {
      newest = &m;
    }
  }
  // The job's step rate as the task heard from last saw it.
  if (p.last_step.has_value() && newest != nullptr &&
      newest->global_steps_per_sec > 0) {
    const int64_t left = std::max<int64_t>(0, *p.last_step - p.global_step);
    p.eta = absl::Seconds(left / newest->global_steps_per_sec);
  }
  return p;
}

namespace {

// Values are bounded by DecodeTaskMetrics: sums of at most 4096 rates of
// at most 1e12 fit an int64.
std::string Grouped(int64_t n) {
  std::string digits = absl::StrCat(n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out.push_back(',');
    out.push_back(digits[i]);
  }
  return out;
}

std::string Eta(absl::Duration d) {
  const int64_t s = absl::ToInt64Seconds(absl::Ceil(d, absl::Seconds(1)));
  if (s < 60) return absl::StrCat(s, "s");
  if (s < 3600) return absl::StrFormat("%dm%02ds", s / 60, s % 60);
  return absl::StrFormat("%dh%02dm", s / 3600, (s % 3600) / 60);
}

}  // namespace

std::string ProgressLine(const JobProgress& p) {
  if (p.tasks == 0) return "";
  std::string line = absl::StrCat("progress: global step ", p.global_step);
  if (p.last_step.has_value() && *p.last_step > 0) {
    const double percent = std::min(
        100.0, 100.0 * static_cast<double>(p.global_step) / *p.last_step);
    absl::StrAppend(&line, "/", *p.last_step, " (", static_cast<int>(percent),
                    "%)");
  }
  absl::StrAppend(
      &line, ", ",
      Grouped(static_cast<int64_t>(std::llround(p.examples_per_sec))),
      " examples/s");
  // An ETA beyond a year is no estimate.
  if (p.eta.has_value() && *p.eta < absl::Hours(24 * 365)) {
    absl::StrAppend(&line, ", ETA ", Eta(*p.eta));
  }
  return line;
}

}  // namespace cohort::coord
