#include "bench/coord/child_clients.h"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "cohort/rpc/transport.h"

extern char** environ;

namespace cohort::bench {

absl::StatusOr<Child> SpawnChild(const std::vector<std::string>& args,
                                 const std::string& token) {
  int fds[2];
  if (pipe(fds) != 0) return absl::InternalError("pipe failed");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&actions, fds[0]);
  posix_spawn_file_actions_addclose(&actions, fds[1]);
  std::vector<std::string> argv_storage = {"/proc/self/exe", "bench", "coord"};
  argv_storage.insert(argv_storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_storage) argv.push_back(a.data());
  argv.push_back(nullptr);
  // The job token goes through the environment (as `cohort launch` hands it
  // to tasks), not the command line.
  const std::string prefix = absl::StrCat(rpc::kJobTokenEnvVar, "=");
  std::vector<std::string> env_storage;
  for (char** e = environ; *e != nullptr; ++e) {
    if (!absl::StartsWith(*e, prefix)) env_storage.emplace_back(*e);
  }
  env_storage.push_back(prefix + token);
  std::vector<char*> envp;
  for (auto& e : env_storage) envp.push_back(e.data());
  envp.push_back(nullptr);
  Child child;
  const int rc = posix_spawn(&child.pid, "/proc/self/exe", &actions, nullptr,
                             argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  close(fds[1]);
  if (rc != 0) {
    close(fds[0]);
    return absl::InternalError(
        absl::StrCat("posix_spawn of a client process failed: ", strerror(rc)));
  }
  child.out_fd = fds[0];
  return child;
}

std::string ReadChildLine(Child& child, std::string& buffer) {
  char buf[4096];
  size_t newline;
  while ((newline = buffer.find('\n')) == std::string::npos) {
    const ssize_t n = read(child.out_fd, buf, sizeof(buf));
    if (n <= 0) return "";
    buffer.append(buf, static_cast<size_t>(n));
  }
  std::string line = buffer.substr(0, newline);
  buffer.erase(0, newline + 1);
  return line;
}

absl::StatusOr<Json> CollectChild(Child& child, int index, std::string out) {
  char buf[4096];
  ssize_t n;
  while ((n = read(child.out_fd, buf, sizeof(buf))) > 0) out.append(buf, n);
  close(child.out_fd);
  int status = 0;
  waitpid(child.pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return absl::InternalError(absl::StrCat(
        "client process ", index, " (pid ", child.pid, ") ",
        WIFEXITED(status)
            ? absl::StrCat("exited with status ", WEXITSTATUS(status))
            : absl::StrCat("was killed by signal ", WTERMSIG(status)),
        "; its stderr says why"));
  }
  while (!out.empty() && out.back() == '\n') out.pop_back();
  const size_t last = out.rfind('\n');
  return ParseJson(last == std::string::npos ? out : out.substr(last + 1),
                   "client process output");
}

}  // namespace cohort::bench
