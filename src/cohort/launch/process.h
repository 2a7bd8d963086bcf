// Child processes for the gang launcher: spawn a program in its own process
// group with its stdout and stderr on one pipe, tied to the life of the
// spawning thread, wait for it, and signal its whole group (the program and
// everything it started), always by process group id, never by name.
//
// Thread safety: a Subprocess may be signalled from any thread while another
// thread waits for it; Wait() must be called by one thread only.
#ifndef COHORT_LAUNCH_PROCESS_H_
#define COHORT_LAUNCH_PROCESS_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace cohort::launch {

// How a process ended.
struct ExitInfo {
  bool signaled = false;
  // The exit code, or the signal number when `signaled`.
  int value = 0;

  bool ok() const { return !signaled && value == 0; }
  // "exited with code 3", "killed by signal 9 (SIGKILL)".
  std::string Describe() const;
  // The shell convention: the code, or 128 + signal.
  int ShellCode() const { return signaled ? 128 + value : value; }
};

class Subprocess {
 public:
  // Starts argv[0] (searched in PATH) with exactly `env` ("KEY=VALUE") as its
  // environment, in a new process group, stdin from /dev/null, stdout and
  // stderr into a pipe whose read end is output_fd(). Handled signals and
  // SIGINT, SIGTERM, SIGHUP, SIGPIPE, SIGQUIT and SIGCHLD start at their
  // defaults (other ignored ones stay ignored) and none is blocked. NotFound
  // when the program does not exist, Internal on other spawn failures (both
  // name the program and the errno). Blocks only until the program has exec'd.
  //
  // The program is killed (SIGKILL) when the thread that spawned it ends,
  // however that happens (PR_SET_PDEATHSIG): a launcher killed outright
  // leaves no orphan program behind. Spawn from a thread that outlives the
  // program. The tie holds across the program's own exec()s, except into a
  // set-user-ID, set-group-ID or file-capability binary. Processes the
  // program starts are not covered; those that keep writing to the
  // inherited pipe get SIGPIPE once the launcher is gone.
  //
  // argv[0] is searched as execvp does (PATH, then "/bin/sh FILE" for a
  // file without "#!"); no fork handler runs.
  static absl::StatusOr<std::unique_ptr<Subprocess>> Spawn(
      const std::vector<std::string>& argv,
      const std::vector<std::string>& env);

  // Closes the pipe. Does not kill or wait for the process.
  ~Subprocess();
  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;

  pid_t pid() const { return pid_; }
  // Read end of the child's stdout+stderr pipe (owned by this object).
  int output_fd() const { return output_fd_; }

  // Blocks until the process exits and reaps it.
  ExitInfo Wait();

  // Sends `sig` to the process group (the child and its descendants that
  // stayed in the group). Never blocks; harmless after the group is gone.
  void SignalGroup(int sig);

 private:
  Subprocess(pid_t pid, int output_fd) : pid_(pid), output_fd_(output_fd) {}
  const pid_t pid_;
  const int output_fd_;
};

// The current process's environment as "KEY=VALUE" strings, with the
// entries of `overrides` ("KEY=VALUE") replacing or adding variables; an
// override without '=' ("KEY") removes that variable.
std::vector<std::string> EnvironmentWith(
    const std::vector<std::string>& overrides);

}  // namespace cohort::launch

#endif  // COHORT_LAUNCH_PROCESS_H_
