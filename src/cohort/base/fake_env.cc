#include "cohort/base/fake_env.h"

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace cohort {

// A fixed, realistic start time (November 2023): tests see the same
// timestamps on every run, and nothing mistakes the clock for "unset".
FakeEnv::FakeEnv() : now_(absl::FromUnixSeconds(1'700'000'000)) {}

void FakeEnv::AdvanceTime(absl::Duration d) {
  absl::MutexLock lock(&mu_);
  now_ += d;
}

void FakeEnv::SetTime(absl::Time t) {
  absl::MutexLock lock(&mu_);
  now_ = t;
}

absl::Time FakeEnv::Now() {
  absl::MutexLock lock(&mu_);
  return now_;
}

void FakeEnv::SleepFor(absl::Duration d) {
  absl::MutexLock lock(&mu_);
  const absl::Time wake = now_ + d;
  auto reached = [this, wake]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return now_ >= wake;
  };
  // Sleepers are counted and their wake times kept so that a test can wait
  // until the code under test is parked (BlockUntilSleepers,
  // BlockUntilParked) before it moves the clock: no real-time sleep decides
  // the order.
  ++sleepers_;
  auto it = sleep_until_.insert(wake);
  mu_.Await(absl::Condition(&reached));
  sleep_until_.erase(it);
  --sleepers_;
}

void FakeEnv::BlockUntilSleepers(int n) {
  absl::MutexLock lock(&mu_);
  auto enough = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return sleepers_ >= n;
  };
  mu_.Await(absl::Condition(&enough));
}

void FakeEnv::BlockUntilAwaiting(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  auto parked = [this, deadline]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return await_deadlines_.count(deadline) > 0;
  };
  mu_.Await(absl::Condition(&parked));
}

bool FakeEnv::BlockUntilParked(int n, absl::Duration limit) {
  absl::MutexLock lock(&mu_);
  // Only waits whose time is still ahead count: one already due is about to
  // return, not parked.
  auto parked = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const absl::Time now = now_;
    const auto future = [now](const std::multiset<absl::Time>& times) {
      return std::distance(times.upper_bound(now), times.end());
    };
    return future(sleep_until_) + future(await_deadlines_) >= n;
  };
  return mu_.AwaitWithTimeout(absl::Condition(&parked), limit);
}

bool FakeEnv::AwaitWithDeadline(absl::Mutex* mu, const absl::Condition& cond,
                                absl::Time deadline) {
  {
    absl::MutexLock lock(&mu_);
    await_deadlines_.insert(deadline);
  }
  // The fake clock moves without touching `mu`, so `mu` alone cannot wake us
  // when the deadline passes: re-check every millisecond of real time.
  bool met = true;
  while (!cond.Eval()) {
    if (Now() >= deadline) {
      met = false;
      break;
    }
    mu->AwaitWithTimeout(cond, absl::Milliseconds(1));
  }
  absl::MutexLock lock(&mu_);
  await_deadlines_.erase(await_deadlines_.find(deadline));
  return met;
}

std::optional<std::string> FakeEnv::GetVar(absl::string_view name) {
  absl::MutexLock lock(&mu_);
  auto it = vars_.find(name);
  if (it == vars_.end()) return std::nullopt;
  return it->second;
}

void FakeEnv::SetVar(absl::string_view name, absl::string_view value) {
  absl::MutexLock lock(&mu_);
  vars_[std::string(name)] = std::string(value);
}

void FakeEnv::UnsetVar(absl::string_view name) {
  absl::MutexLock lock(&mu_);
  auto it = vars_.find(name);
  if (it != vars_.end()) vars_.erase(it);
}

void FakeEnv::SetFile(const std::string& path, std::string contents) {
  absl::MutexLock lock(&mu_);
  files_[path] = std::move(contents);
}

absl::StatusOr<std::string> FakeEnv::ReadFile(const std::string& path) {
  absl::MutexLock lock(&mu_);
  auto it = files_.find(path);
  if (it == files_.end()) {
    return absl::NotFoundError(
        absl::StrCat("cannot open ", path, ": no such file"));
  }
  return it->second;
}

void FakeEnv::SetCommandOutput(const std::string& program,
                               absl::StatusOr<std::string> output) {
  absl::MutexLock lock(&mu_);
  commands_.insert_or_assign(program, std::move(output));
}

absl::StatusOr<std::string> FakeEnv::RunCommand(
    const std::vector<std::string>& argv) {
  if (argv.empty()) return absl::InvalidArgumentError("RunCommand: empty argv");
  absl::MutexLock lock(&mu_);
  auto it = commands_.find(argv[0]);
  if (it == commands_.end()) {
    return absl::NotFoundError(
        absl::StrCat("program not found: ", argv[0], " (is it in PATH?)"));
  }
  return it->second;
}

}  // namespace cohort
