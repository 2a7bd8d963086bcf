#include "tests/launch/command_run.h"

#include <unistd.h>

#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace cohort::launch::launch_testing {

std::string BinDir() {
  const std::string path = ExecutablePath();
  return path.substr(0, path.rfind('/'));
}

std::string FreshTestDir(const std::string& name) {
  const std::string dir =
      absl::StrCat(::testing::TempDir(), "/", name, ".", getpid(), ".",
                   absl::ToUnixNanos(absl::Now()));
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) {
    ADD_FAILURE() << "cannot make test directory " << dir << ": "
                  << error.message();
    return "";
  }
  return dir;
}

std::unique_ptr<Subprocess> StartCommand(const std::vector<std::string>& argv,
                                         const std::vector<std::string>& env) {
  auto p = Subprocess::Spawn(argv, EnvironmentWith(env));
  EXPECT_TRUE(p.ok()) << p.status();
  return p.ok() ? std::move(p).value() : nullptr;
}

CommandRun FinishCommand(Subprocess& process, absl::Time started) {
  CommandRun r;
  r.output = process.ReadOutputToEnd();
  r.exit_code = process.Wait().ShellCode();
  r.elapsed = absl::Now() - started;
  return r;
}

CommandRun RunCommand(const std::vector<std::string>& argv,
                      const std::vector<std::string>& env,
                      absl::Duration deadline, Subprocess::Stderr stderr_to) {
  const absl::Time started = absl::Now();
  RunProgramOptions options;
  options.env_overrides = env;
  options.deadline = deadline;
  options.stderr_to = stderr_to;
  ProgramRun run = RunProgram(argv, options);
  // A command that did not start is a broken test setup, not an outcome.
  EXPECT_TRUE(run.exit.has_value() ||
              run.status.code() == absl::StatusCode::kDeadlineExceeded)
      << run.status;
  CommandRun r;
  r.exit_code = run.exit.has_value() ? run.exit->ShellCode() : -1;
  r.output = std::move(run.output);
  r.elapsed = absl::Now() - started;
  r.status = std::move(run.status);
  return r;
}

}  // namespace cohort::launch::launch_testing
