// A child process of the runtime benchmark (a `cohort server` task, iperf3)
// whose output is drained by a thread of its own.
//
// launch::Subprocess starts the program (own process group, stdout and
// stderr on one pipe); this class reads that pipe until it closes, keeping
// the first kMaxCapturedBytes of the output (iperf3's JSON report, a
// server's "serving" line) and its last lines (for error messages). Reading
// continuously matters: a server logs on stderr for as long as it runs, and
// a child blocked on a full pipe would stall the measurement.
//
//   COHORT_ASSIGN_OR_RETURN(auto child, ChildProcess::Start(
//       "ps:0", {exe, "server", ...}, {"COHORT_JOB_TOKEN=..."}));
//   COHORT_ASSIGN_OR_RETURN(std::string rest,
//       child->AwaitLine("serving ", absl::Seconds(30)));
//   ...
//   launch::ExitInfo how = child->Stop(absl::Seconds(5));
//
// Processes are signalled by their own process group id only (never by
// name), and the destructor stops a child that is still running. The first
// Start installs a handler for SIGINT, SIGTERM and SIGHUP (where their
// action is still the default) that sends SIGTERM to every child still
// running and then dies of the signal, so that an interrupted benchmark
// leaves no server behind.
//
// Thread safety: thread-safe; the reader thread is internal.
#ifndef COHORT_BENCH_RUNTIME_CHILD_PROCESS_H_
#define COHORT_BENCH_RUNTIME_CHILD_PROCESS_H_

#include <cstddef>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "cohort/launch/process.h"

namespace cohort::bench {

// CPU time (user + system, all threads) process `pid` has used so far, from
// /proc/PID/stat (clock-tick resolution, usually 10 ms); NotFound when
// the process is gone (or already reaped).
absl::StatusOr<double> ProcessCpuSeconds(pid_t pid);

class ChildProcess {
 public:
  // Output beyond this is counted but not kept (a server's log).
  static constexpr size_t kMaxCapturedBytes = 1 << 20;
  // Lines kept for Tail().
  static constexpr size_t kTailLines = 8;

  // Starts `argv` (argv[0] a path or a name searched in PATH) with this
  // process's environment plus `env_overrides` ("KEY=VALUE"). `name`
  // ("ps:0", "iperf3 client") names it in messages. NotFound when the
  // program does not exist; Internal on other spawn failures. Never blocks.
  static absl::StatusOr<std::unique_ptr<ChildProcess>> Start(
      std::string name, const std::vector<std::string>& argv,
      const std::vector<std::string>& env_overrides = {});

  ~ChildProcess();  // Stop(absl::Seconds(5)) unless it has exited.
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  // Blocks until the child printed a line starting with `prefix` and
  // returns the rest of that line. FailedPrecondition (with the tail of its
  // output) when the child exits first; DeadlineExceeded after `timeout`.
  absl::StatusOr<std::string> AwaitLine(absl::string_view prefix,
                                        absl::Duration timeout)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Blocks until the child's output pipe closes (it exited), at most
  // `timeout`; true when it has exited. Does not reap or signal it.
  bool AwaitExit(absl::Duration timeout) ABSL_LOCKS_EXCLUDED(mu_);

  // Blocks until the child exits by itself and returns how it ended;
  // after `timeout` it is killed (SIGKILL to its group) and the result is
  // DeadlineExceeded.
  absl::StatusOr<launch::ExitInfo> WaitForExit(absl::Duration timeout)
      ABSL_LOCKS_EXCLUDED(mu_);

  // SIGTERM to the child's process group unless it was reaped already
  // (its group id could name someone else's processes by then). Blocks
  // only while another thread is in Stop/WaitForExit.
  void Terminate() ABSL_LOCKS_EXCLUDED(reap_mu_);

  // SIGTERM to the child's process group, up to `grace` for it to exit,
  // then SIGKILL; reaps it and returns how it ended. Idempotent (later calls
  // return the first result). Blocks at most about `grace` plus the time
  // the kernel takes to deliver SIGKILL.
  launch::ExitInfo Stop(absl::Duration grace) ABSL_LOCKS_EXCLUDED(mu_);

  // The output captured so far (at most kMaxCapturedBytes).
  std::string output() const ABSL_LOCKS_EXCLUDED(mu_);
  // The last kTailLines lines, joined with " | " (for error messages).
  std::string Tail() const ABSL_LOCKS_EXCLUDED(mu_);
  const std::string& name() const { return name_; }
  pid_t pid() const { return process_->pid(); }

 private:
  ChildProcess(std::string name, std::unique_ptr<launch::Subprocess> process)
      : name_(std::move(name)), process_(std::move(process)) {}
  // The reader thread's body: reads the pipe until it closes.
  void ReadOutput() ABSL_LOCKS_EXCLUDED(mu_);
  void AddLineLocked(std::string line) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Joins the reader and reaps the child once it has exited; returns how
  // it ended. Callers serialise on reap_mu_.
  launch::ExitInfo ReapLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(reap_mu_);

  // Constant after Start.
  const std::string name_;
  const std::unique_ptr<launch::Subprocess> process_;
  std::thread reader_;
  int signal_slot_ = -1;  // In the signal handler's table; -1 = none.

  mutable absl::Mutex mu_;
  absl::CondVar changed_;  // Signalled on every new line and at EOF.
  std::string captured_ ABSL_GUARDED_BY(mu_);
  std::string partial_line_ ABSL_GUARDED_BY(mu_);
  std::deque<std::string> tail_ ABSL_GUARDED_BY(mu_);
  bool eof_ ABSL_GUARDED_BY(mu_) = false;

  // Serialises Stop/WaitForExit: only one thread may reap the child.
  absl::Mutex reap_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  std::optional<launch::ExitInfo> exit_ ABSL_GUARDED_BY(reap_mu_);
};

}  // namespace cohort::bench

#endif  // COHORT_BENCH_RUNTIME_CHILD_PROCESS_H_
