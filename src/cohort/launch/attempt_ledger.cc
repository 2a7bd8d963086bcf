#include "cohort/launch/attempt_ledger.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "cohort/base/json.h"
#include "cohort/base/status.h"

namespace cohort::launch {
namespace {

constexpr char kSucceeded[] = "succeeded";
// How long one watch call parks before the thread checks whether it was
// asked to stop: bounds the ledger's destruction, not how fast a verdict is
// seen (the watch answers the moment the key is written).
constexpr absl::Duration kWatchSlice = absl::Seconds(1);

}  // namespace

// --- FailureRecord ---------------------------------------------------------

std::string FailureRecord::Encode() const {
  return JsonDump(Json{{"task", task},
                       {"job_task", job_task},
                       {"where", where},
                       {"reason", reason},
                       {"code", code},
                       {"interrupted", interrupted},
                       {"when_ns", absl::ToUnixNanos(when)},
                       {"after_ms", absl::ToInt64Milliseconds(after_start)},
                       {"log_path", log_path},
                       {"tail", tail}});
}

FailureRecord FailureRecord::Decode(const std::string& text, int num_tasks,
                                    int tail_lines) {
  FailureRecord r;
  r.task = "?";
  r.reason = "failed (its failure record is unreadable)";
  absl::StatusOr<Json> j = ParseJson(text, "the failure record");
  if (!j.ok() || !j->is_object()) return r;
  auto text_of = [&](const char* key, size_t cap) -> std::string {
    return JsonStringOr(*j, key).substr(0, cap);
  };
  auto int_of = [&](const char* key, int64_t fallback) -> int64_t {
    return JsonIntOr(*j, key, fallback);
  };
  constexpr size_t kFieldCap = 4096;
  if (std::string task = text_of("task", 64); !task.empty()) r.task = task;
  if (std::string reason = text_of("reason", kFieldCap); !reason.empty()) {
    r.reason = reason;
  }
  r.where = text_of("where", 256);
  r.log_path = text_of("log_path", kFieldCap);
  const int64_t job_task = int_of("job_task", 0);
  r.job_task =
      job_task >= 0 && job_task < num_tasks ? static_cast<int>(job_task) : 0;
  // A failed job never exits 0: codes outside 1..255 become 1.
  const int64_t code = int_of("code", 1);
  r.code = code >= 1 && code <= 255 ? static_cast<int>(code) : 1;
  r.interrupted = JsonBoolOr(*j, "interrupted", false);
  r.when = absl::FromUnixNanos(int_of("when_ns", 0));
  r.after_start = absl::Milliseconds(
      std::clamp<int64_t>(int_of("after_ms", 0), 0, int64_t{1} << 40));
  if (auto tail = j->find("tail"); tail != j->end() && tail->is_array()) {
    for (const Json& line : *tail) {
      if (static_cast<int>(r.tail.size()) >= std::max(1, tail_lines)) break;
      if (line.is_string()) {
        r.tail.push_back(line.get<std::string>().substr(0, kFieldCap));
      }
    }
  }
  return r;
}

// --- LocalAttemptLedger ----------------------------------------------------

LocalAttemptLedger::LocalAttemptLedger(int must_finish,
                                       std::function<void()> changed)
    : must_finish_(must_finish), changed_(std::move(changed)) {}

absl::Status LocalAttemptLedger::RecordFailure(const FailureRecord& record) {
  {
    absl::MutexLock lock(&mu_);
    if (verdict_.has_value()) return absl::OkStatus();
    verdict_ = AttemptVerdict{false, record};
  }
  changed_();
  return absl::OkStatus();
}

absl::Status LocalAttemptLedger::RecordDone(int job_task) {
  {
    absl::MutexLock lock(&mu_);
    if (std::find(done_.begin(), done_.end(), job_task) != done_.end()) {
      return absl::OkStatus();
    }
    done_.push_back(job_task);
    if (verdict_.has_value() || static_cast<int>(done_.size()) < must_finish_) {
      return absl::OkStatus();
    }
    verdict_ = AttemptVerdict{true, {}};
  }
  changed_();
  return absl::OkStatus();
}

std::optional<AttemptVerdict> LocalAttemptLedger::Verdict() {
  absl::MutexLock lock(&mu_);
  return verdict_;
}

// --- ControlPlaneLedger ----------------------------------------------------

std::string ControlPlaneLedger::Key(int attempt, const std::string& name) {
  return absl::StrCat("cohort/launch/", attempt, "/", name);
}

ControlPlaneLedger::ControlPlaneLedger(Options options)
    : options_(std::move(options)) {
  watcher_ = std::thread([this] { Watch(); });
}

ControlPlaneLedger::~ControlPlaneLedger() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  watcher_.join();
}

void ControlPlaneLedger::Watch() {
  const std::string key = Key(options_.attempt, "verdict");
  int64_t after_version = 0;
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (stop_ || verdict_.has_value()) return;
    }
    absl::StatusOr<coord::KeyValueWatchResult> seen =
        options_.agent->WatchKeyValue(key, after_version, kWatchSlice);
    if (seen.ok() && seen->present) {
      Learn(seen->value);
      return;
    }
    // Absent at a newer version (written and deleted by some token holder):
    // watch past it, or the watch would answer at once again.
    if (seen.ok()) {
      after_version = std::max(after_version, seen->version);
      continue;
    }
    if (absl::IsDeadlineExceeded(seen.status())) continue;
    // The agent failed (lost control plane: the launcher hears it through
    // the agent's error callback) or the service is going away.
    if (options_.agent->state() !=
        coord::CoordinationAgent::State::kConnected) {
      return;
    }
    // A transient refusal: look again shortly, stoppable.
    absl::MutexLock lock(&mu_);
    mu_.AwaitWithTimeout(absl::Condition(&stop_), absl::Milliseconds(100));
  }
}

void ControlPlaneLedger::Learn(const std::string& value) {
  AttemptVerdict verdict;
  if (value == kSucceeded) {
    verdict.succeeded = true;
  } else {
    verdict.failure =
        FailureRecord::Decode(value, options_.num_tasks, options_.tail_lines);
  }
  {
    absl::MutexLock lock(&mu_);
    if (verdict_.has_value()) return;
    verdict_ = std::move(verdict);
  }
  options_.changed();
}

absl::Status ControlPlaneLedger::RecordFailure(const FailureRecord& record) {
  // The agent retries transient failures within its RPC deadline; what
  // still fails is the caller's to act on.
  absl::Status s = options_.agent->InsertKeyValue(
      Key(options_.attempt, "verdict"), record.Encode(), false);
  if (s.ok() || absl::IsAlreadyExists(s)) return absl::OkStatus();
  return Annotate(s, absl::StrCat("recording the failure of ", record.task,
                                  " in the control plane"));
}

absl::Status ControlPlaneLedger::RecordDone(int job_task) {
  absl::Status done = options_.agent->InsertKeyValue(
      Key(options_.attempt, absl::StrCat("done/", job_task)), "1", false);
  if (!done.ok() && !absl::IsAlreadyExists(done)) return done;
  // Whoever lists after the last insert sees every done key; two launchers
  // that both see the full list both try the insert, and one wins.
  absl::StatusOr<std::vector<std::pair<std::string, std::string>>> all =
      options_.agent->GetKeyValueDir(Key(options_.attempt, "done"));
  if (!all.ok()) return all.status();
  if (static_cast<int>(all->size()) < options_.must_finish) {
    return absl::OkStatus();
  }
  absl::Status s = options_.agent->InsertKeyValue(
      Key(options_.attempt, "verdict"), kSucceeded, false);
  return s.ok() || absl::IsAlreadyExists(s) ? absl::OkStatus() : s;
}

std::optional<AttemptVerdict> ControlPlaneLedger::Verdict() {
  absl::MutexLock lock(&mu_);
  return verdict_;
}

}  // namespace cohort::launch
