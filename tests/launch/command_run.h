// Test support for every test that runs a program of the build (cohort,
// example binaries) as a child process: tests/launch, tests/barrier,
// tests/cli and the examples' tests link it (cohort_command_run). Starts a
// command with extra environment, collects its stdout and stderr until EOF,
// then its exit code; RunCommand does all of that with a deadline
// (base/subprocess.h's RunProgram).
#ifndef COHORT_TESTS_LAUNCH_COMMAND_RUN_H_
#define COHORT_TESTS_LAUNCH_COMMAND_RUN_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "cohort/base/subprocess.h"

namespace cohort::launch::launch_testing {

// The directory of the running test binary (build/bin: cohort and the
// example binaries are there).
std::string BinDir();

struct CommandRun {
  int exit_code = -1;  // the shell convention (128 + signal); -1: no exit
  std::string output;  // stdout and stderr (stdout only where asked)
  absl::Duration elapsed;
  // RunCommand: OK, or what went wrong, naming the command (a non-zero exit
  // is in exit_code and here).
  absl::Status status;
};

// A new directory under the test's temporary directory, named
// "<name>.<pid>.<nanos>"; "" (and the current test failed, naming it) when
// it cannot be made.
std::string FreshTestDir(const std::string& name);

// Starts `argv` with this process's environment plus `env` ("KEY=VALUE").
// Fails the current test and returns nullptr when it cannot start.
std::unique_ptr<Subprocess> StartCommand(const std::vector<std::string>& argv,
                                         const std::vector<std::string>& env);

// Reads the output until EOF, then waits for the exit.
CommandRun FinishCommand(Subprocess& process, absl::Time started);

// Runs `argv` to its end with this process's environment plus `env`: its
// output, exit code and time taken. Past `deadline` the command's process
// group is killed; the run then has exit_code -1 and a DeadlineExceeded
// status naming it. Fails the current test when the program cannot start.
CommandRun RunCommand(
    const std::vector<std::string>& argv, const std::vector<std::string>& env,
    absl::Duration deadline = absl::Minutes(2),
    Subprocess::Stderr stderr_to = Subprocess::Stderr::kIntoOutput);

}  // namespace cohort::launch::launch_testing

#endif  // COHORT_TESTS_LAUNCH_COMMAND_RUN_H_
