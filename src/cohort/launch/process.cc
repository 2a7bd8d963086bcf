#include "cohort/launch/process.h"

#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "cohort/base/status.h"

extern char** environ;

namespace cohort::launch {

std::string ExitInfo::Describe() const {
  if (!signaled) return absl::StrCat("exited with code ", value);
  const char* name = sigabbrev_np(value);
  return absl::StrCat("killed by signal ", value,
                      name != nullptr ? absl::StrCat(" (SIG", name, ")") : "");
}

namespace {

// argv[0] as execvp would find it through the launcher's PATH, resolved
// before fork(): the child of a threaded process may not allocate.
absl::StatusOr<std::string> FindProgram(const std::string& name) {
  const std::string missing =
      absl::StrCat("cannot start ", name,
                   ": no such program; check the program path and PATH");
  if (name.empty()) return absl::NotFoundError(missing);
  if (name.find('/') != std::string::npos) {
    if (access(name.c_str(), F_OK) != 0) return absl::NotFoundError(missing);
    return name;
  }
  const char* path = getenv("PATH");
  for (absl::string_view dir :
       absl::StrSplit(path != nullptr ? path : "/usr/bin:/bin", ':')) {
    const std::string candidate =
        absl::StrCat(dir.empty() ? "." : dir, "/", name);
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return absl::NotFoundError(missing);
}

std::vector<char*> CStrings(const std::vector<std::string>& strings) {
  std::vector<char*> out;
  out.reserve(strings.size() + 1);
  for (const std::string& s : strings)
    out.push_back(const_cast<char*>(s.c_str()));
  out.push_back(nullptr);
  return out;
}

// What the child needs, built before it runs.
struct ChildArgs {
  const char* program;
  char* const* argv;
  char* const* envp;
  char* const* sh_argv;  // /bin/sh PROGRAM ARGS..., for files without "#!"
  int output_fd;
  int status_fd;  // the child writes errno here when exec fails
  pid_t launcher;
};

// The child between fork() and exec(). The launcher has threads, so the
// child makes raw system calls only: no libc lock, allocation or sanitizer
// interceptor another thread may have held at the fork.
[[noreturn]] __attribute__((no_sanitize("address", "thread", "undefined"))) void
RunChild(const ChildArgs& a) {
  syscall(SYS_setpgid, 0, 0);
  // The program goes with the thread that started it, even when the
  // launcher is killed outright (SIGKILL leaves it no chance to clean up).
  syscall(SYS_prctl, PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
  if (syscall(SYS_getppid) != a.launcher) {
    syscall(SYS_kill, syscall(SYS_getpid), SIGKILL);  // it died before prctl
  }
  // Every signal is blocked (Spawn blocked them). No handler of the
  // launcher may run here once they are unblocked: handled signals go to
  // their defaults now, as exec would do, and so do the ignored ones the
  // program must not inherit. The kernel's struct sigaction starts with the
  // handler on every Linux ABI; zeros are SIG_DFL with no flags.
  for (int sig = 1; sig <= 64; ++sig) {
    if (sig == SIGKILL || sig == SIGSTOP) continue;
    alignas(8) char current[64] = {};
    if (syscall(SYS_rt_sigaction, sig, nullptr, current, 8) != 0) continue;
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
    syscall(SYS_rt_sigaction, sig, defaults, nullptr, 8);
  }
  const uint64_t none = 0;
  syscall(SYS_rt_sigprocmask, SIG_SETMASK, &none, nullptr, 8);
  // stdin from /dev/null; stdout and stderr into the pipe.
  const long null_fd = syscall(SYS_openat, AT_FDCWD, "/dev/null", O_RDONLY);
  if (null_fd > 0) {
    syscall(SYS_dup3, null_fd, 0, 0);
    syscall(SYS_close, null_fd);
  }
  for (int target : {1, 2}) {
    if (a.output_fd == target) {
      syscall(SYS_fcntl, target, F_SETFD, 0);  // keep it across exec
    } else {
      syscall(SYS_dup3, a.output_fd, target, 0);
    }
  }
  syscall(SYS_execve, a.program, a.argv, a.envp);
  if (errno == ENOEXEC) syscall(SYS_execve, a.sh_argv[0], a.sh_argv, a.envp);
  const int exec_errno = errno;
  syscall(SYS_write, a.status_fd, &exec_errno, sizeof(exec_errno));
  syscall(SYS_exit_group, 127);
  __builtin_unreachable();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Subprocess>> Subprocess::Spawn(
    const std::vector<std::string>& argv, const std::vector<std::string>& env) {
  if (argv.empty()) {
    return absl::InvalidArgumentError("cannot spawn an empty command");
  }
  COHORT_ASSIGN_OR_RETURN(const std::string program, FindProgram(argv[0]));
  // Everything the child needs is built here: after fork() it may only make
  // async-signal-safe calls.
  std::vector<char*> c_argv = CStrings(argv);
  std::vector<char*> c_env = CStrings(env);
  // A file without "#!" runs under /bin/sh, as execvp does.
  std::vector<std::string> sh_args = {"/bin/sh", program};
  sh_args.insert(sh_args.end(), argv.begin() + 1, argv.end());
  std::vector<char*> c_sh_argv = CStrings(sh_args);

  // `out` carries the program's output; `status` its exec error, closed
  // unread by a good exec.
  int out[2], status[2];
  if (pipe2(out, O_CLOEXEC) != 0) {
    return absl::InternalError(
        absl::StrCat("pipe for ", argv[0], " failed: ", strerror(errno)));
  }
  if (pipe2(status, O_CLOEXEC) != 0) {
    const int e = errno;
    close(out[0]);
    close(out[1]);
    return absl::InternalError(
        absl::StrCat("pipe for ", argv[0], " failed: ", strerror(e)));
  }
  const ChildArgs child{program.c_str(),  c_argv.data(), c_env.data(),
                        c_sh_argv.data(), out[1],        status[1],
                        getpid()};
  // No handler of this process may run in the child before exec: every
  // signal stays blocked until the child has reset them.
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &old);
  const pid_t pid = fork();
  if (pid == 0) RunChild(child);  // never returns
  const int fork_errno = errno;
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  close(out[1]);
  close(status[1]);
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
    const std::string msg =
        absl::StrCat("cannot start ", argv[0], ": ", strerror(error),
                     "; check the program path and PATH");
    if (error == ENOENT) return absl::NotFoundError(msg);
    return absl::InternalError(msg);
  }
  return std::unique_ptr<Subprocess>(new Subprocess(pid, out[0]));
}

Subprocess::~Subprocess() { close(output_fd_); }

ExitInfo Subprocess::Wait() {
  int status = 0;
  while (waitpid(pid_, &status, 0) < 0) {
    if (errno != EINTR) return ExitInfo{false, 255};
  }
  if (WIFSIGNALED(status)) return ExitInfo{true, WTERMSIG(status)};
  return ExitInfo{false, WEXITSTATUS(status)};
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

}  // namespace cohort::launch
