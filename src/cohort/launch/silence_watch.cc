#include "cohort/launch/silence_watch.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace cohort::launch {

SilenceWatch::SilenceWatch(Env* env, std::vector<Watched> watched,
                           absl::Duration silent_after,
                           absl::Duration lost_after,
                           std::function<void(const std::string&)> message)
    : env_(env),
      watched_(std::move(watched)),
      silent_after_(silent_after),
      lost_after_(lost_after),
      message_(std::move(message)) {}

SilenceWatch::~SilenceWatch() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void SilenceWatch::Start() {
  thread_ = std::thread([this] { Loop(); });
}

void SilenceWatch::Loop() {
  const absl::Duration period =
      std::clamp(silent_after_ / 4, absl::Milliseconds(10), absl::Seconds(1));
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      auto stopped = [this]()
                         ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_; };
      if (env_->AwaitWithDeadline(&mu_, absl::Condition(&stopped),
                                  env_->Now() + period)) {
        return;
      }
    }
    Check();
  }
}

void SilenceWatch::Check() {
  std::vector<std::string> lines;
  const absl::Time now = env_->Now();
  {
    absl::MutexLock lock(&mu_);
    for (const Watched& w : watched_) {
      const absl::Duration silent_after = w.silent_after > absl::ZeroDuration()
                                              ? w.silent_after
                                              : silent_after_;
      absl::StatusOr<std::vector<coord::TaskStateSnapshot>> states =
          w.service->GetTaskState({});
      if (!states.ok()) continue;  // the service stopped: the job is ending
      for (const coord::TaskStateSnapshot& s : *states) {
        auto where =
            std::find_if(w.tasks.begin(), w.tasks.end(),
                         [&](const auto& t) { return t.first == s.task; });
        if (where == w.tasks.end()) continue;
        const std::string& name = where->second;
        const bool connected = s.state == coord::TaskState::kConnected;
        const bool silent = connected && s.heartbeat_age >= silent_after;
        auto known = silent_.find(name);
        if (silent && known == silent_.end()) {
          silent_[name] = now - s.heartbeat_age;
          lines.push_back(absl::StrCat(
              name, " has sent no heartbeat for ",
              absl::FormatDuration(
                  absl::Trunc(s.heartbeat_age, absl::Milliseconds(100))),
              ": its host may be partitioned, stalled or down; it is declared "
              "lost ",
              absl::FormatDuration(lost_after_),
              " after its last heartbeat unless it is heard from "
              "(--heartbeat-timeout plus --partition-grace)"));
        } else if (!silent && known != silent_.end()) {
          if (connected) {
            lines.push_back(
                absl::StrCat(name, " is heard from again after ",
                             absl::FormatDuration(absl::Trunc(
                                 now - s.heartbeat_age - known->second,
                                 absl::Milliseconds(100))),
                             " of silence"));
          }
          silent_.erase(known);  // lost or gone: the service says so itself
        }
      }
    }
  }
  for (const std::string& line : lines) message_(line);
}

}  // namespace cohort::launch
