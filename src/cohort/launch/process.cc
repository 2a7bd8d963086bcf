#include "cohort/launch/process.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <map>

#include "absl/strings/str_cat.h"

extern char** environ;

namespace cohort::launch {

std::string ExitInfo::Describe() const {
  if (!signaled) return absl::StrCat("exited with code ", value);
  const char* name = sigabbrev_np(value);
  return absl::StrCat("killed by signal ", value,
                      name != nullptr ? absl::StrCat(" (SIG", name, ")") : "");
}

absl::StatusOr<std::unique_ptr<Subprocess>> Subprocess::Spawn(
    const std::vector<std::string>& argv, const std::vector<std::string>& env) {
  if (argv.empty()) {
    return absl::InvalidArgumentError("cannot spawn an empty command");
  }
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    return absl::InternalError(
        absl::StrCat("pipe for ", argv[0], " failed: ", strerror(errno)));
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 2);

  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t empty_mask, defaults;
  sigemptyset(&empty_mask);
  sigemptyset(&defaults);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGPIPE, SIGQUIT, SIGCHLD}) {
    sigaddset(&defaults, sig);
  }
  posix_spawnattr_setsigmask(&attr, &empty_mask);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP |
                                      POSIX_SPAWN_SETSIGMASK |
                                      POSIX_SPAWN_SETSIGDEF);

  std::vector<char*> c_argv;
  for (const std::string& a : argv)
    c_argv.push_back(const_cast<char*>(a.c_str()));
  c_argv.push_back(nullptr);
  std::vector<char*> c_env;
  for (const std::string& e : env)
    c_env.push_back(const_cast<char*>(e.c_str()));
  c_env.push_back(nullptr);

  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, argv[0].c_str(), &actions, &attr,
                              c_argv.data(), c_env.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  close(fds[1]);
  if (rc != 0) {
    close(fds[0]);
    const std::string msg =
        absl::StrCat("cannot start ", argv[0], ": ", strerror(rc),
                     "; check the program path and PATH");
    if (rc == ENOENT) return absl::NotFoundError(msg);
    return absl::InternalError(msg);
  }
  return std::unique_ptr<Subprocess>(new Subprocess(pid, fds[0]));
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
