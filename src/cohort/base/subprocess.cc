#include "cohort/base/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <map>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "cohort/base/status.h"

extern char** environ;

namespace cohort {

std::string ExitInfo::Describe() const {
  if (!signaled) return absl::StrCat("exited with code ", value);
  const char* name = sigabbrev_np(value);
  return absl::StrCat("killed by signal ", value,
                      name != nullptr ? absl::StrCat(" (SIG", name, ")") : "");
}

namespace {

// The paths execvp would try for `name`, in order: `name` itself when it
// has a '/', otherwise each directory of the launcher's PATH.
std::vector<std::string> Candidates(const std::string& name) {
  if (name.find('/') != std::string::npos) return {name};
  const char* path = getenv("PATH");
  std::vector<std::string> out;
  for (absl::string_view dir :
       absl::StrSplit(path != nullptr ? path : "/bin:/usr/bin", ':')) {
    out.push_back(absl::StrCat(dir.empty() ? "." : dir, "/", name));
  }
  return out;
}

std::vector<char*> CStrings(const std::vector<std::string>& strings) {
  std::vector<char*> out;
  out.reserve(strings.size() + 1);
  for (const std::string& s : strings) {
    out.push_back(const_cast<char*>(s.c_str()));
  }
  out.push_back(nullptr);
  return out;
}

// What the child needs, all of it built before the fork.
struct ChildArgs {
  char* const* candidates;  // the paths to try, null-terminated
  char* const* argv;
  char* const* envp;
  // /bin/sh, a slot for the path, then argv[1...]: for files without "#!".
  char** sh_argv;
  int output_fd;
  int stderr_mode;  // a Subprocess::Stderr
  int input_fd;     // the stdin pipe's read end, or -1 for /dev/null
  int status_fd;    // the child writes errno here when it cannot exec
  pid_t launcher;
};

// The code between the fork and exec runs on a copy of a process whose
// other threads may have held any lock: raw system calls only, and no
// sanitizer instrumentation.
#if defined(__has_attribute) && \
    __has_attribute(disable_sanitizer_instrumentation)
#define COHORT_CHILD_CODE __attribute__((disable_sanitizer_instrumentation))
#else
#define COHORT_CHILD_CODE \
  __attribute__((no_sanitize("address", "thread", "undefined")))
#endif

// Reports `error` to the launcher and ends the child.
[[noreturn]] COHORT_CHILD_CODE void ChildFails(const ChildArgs& a, int error) {
  syscall(SYS_write, static_cast<long>(a.status_fd), &error, sizeof(error));
  syscall(SYS_exit_group, 127L);
  __builtin_unreachable();
}

// Makes `from` the descriptor `to`, kept across exec.
COHORT_CHILD_CODE bool MoveFd(long from, long to) {
  if (from == to) {
    return syscall(SYS_fcntl, to, static_cast<long>(F_SETFD), 0L) == 0;
  }
  return syscall(SYS_dup3, from, to, 0L) == to;
}

// The child, from the fork to exec. Any step that fails fails the spawn,
// with its errno.
[[noreturn]] COHORT_CHILD_CODE void RunChild(const ChildArgs& a) {
  if (syscall(SYS_setpgid, 0L, 0L) != 0) ChildFails(a, errno);
  // The program goes with the thread that started it, even when the
  // launcher is killed outright (SIGKILL leaves it no chance to clean up).
  if (syscall(SYS_prctl, static_cast<long>(PR_SET_PDEATHSIG),
              static_cast<long>(SIGKILL), 0L, 0L, 0L) != 0) {
    ChildFails(a, errno);
  }
  if (syscall(SYS_getppid) != a.launcher) ChildFails(a, ESRCH);  // it died
  // Spawn blocked every signal glibc lets it block (not its own 32 and 33,
  // which nothing sends here). No handler of the launcher may run in the
  // child once they are unblocked: handled signals go to their defaults
  // now, as exec would do, and so do the ignored ones the program must not
  // inherit. The kernel's struct sigaction starts with the handler on every
  // Linux ABI, and all zeros is SIG_DFL with no flags.
  for (long sig = 1; sig <= 64; ++sig) {
    if (sig == SIGKILL || sig == SIGSTOP) continue;
    alignas(8) char current[64] = {};
    if (syscall(SYS_rt_sigaction, sig, nullptr, current, 8L) != 0) continue;
    void* handler;
    __builtin_memcpy(&handler, current, sizeof(handler));
    const bool reset_ignored = sig == SIGINT || sig == SIGTERM ||
                               sig == SIGHUP || sig == SIGPIPE ||
                               sig == SIGQUIT || sig == SIGCHLD;
    if (handler == reinterpret_cast<void*>(SIG_DFL) ||
        (handler == reinterpret_cast<void*>(SIG_IGN) && !reset_ignored)) {
      continue;
    }
    alignas(8) char defaults[64] = {};
    if (syscall(SYS_rt_sigaction, sig, defaults, nullptr, 8L) != 0) {
      ChildFails(a, errno);
    }
  }
  const uint64_t none = 0;
  if (syscall(SYS_rt_sigprocmask, static_cast<long>(SIG_SETMASK), &none,
              nullptr, 8L) != 0) {
    ChildFails(a, errno);
  }
  // stdin from the input pipe or /dev/null; stdout into the output pipe;
  // stderr as asked (the output pipe, /dev/null, or left as it is). The
  // pipe ends in the parent all have O_CLOEXEC, so they are no more than
  // the fds 0 to 2 are made of.
  const long null_fd = syscall(SYS_openat, static_cast<long>(AT_FDCWD),
                               "/dev/null", static_cast<long>(O_RDWR));
  if (null_fd < 0) ChildFails(a, errno);
  const int mode = a.stderr_mode;
  if (mode != static_cast<int>(Subprocess::Stderr::kInherit)) {
    // stderr first: should /dev/null have opened as 1, moving the pipe
    // onto 1 would close it.
    const long err = mode == static_cast<int>(Subprocess::Stderr::kDiscard)
                         ? null_fd
                         : a.output_fd;
    if (!MoveFd(err, 2)) ChildFails(a, errno);
  }
  if (!MoveFd(a.output_fd, 1)) ChildFails(a, errno);
  if (!MoveFd(a.input_fd >= 0 ? a.input_fd : null_fd, 0)) {
    ChildFails(a, errno);
  }
  if (null_fd > 2) syscall(SYS_close, null_fd);
  // execvp's search: past paths that do not exist, remembering one that
  // was not permitted; any other error ends it.
  int error = ENOENT;
  for (char* const* path = a.candidates; *path != nullptr; ++path) {
    syscall(SYS_execve, *path, a.argv, a.envp);
    const int e = errno;
    if (e == ENOEXEC) {
      a.sh_argv[1] = *path;
      syscall(SYS_execve, a.sh_argv[0], a.sh_argv, a.envp);
      ChildFails(a, errno);
    }
    if (e == EACCES) {
      error = EACCES;
    } else if (e != ENOENT && e != ENOTDIR && e != ESTALE && e != ENODEV &&
               e != ETIMEDOUT) {
      ChildFails(a, e);
    }
  }
  ChildFails(a, error);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Subprocess>> Subprocess::Spawn(
    const std::vector<std::string>& argv, const std::vector<std::string>& env,
    const SpawnOptions& options) {
  if (argv.empty()) {
    return absl::InvalidArgumentError("cannot spawn an empty command");
  }
  // Everything the child needs is built here: after the fork it may not
  // allocate.
  const std::vector<std::string> candidates = Candidates(argv[0]);
  std::vector<char*> c_candidates = CStrings(candidates);
  std::vector<char*> c_argv = CStrings(argv);
  std::vector<char*> c_env = CStrings(env);
  std::vector<std::string> sh_args = {"/bin/sh", ""};
  sh_args.insert(sh_args.end(), argv.begin() + 1, argv.end());
  std::vector<char*> c_sh_argv = CStrings(sh_args);

  // `out` carries the program's output; `status` its exec error, closed
  // unread by a good exec; `in`, when asked for, its input.
  int out[2], status[2], in[2] = {-1, -1};
  if (pipe2(out, O_CLOEXEC) != 0) {
    return absl::InternalError(
        absl::StrCat("pipe for ", argv[0], " failed: ", strerror(errno)));
  }
  if (pipe2(status, O_CLOEXEC) != 0 ||
      (options.input_pipe && pipe2(in, O_CLOEXEC) != 0)) {
    const int e = errno;
    for (int fd : {out[0], out[1], status[0], status[1]}) close(fd);
    return absl::InternalError(
        absl::StrCat("pipe for ", argv[0], " failed: ", strerror(e)));
  }
  const ChildArgs child{c_candidates.data(),
                        c_argv.data(),
                        c_env.data(),
                        c_sh_argv.data(),
                        out[1],
                        static_cast<int>(options.stderr_to),
                        in[0],
                        status[1],
                        getpid()};
  // No handler of this process may run in the child before exec: every
  // signal stays blocked until the child has reset them.
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &old);
  // _Fork, not fork: no atfork handler runs (gRPC's, with
  // GRPC_ENABLE_FORK_SUPPORT, would start threads in the child).
  const pid_t pid = _Fork();
  if (pid == 0) RunChild(child);  // never returns
  const int fork_errno = errno;
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  close(out[1]);
  close(status[1]);
  if (in[0] >= 0) close(in[0]);
  int error = 0;
  if (pid < 0) {
    error = fork_errno;
  } else {
    ssize_t n;
    do {
      n = read(status[0], &error, sizeof(error));
    } while (n < 0 && errno == EINTR);
    if (n != static_cast<ssize_t>(sizeof(error))) error = 0;  // exec'd
    if (error != 0) {
      while (waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
      }
    }
  }
  close(status[0]);
  if (error != 0) {
    close(out[0]);
    if (in[1] >= 0) close(in[1]);
    const std::string msg =
        absl::StrCat("cannot start ", argv[0], ": ", strerror(error),
                     "; check the program path and PATH");
    if (error == ENOENT) return absl::NotFoundError(msg);
    return absl::InternalError(msg);
  }
  return std::unique_ptr<Subprocess>(new Subprocess(pid, out[0], in[1]));
}

absl::StatusOr<std::unique_ptr<Subprocess>> Subprocess::Spawn(
    const std::vector<std::string>& argv, const std::vector<std::string>& env,
    Stderr stderr_to) {
  SpawnOptions options;
  options.stderr_to = stderr_to;
  return Spawn(argv, env, options);
}

Subprocess::~Subprocess() {
  close(output_fd_);
  CloseInput();
}

std::string Subprocess::ReadOutputToEnd() {
  std::string out;
  char buf[16384];
  for (;;) {
    const ssize_t n = read(output_fd_, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return out;
    out.append(buf, static_cast<size_t>(n));
  }
}

void Subprocess::CloseInput() {
  if (input_fd_ >= 0) close(input_fd_);
  input_fd_ = -1;
}

namespace {

ExitInfo FromWaitStatus(int status) {
  if (WIFSIGNALED(status)) return ExitInfo{true, WTERMSIG(status)};
  return ExitInfo{false, WEXITSTATUS(status)};
}

}  // namespace

ExitInfo Subprocess::Wait() {
  if (exit_.has_value()) return *exit_;
  int status = 0;
  while (waitpid(pid_, &status, 0) < 0) {
    if (errno != EINTR) return ExitInfo{false, 255};
  }
  exit_ = FromWaitStatus(status);
  return *exit_;
}

std::optional<ExitInfo> Subprocess::WaitFor(absl::Duration timeout) {
  if (exit_.has_value()) return exit_;
  // Polled: waitpid has no timeout, and a SIGCHLD handler would be
  // process-wide state. 2 ms steps cost nothing next to a process's life.
  const absl::Time end = absl::Now() + timeout;
  for (;;) {
    int status = 0;
    const pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      exit_ = FromWaitStatus(status);
      return exit_;
    }
    if (r < 0 && errno != EINTR) return ExitInfo{false, 255};
    if (absl::Now() >= end) return std::nullopt;
    absl::SleepFor(absl::Milliseconds(2));
  }
}

void Subprocess::SignalGroup(int sig) { kill(-pid_, sig); }

std::vector<std::string> EnvironmentWith(
    const std::vector<std::string>& overrides) {
  std::map<std::string, std::string> vars;
  auto add = [&vars](const std::string& entry) {
    const size_t eq = entry.find('=');
    if (eq == std::string::npos) {
      vars.erase(entry);
      return;
    }
    vars[entry.substr(0, eq)] = entry.substr(eq + 1);
  };
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) add(*e);
  for (const std::string& o : overrides) add(o);
  std::vector<std::string> out;
  out.reserve(vars.size());
  for (const auto& [k, v] : vars) out.push_back(absl::StrCat(k, "=", v));
  return out;
}

std::string ExecutablePath() {
  char self[4096];
  const ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
  return std::string(self, len > 0 ? static_cast<size_t>(len) : 0);
}

std::string DescribeCommand(const std::vector<std::string>& argv) {
  std::vector<std::string> words;
  for (const std::string& arg : argv) {
    const bool plain =
        !arg.empty() &&
        arg.find_first_of(" \t\n'\"\\$`;&|<>()*?[]#~") == std::string::npos;
    words.push_back(plain ? arg : absl::StrCat("'", arg, "'"));
  }
  return absl::StrCat("`", absl::StrJoin(words, " "), "`");
}

namespace {

// The last few lines of `output`, for a message about a failed program
// (its own error is usually at the end).
std::string OutputTail(const std::string& output) {
  constexpr size_t kTail = 2000;
  absl::string_view tail = output;
  tail = absl::StripTrailingAsciiWhitespace(tail);
  if (tail.empty()) return "no output";
  if (tail.size() > kTail) {
    tail = tail.substr(tail.size() - kTail);
    return absl::StrCat("output ends: ...", tail);
  }
  return absl::StrCat("output: ", tail);
}

}  // namespace

ProgramRun RunProgram(const std::vector<std::string>& argv,
                      const RunProgramOptions& options) {
  ProgramRun run;
  if (argv.empty()) {
    run.status = absl::InvalidArgumentError("RunProgram: empty argv");
    return run;
  }
  const std::string command = DescribeCommand(argv);
  absl::StatusOr<std::unique_ptr<Subprocess>> child = Subprocess::Spawn(
      argv, EnvironmentWith(options.env_overrides), options.stderr_to);
  if (!child.ok()) {
    run.status = absl::Status(
        child.status().code(),
        absl::StrCat("cannot run ", command, ": ", child.status().message()));
    return run;
  }
  // A wall-clock deadline: the program runs in real time, whatever clock
  // the caller's Env injects. It bounds the whole run, the wait for the
  // exit included: a program may close its output and keep running.
  const absl::Time deadline = absl::Now() + options.deadline;
  Subprocess& program = **child;
  const int fd = program.output_fd();
  // Past the deadline, or on a failure to read the pipe, the group is killed
  // and reaped: nothing RunProgram started outlives it.
  auto kill_group = [&program] {
    program.SignalGroup(SIGKILL);
    program.Wait();
  };
  // `output_closed`: the program had closed its end of the pipe, so the
  // wait was for its exit (a daemon-like program that detached its output).
  auto deadline_exceeded = [&](bool output_closed) {
    kill_group();
    run.status = absl::DeadlineExceededError(absl::StrCat(
        command, " was still running after ",
        absl::FormatDuration(options.deadline),
        output_closed ? ", with its output closed," : "",
        " and was killed; check why it hangs (", OutputTail(run.output), ")"));
  };
  char buffer[16384];
  for (;;) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      deadline_exceeded(/*output_closed=*/false);
      return run;
    }
    pollfd p{fd, POLLIN, 0};
    const int ms = static_cast<int>(
        std::min<int64_t>(absl::ToInt64Milliseconds(left) + 1, 1 << 30));
    const int ready = poll(&p, 1, ms);
    if (ready == 0) continue;  // the loop's check ends it at the deadline
    const ssize_t n = ready < 0 ? -1 : read(fd, buffer, sizeof(buffer));
    if (n < 0) {
      if (errno == EINTR) continue;
      // Not an end of file: the program may still be writing. Reading on
      // would be guessing; waiting for it could take forever.
      const int error = errno;
      kill_group();
      run.status = absl::InternalError(absl::StrCat(
          "reading the output of ", command, " failed: ",
          ready < 0 ? "poll" : "read", ": ", strerror(error), " (errno ", error,
          "); the program was killed (", OutputTail(run.output), ")"));
      return run;
    }
    if (n == 0) break;  // EOF: the program and its children closed the pipe
    const size_t room = options.max_output_bytes - run.output.size();
    const size_t keep = std::min(room, static_cast<size_t>(n));
    run.output.append(buffer, keep);
    if (keep < static_cast<size_t>(n)) run.truncated = true;
  }
  const absl::Duration left = deadline - absl::Now();
  const std::optional<ExitInfo> exit =
      program.WaitFor(std::max(left, absl::ZeroDuration()));
  if (!exit.has_value()) {
    deadline_exceeded(/*output_closed=*/true);
    return run;
  }
  run.exit = *exit;
  if (!exit->ok()) {
    run.status = absl::InternalError(absl::StrCat(
        command, " ", exit->Describe(), " (", OutputTail(run.output), ")"));
  }
  return run;
}

}  // namespace cohort
