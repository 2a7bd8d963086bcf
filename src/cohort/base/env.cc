#include "cohort/base/env.h"

#include <stdlib.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "cohort/base/subprocess.h"

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
    RunProgramOptions options;
    // Only stdout is the answer; a tool's warnings on stderr would otherwise
    // interleave with cohort's own output.
    options.stderr_to = Subprocess::Stderr::kDiscard;
    // The tools asked (nvidia-smi) answer in well under a second; one that
    // hangs (a wedged driver) must not hang the resolver with it.
    options.deadline = kRunCommandDeadline;
    options.max_output_bytes = kRunCommandMaxOutput;
    ProgramRun run = RunProgram(argv, options);
    if (!run.status.ok()) return run.status;
    // A parser given only the first part of an answer would read a wrong one
    // (a GPU list cut short) without knowing it.
    if (run.truncated) {
      return absl::ResourceExhaustedError(absl::StrCat(
          DescribeCommand(argv), " wrote more than ", kRunCommandMaxOutput,
          " bytes to stdout, RunCommand's cap (kRunCommandMaxOutput); check "
          "what the command prints, or run it with a narrower query"));
    }
    return std::move(run.output);
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
