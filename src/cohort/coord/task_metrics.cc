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

absl::Status Number(const Json& j, const char* field, absl::string_view key,
                    bool required, std::optional<double>* out) {
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
  *out = it->get<double>();
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
  for (auto [field, required, out] :
       {std::make_tuple("global_step", true, &step),
        std::make_tuple("loss", false, &loss),
        std::make_tuple("examples_per_sec", true, &eps),
        std::make_tuple("global_steps_per_sec", true, &gps),
        std::make_tuple("last_step", false, &last),
        std::make_tuple("time_unix_ms", true, &time)}) {
    if (absl::Status s = Number(j, field, key, required, out); !s.ok()) {
      return s;
    }
  }
  m.global_step = static_cast<int64_t>(*step);
  m.loss = loss;
  m.examples_per_sec = *eps;
  m.global_steps_per_sec = *gps;
  if (last.has_value()) m.last_step = static_cast<int64_t>(*last);
  m.time_unix_ms = static_cast<int64_t>(*time);
  return m;
}

void MetricsHistory::Add(const TaskMetrics& m) {
  absl::MutexLock lock(&mu_);
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

JobProgress ProgressOf(const std::vector<TaskMetrics>& latest) {
  JobProgress p;
  double steps_per_sec = 0;
  int64_t newest_ms = -1;
  for (const TaskMetrics& m : latest) {
    ++p.tasks;
    p.global_step = std::max(p.global_step, m.global_step);
    if (m.last_step.has_value()) {
      p.last_step = std::max(p.last_step.value_or(0), *m.last_step);
    }
    p.examples_per_sec += m.examples_per_sec;
    // The job's step rate as the task that published last saw it.
    if (m.time_unix_ms > newest_ms) {
      newest_ms = m.time_unix_ms;
      steps_per_sec = m.global_steps_per_sec;
    }
  }
  if (p.last_step.has_value() && steps_per_sec > 0) {
    const int64_t left = std::max<int64_t>(0, *p.last_step - p.global_step);
    p.eta = absl::Seconds(left / steps_per_sec);
  }
  return p;
}

namespace {

std::string Grouped(int64_t n) {
  std::string digits = absl::StrCat(n < 0 ? -n : n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out.push_back(',');
    out.push_back(digits[i]);
  }
  return n < 0 ? "-" + out : out;
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
    absl::StrAppend(&line, "/", *p.last_step, " (",
                    std::min<int64_t>(100, p.global_step * 100 / *p.last_step),
                    "%)");
  }
  absl::StrAppend(
      &line, ", ",
      Grouped(static_cast<int64_t>(std::llround(p.examples_per_sec))),
      " examples/s");
  if (p.eta.has_value()) absl::StrAppend(&line, ", ETA ", Eta(*p.eta));
  return line;
}

}  // namespace cohort::coord
