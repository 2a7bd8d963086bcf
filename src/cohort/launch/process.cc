#include "cohort/launch/process.h"

#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
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

  int out[2];
  if (pipe2(out, O_CLOEXEC) != 0) {
    return absl::InternalError(
        absl::StrCat("pipe for ", argv[0], " failed: ", strerror(errno)));
  }
  // The child reports a failed exec on `status` (closed by a good one).
  int status[2];
  if (pipe2(status, O_CLOEXEC) != 0) {
    const int e = errno;
    close(out[0]);
    close(out[1]);
    return absl::InternalError(
        absl::StrCat("pipe for ", argv[0], " failed: ", strerror(e)));
  }
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    // The program goes with the thread that started it, even when the
    // launcher is killed outright (SIGKILL leaves it no chance to clean up).
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) raise(SIGKILL);  // it died before prctl
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGPIPE, SIGQUIT, SIGCHLD}) {
      signal(sig, SIG_DFL);
    }
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    const int null_fd = open("/dev/null", O_RDONLY);
    if (null_fd >= 0 && null_fd != 0) {
      dup2(null_fd, 0);
      close(null_fd);
    }
    dup2(out[1], 1);
    dup2(out[1], 2);
    execve(program.c_str(), c_argv.data(), c_env.data());
    if (errno == ENOEXEC) {
      execve(c_sh_argv[0], c_sh_argv.data(), c_env.data());
    }
    const int e = errno;
    ssize_t ignored = write(status[1], &e, sizeof(e));
    (void)ignored;
    _exit(127);
  }
  const int fork_errno = errno;
  close(out[1]);
  close(status[1]);
  int exec_errno = 0;
  if (pid < 0) {
    exec_errno = fork_errno;
  } else {
    // Also closes the race with SignalGroup(): once the status pipe is
    // closed the child leads its own group.
    setpgid(pid, pid);
    ssize_t n;
    do {
      n = read(status[0], &exec_errno, sizeof(exec_errno));
    } while (n < 0 && errno == EINTR);
    if (n != static_cast<ssize_t>(sizeof(exec_errno))) exec_errno = 0;
    if (exec_errno != 0) {
      while (waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
      }
    }
  }
  close(status[0]);
  if (exec_errno != 0) {
    close(out[0]);
    const std::string msg =
        absl::StrCat("cannot start ", argv[0], ": ", strerror(exec_errno),
                     "; check the program path and PATH");
    if (exec_errno == ENOENT) return absl::NotFoundError(msg);
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
