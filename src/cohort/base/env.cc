#include "cohort/base/env.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"

namespace cohort {
namespace {

// The process's own clock, environment and files. Everything in cohort that
// reads them goes through Env so that tests can substitute FakeEnv; this is
// the only place that touches them directly.
class RealEnv : public Env {
 public:
  absl::Time Now() override { return absl::Now(); }
  void SleepFor(absl::Duration d) override { absl::SleepFor(d); }
  bool AwaitWithDeadline(absl::Mutex* mu, const absl::Condition& cond,
                         absl::Time deadline) override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    // Mutex::AwaitWithDeadline with an infinite deadline still computes a
    // timeout; the plain Await says what is meant.
    if (deadline == absl::InfiniteFuture()) {
      mu->Await(cond);
      return true;
    }
    return mu->AwaitWithDeadline(cond, deadline);
  }

  std::optional<std::string> GetVar(absl::string_view name) override {
    absl::MutexLock lock(&env_mu_);
    const char* value = ::getenv(std::string(name).c_str());
    if (value == nullptr) return std::nullopt;
    return std::string(value);
  }
  void SetVar(absl::string_view name, absl::string_view value) override {
    absl::MutexLock lock(&env_mu_);
    ::setenv(std::string(name).c_str(), std::string(value).c_str(), 1);
  }
  void UnsetVar(absl::string_view name) override {
    absl::MutexLock lock(&env_mu_);
    ::unsetenv(std::string(name).c_str());
  }

  absl::StatusOr<std::string> ReadFile(const std::string& path) override {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
      // Callers tell "absent" (often fine: an optional file) from "present
      // but unreadable" (a permissions problem to report), so the two get
      // different codes.
      const int err = errno;
      const std::string what =
          absl::StrCat("cannot open ", path, ": ", std::strerror(err));
      return err == ENOENT ? absl::NotFoundError(what)
                           : absl::PermissionDeniedError(what);
    }
    std::ostringstream contents;
    contents << in.rdbuf();
    if (in.bad())
      return absl::DataLossError(absl::StrCat("error reading ", path));
    return contents.str();
  }

  absl::StatusOr<std::string> RunCommand(
      const std::vector<std::string>& argv) override {
    if (argv.empty())
      return absl::InvalidArgumentError("RunCommand: empty argv");
    // popen goes through the shell; quote every argument.
    std::string command;
    for (const std::string& arg : argv) {
      std::string quoted = "'";
      for (char c : arg) {
        if (c == '\'')
          quoted += "'\\''";
        else
          quoted += c;
      }
      absl::StrAppend(&command, command.empty() ? "" : " ", quoted, "'");
    }
    // Only stdout is the answer; a tool's warnings on stderr would otherwise
    // interleave with cohort's own output.
    absl::StrAppend(&command, " 2>/dev/null");
    FILE* pipe = ::popen(command.c_str(), "r");
    if (pipe == nullptr) {
      return absl::InternalError(
          absl::StrCat("cannot run ", argv[0], ": ", std::strerror(errno)));
    }
    std::string output;
    char buffer[4096];
    size_t n;
    while ((n = ::fread(buffer, 1, sizeof(buffer), pipe)) > 0) {
      output.append(buffer, n);
    }
    const int rc = ::pclose(pipe);
    // The shell exits 127 when it cannot find the program: NotFound, so a
    // resolver can say which tool is missing rather than that it failed.
    if (WIFEXITED(rc) && WEXITSTATUS(rc) == 127) {
      return absl::NotFoundError(
          absl::StrCat("program not found: ", argv[0], " (is it in PATH?)"));
    }
    if (!WIFEXITED(rc) || WEXITSTATUS(rc) != 0) {
      return absl::InternalError(absl::StrCat("`", absl::StrJoin(argv, " "),
                                              "` failed with status ", rc));
    }
    return output;
  }

 private:
  // getenv/setenv are not thread-safe against each other.
  absl::Mutex env_mu_;
};

}  // namespace

Env* Env::Default() {
  static RealEnv* const env = new RealEnv;  // never destroyed
  return env;
}

}  // namespace cohort
