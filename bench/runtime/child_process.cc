#include "bench/runtime/child_process.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <fstream>
#include <mutex>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace cohort::bench {
namespace {

// The process groups of the children still running, so that a benchmark
// interrupted by a signal (Ctrl-C reaches only the terminal's foreground
// group, not our children's own groups) does not leave `cohort server`s
// behind. Slots hold a group id or 0; the handler only reads them and
// calls kill(), both async-signal-safe.
constexpr int kMaxLiveGroups = 64;
std::atomic<pid_t> live_groups[kMaxLiveGroups];

void StopChildrenAndDie(int sig) {
  for (std::atomic<pid_t>& group : live_groups) {
    const pid_t pgid = group.load(std::memory_order_relaxed);
    if (pgid > 0) kill(-pgid, SIGTERM);
  }
  // SA_RESETHAND restored the default action: die of the same signal.
  raise(sig);
}

// Installs StopChildrenAndDie for the termination signals whose action is
// still the default (a program that handles them itself keeps its
// handler).
void InstallSignalHandlersOnce() {
  static std::once_flag once;
  std::call_once(once, [] {
    for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
      struct sigaction old;
      if (sigaction(sig, nullptr, &old) != 0 || old.sa_handler != SIG_DFL) {
        continue;
      }
      struct sigaction action = {};
      action.sa_handler = StopChildrenAndDie;
      action.sa_flags = SA_RESETHAND;
      sigemptyset(&action.sa_mask);
      sigaction(sig, &action, nullptr);
    }
  });
}

// Returns the slot now holding `pgid`, or -1 when all are taken (the child
// then is only stopped by this object, not on a signal).
int RegisterGroup(pid_t pgid) {
  for (int i = 0; i < kMaxLiveGroups; ++i) {
    pid_t expected = 0;
    if (live_groups[i].compare_exchange_strong(expected, pgid)) return i;
  }
  return -1;
}

}  // namespace

absl::StatusOr<double> ProcessCpuSeconds(pid_t pid) {
  const std::string path = absl::StrCat("/proc/", pid, "/stat");
  std::ifstream in(path);
  std::string stat;
  if (!in || !std::getline(in, stat)) {
    return absl::NotFoundError(
        absl::StrCat("cannot read ", path, " (has process ", pid, " exited?)"));
  }
  // "pid (comm) state ppid ...": comm may hold spaces and parentheses, so
  // fields are counted from the last ')'. utime and stime are fields 14
  // and 15 of the line, the 12th and 13th after the ')'.
  const size_t paren = stat.rfind(')');
  std::vector<absl::string_view> fields =
      absl::StrSplit(absl::string_view(stat).substr(
                         paren == std::string::npos ? 0 : paren + 1),
                     ' ', absl::SkipEmpty());
  uint64_t utime = 0, stime = 0;
  if (paren == std::string::npos || fields.size() < 13 ||
      !absl::SimpleAtoi(fields[11], &utime) ||
      !absl::SimpleAtoi(fields[12], &stime)) {
    return absl::InternalError(
        absl::StrCat("unexpected format of ", path, ": ", stat));
  }
  return static_cast<double>(utime + stime) / sysconf(_SC_CLK_TCK);
}

absl::StatusOr<std::unique_ptr<ChildProcess>> ChildProcess::Start(
    std::string name, const std::vector<std::string>& argv,
    const std::vector<std::string>& env_overrides) {
  // Before the spawn: a signal in between would leave the child behind.
  InstallSignalHandlersOnce();
  absl::StatusOr<std::unique_ptr<launch::Subprocess>> process =
      launch::Subprocess::Spawn(argv, launch::EnvironmentWith(env_overrides));
  if (!process.ok()) {
    return absl::Status(process.status().code(),
                        absl::StrCat(name, ": ", process.status().message()));
  }
  std::unique_ptr<ChildProcess> child(
      new ChildProcess(std::move(name), *std::move(process)));
  // The child leads its own group (launch::Subprocess).
  child->signal_slot_ = RegisterGroup(child->pid());
  // Started here rather than in the constructor so that the thread never
  // sees a half-built object.
  child->reader_ = std::thread([c = child.get()] { c->ReadOutput(); });
  return child;
}

ChildProcess::~ChildProcess() { Stop(absl::Seconds(5)); }

void ChildProcess::ReadOutput() {
  char buf[64 << 10];
  for (;;) {
    const ssize_t n = read(process_->output_fd(), buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    absl::MutexLock lock(&mu_);
    const size_t room = kMaxCapturedBytes - captured_.size();
    captured_.append(buf, std::min(room, static_cast<size_t>(n)));
    partial_line_.append(buf, static_cast<size_t>(n));
    size_t start = 0;
    for (size_t nl; (nl = partial_line_.find('\n', start)) != std::string::npos;
         start = nl + 1) {
      AddLineLocked(partial_line_.substr(start, nl - start));
    }
    partial_line_.erase(0, start);
    // A log line never ends (no newline for 64 KiB): keep only its end.
    if (partial_line_.size() > sizeof(buf)) {
      partial_line_.erase(0, partial_line_.size() - sizeof(buf));
    }
    changed_.SignalAll();
  }
  // The write end closes when the child (and anything it started that
  // kept the pipe) has exited.
  absl::MutexLock lock(&mu_);
  if (!partial_line_.empty()) AddLineLocked(std::move(partial_line_));
  partial_line_.clear();
  eof_ = true;
  changed_.SignalAll();
}

void ChildProcess::AddLineLocked(std::string line) {
  tail_.push_back(std::move(line));
  if (tail_.size() > kTailLines) tail_.pop_front();
}

absl::StatusOr<std::string> ChildProcess::AwaitLine(absl::string_view prefix,
                                                    absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  absl::MutexLock lock(&mu_);
  for (;;) {
    // Only complete lines count: the line may still be arriving.
    for (absl::string_view line :
         absl::StrSplit(absl::string_view(captured_), '\n')) {
      if (line.data() + line.size() == captured_.data() + captured_.size()) {
        break;  // The last piece has no newline yet.
      }
      if (absl::StartsWith(line, prefix)) {
        return std::string(line.substr(prefix.size()));
      }
    }
    if (eof_) {
      return absl::FailedPreconditionError(absl::StrCat(
          name_, " (pid ", process_->pid(), ") exited before printing \"",
          prefix, "...\"; its output ends: ", absl::StrJoin(tail_, " | ")));
    }
    if (changed_.WaitWithDeadline(&mu_, deadline)) {
      return absl::DeadlineExceededError(absl::StrCat(
          name_, " (pid ", process_->pid(), ") printed no \"", prefix,
          "...\" line within ", absl::FormatDuration(timeout),
          "; its output ends: ", absl::StrJoin(tail_, " | ")));
    }
  }
}

bool ChildProcess::AwaitExit(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  absl::MutexLock lock(&mu_);
  while (!eof_) {
    if (changed_.WaitWithDeadline(&mu_, deadline)) return eof_;
  }
  return true;
}

launch::ExitInfo ChildProcess::ReapLocked() {
  if (exit_.has_value()) return *exit_;
  if (reader_.joinable()) reader_.join();
  // Forgotten before it is reaped: after that its group id may be reused.
  if (signal_slot_ >= 0) live_groups[signal_slot_].store(0);
  exit_ = process_->Wait();
  return *exit_;
}

absl::StatusOr<launch::ExitInfo> ChildProcess::WaitForExit(
    absl::Duration timeout) {
  absl::MutexLock reap(&reap_mu_);
  if (exit_.has_value()) return *exit_;
  if (AwaitExit(timeout)) return ReapLocked();
  process_->SignalGroup(SIGKILL);
  // The pipe closes once the group is gone; reaping waits for that.
  ReapLocked();
  return absl::DeadlineExceededError(
      absl::StrCat(name_, " (pid ", process_->pid(), ") did not finish within ",
                   absl::FormatDuration(timeout),
                   " and was killed; its output ends: ", Tail()));
}

void ChildProcess::Terminate() {
  absl::MutexLock reap(&reap_mu_);
  if (!exit_.has_value()) process_->SignalGroup(SIGTERM);
}

launch::ExitInfo ChildProcess::Stop(absl::Duration grace) {
  absl::MutexLock reap(&reap_mu_);
  if (exit_.has_value()) return *exit_;
  // Already gone (it exited by itself): nothing to signal.
  if (!AwaitExit(absl::ZeroDuration())) {
    process_->SignalGroup(SIGTERM);
    if (!AwaitExit(grace)) process_->SignalGroup(SIGKILL);
  }
  return ReapLocked();
}

std::string ChildProcess::output() const {
  absl::MutexLock lock(&mu_);
  return captured_;
}

std::string ChildProcess::Tail() const {
  absl::MutexLock lock(&mu_);
  return absl::StrJoin(tail_, " | ");
}

}  // namespace cohort::bench
