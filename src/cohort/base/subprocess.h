// Child processes: spawn a program in its own process group with its stdout
// (and, unless discarded, stderr) on one pipe, tied to the life of the
// spawning thread, wait for it, and signal its whole group (the program and
// everything it started), always by process group id, never by name; and
// RunProgram, which runs one to its end with a deadline and collects its
// output.
//
// Why in base/: Env::RunCommand (the injected way resolvers run tools such
// as nvidia-smi, called from cluster/, below launch/) runs on RunProgram, so
// the one way to spawn a child sits at the bottom of the layers. The
// launcher's name for it, launch/process.h, forwards here.
//
// Thread safety: a Subprocess may be signalled from any thread while another
// thread waits for it; Wait(), WaitFor() and CloseInput() must be called by
// one thread only. RunProgram
// may be called from any thread.
#ifndef COHORT_BASE_SUBPROCESS_H_
#define COHORT_BASE_SUBPROCESS_H_

#include <sys/types.h>

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace cohort {

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
  // Where the program's stderr goes.
  enum class Stderr {
    kIntoOutput,  // the same pipe as stdout, interleaved as written
    kDiscard,     // /dev/null: only stdout is read (a tool's answer)
    kInherit,     // this process's stderr (a helper's diagnostics)
  };

  struct SpawnOptions {
    Stderr stderr_to = Stderr::kIntoOutput;
    // Gives the program a pipe as stdin, written through input_fd(), instead
    // of /dev/null (a helper that runs until its input closes).
    bool input_pipe = false;
  };

  // Starts argv[0] (searched in PATH) with exactly `env` ("KEY=VALUE") as its
  // environment, in a new process group, stdin from /dev/null (or the input
  // pipe), stdout (and stderr, as options.stderr_to says) into a pipe whose
  // read end is output_fd().
  // Handled signals and SIGINT, SIGTERM, SIGHUP, SIGPIPE, SIGQUIT and SIGCHLD
  // start at their defaults (other ignored ones stay ignored) and none is
  // blocked. NotFound when the program does not exist, Internal on other
  // spawn failures (both name the program and the errno). Blocks only until
  // the program has exec'd.
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
      const std::vector<std::string>& argv, const std::vector<std::string>& env,
      const SpawnOptions& options);
  static absl::StatusOr<std::unique_ptr<Subprocess>> Spawn(
      const std::vector<std::string>& argv, const std::vector<std::string>& env,
      Stderr stderr_to = Stderr::kIntoOutput);

  // Closes the pipes. Does not kill or wait for the process.
  ~Subprocess();
  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;

  pid_t pid() const { return pid_; }
  // Read end of the child's output pipe (owned by this object).
  int output_fd() const { return output_fd_; }
  // Reads the output pipe until end of file (the program and everything
  // that inherited the pipe closed it); blocks as long as that takes.
  std::string ReadOutputToEnd();
  // Write end of the child's stdin pipe (owned by this object); -1 without
  // SpawnOptions::input_pipe or after CloseInput().
  int input_fd() const { return input_fd_; }
  // Closes the stdin pipe: the program reads end of file.
  void CloseInput();

  // Blocks until the process exits and reaps it. Once reaped, returns the
  // same ExitInfo again.
  ExitInfo Wait();
  // Waits at most `timeout`: how it ended, or nullopt while it still runs.
  std::optional<ExitInfo> WaitFor(absl::Duration timeout);

  // Sends `sig` to the process group (the child and its descendants that
  // stayed in the group). Never blocks; harmless after the group is gone.
  void SignalGroup(int sig);

 private:
  Subprocess(pid_t pid, int output_fd, int input_fd)
      : pid_(pid), output_fd_(output_fd), input_fd_(input_fd) {}
  const pid_t pid_;
  const int output_fd_;
  int input_fd_;
  std::optional<ExitInfo> exit_;  // once reaped
};

// The current process's environment as "KEY=VALUE" strings, with the
// entries of `overrides` ("KEY=VALUE") replacing or adding variables; an
// override without '=' ("KEY") removes that variable.
std::vector<std::string> EnvironmentWith(
    const std::vector<std::string>& overrides);

struct RunProgramOptions {
  // Applied to this process's environment (EnvironmentWith).
  std::vector<std::string> env_overrides;
  // From the spawn; past it the program's group is killed (SIGKILL).
  absl::Duration deadline = absl::Minutes(1);
  Subprocess::Stderr stderr_to = Subprocess::Stderr::kIntoOutput;
  // Output past this many bytes is read and dropped (the program is not
  // stalled on a full pipe); `truncated` says so.
  size_t max_output_bytes = size_t{16} << 20;
};

struct ProgramRun {
  // OK when the program exited with code 0. Otherwise it names the command
  // ("`nvidia-smi --list-gpus`") and says what happened: NotFound (no such
  // program: check PATH), Internal (another spawn failure, the program
  // exited non-zero or was killed by a signal: the exit and the last lines
  // of its output; or reading its output failed: the errno, and the group
  // was killed), DeadlineExceeded (still running at the deadline, whether
  // or not it had closed its output: killed, with the output so far).
  absl::Status status;
  // How it ended; nullopt when it did not start or RunProgram killed it (at
  // the deadline, or when its output could not be read).
  std::optional<ExitInfo> exit;
  // Everything read from the pipe (up to max_output_bytes).
  std::string output;
  bool truncated = false;
};

// Runs argv (no shell: argv[0] searched in PATH; pass {"/bin/sh", "-c",
// script} where a shell is wanted) to its end, collecting its output, and
// waits for it. Blocks up to options.deadline, the wait for the exit after
// the output closed included, plus the time to reap the killed group. Runs
// as a Subprocess: the program dies with the calling thread. Output past
// max_output_bytes does not fail the run (`truncated` says so): a caller
// that needs all of it checks the flag.
ProgramRun RunProgram(const std::vector<std::string>& argv,
                      const RunProgramOptions& options = {});

// The running binary's path (/proc/self/exe), "" when it cannot be read: for
// a program that starts itself again, or finds files beside itself.
std::string ExecutablePath();

// "`a b 'c d'`": argv for messages, each argument quoted when it has a
// blank, quote or shell character.
std::string DescribeCommand(const std::vector<std::string>& argv);

}  // namespace cohort

#endif  // COHORT_BASE_SUBPROCESS_H_
