#include "cohort/launch/job_board.h"

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace cohort::launch {

JobBoard::Attempt* JobBoard::AttemptEntry(std::vector<Attempt>& attempts,
                                          int attempt) {
  for (auto& a : attempts) {
    if (a.attempt == attempt) return &a;
  }
  attempts.push_back({});
  attempts.back().attempt = attempt;
  if (attempts.size() > JobBoard::kMaxAttempts) {
    attempts.erase(attempts.begin());
  }
  return &attempts.back();
}

void JobBoard::TaskStarted(const std::string& task, const std::string& host,
                           int pid, int attempt, int restart,
                           const std::string& log_path, absl::Time when) {
  absl::MutexLock lock(&mu_);
  Task& t = tasks_[task];
  t.host = host;
  t.pid = pid;
  t.attempt = attempt;
  t.restarts = restart;
  t.process = "running";
  t.exit.clear();
  t.log_path = log_path;
  t.started = when;
  AttemptEntry(attempts_, attempt);
}

void JobBoard::TaskExited(const std::string& task, int pid, bool ok,
                          const std::string& how, absl::Time when) {
  absl::MutexLock lock(&mu_);
  auto it = tasks_.find(task);
  // A process that a restart already replaced says nothing of the task.
  if (it == tasks_.end() || it->second.pid != pid) return;
  it->second.process = ok ? "exited" : "failed";
  it->second.exit = how;
}

void JobBoard::AttemptEnded(int attempt, const std::string& outcome,
                            const std::string& cause, absl::Time when) {
  absl::MutexLock lock(&mu_);
  Attempt* a = AttemptEntry(attempts_, attempt);
  a->outcome = outcome;
  a->cause = cause;
  a->ended = when;
}

Json JobBoard::TasksJson() const {
  absl::MutexLock lock(&mu_);
  Json out = Json::object();
  for (const auto& [name, t] : tasks_) {
    Json j;
    j["host"] = t.host;
    j["pid"] = t.pid;
    j["attempt"] = t.attempt;
    j["restarts"] = t.restarts;
    j["process"] = t.process;
    if (!t.exit.empty()) j["exit"] = t.exit;
    j["started_unix_ms"] = absl::ToUnixMillis(t.started);
    out[name] = j;
  }
  return out;
}

Json JobBoard::AttemptsJson() const {
  absl::MutexLock lock(&mu_);
  Json out = Json::array();
  for (const Attempt& a : attempts_) {
    Json j;
    j["attempt"] = a.attempt;
    j["outcome"] = a.outcome;
    j["cause"] = a.cause;
    j["ended_unix_ms"] =
        a.ended.has_value() ? Json(absl::ToUnixMillis(*a.ended)) : Json();
    out.push_back(j);
  }
  return out;
}

absl::StatusOr<std::string> JobBoard::LogPath(const std::string& task) const {
  absl::MutexLock lock(&mu_);
  auto it = tasks_.find(task);
  if (it == tasks_.end()) {
    return absl::NotFoundError(
        absl::StrCat("no task ", task,
                     " has started under this launcher; the tasks are "
                     "listed at /api/v1/tasks"));
  }
  return it->second.log_path;
}

absl::StatusOr<std::string> TailOfFile(const std::string& path,
                                       size_t max_lines, size_t max_bytes) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("cannot open the log ", path, ": ", std::strerror(errno)));
  }
  std::fseek(f, 0, SEEK_END);
  const long size = std::ftell(f);
  const long from = size > static_cast<long>(max_bytes)
                        ? size - static_cast<long>(max_bytes)
                        : 0;
  std::fseek(f, from, SEEK_SET);
  std::string data(static_cast<size_t>(size - from), '\0');
  data.resize(std::fread(data.data(), 1, data.size(), f));
  std::fclose(f);
  if (from > 0) {
    // Drop the partial first line.
    size_t nl = data.find('\n');
    data = nl == std::string::npos ? "" : data.substr(nl + 1);
  }
  size_t lines = 0, pos = data.size();
  if (pos > 0 && data[pos - 1] == '\n') --pos;
  while (pos > 0) {
    size_t nl = data.rfind('\n', pos - 1);
    if (++lines == max_lines || nl == std::string::npos) {
      if (lines == max_lines && nl != std::string::npos)
        data = data.substr(nl + 1);
      break;
    }
    pos = nl;
  }
  return data;
}

}  // namespace cohort::launch
