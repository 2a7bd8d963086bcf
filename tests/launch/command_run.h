// Running `cohort` (or srun around it) from the tests of tests/launch/: start
// a command with extra environment, collect its stdout and stderr until EOF,
// then its exit code.
#ifndef COHORT_TESTS_LAUNCH_COMMAND_RUN_H_
#define COHORT_TESTS_LAUNCH_COMMAND_RUN_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "cohort/launch/process.h"

namespace cohort::launch::launch_testing {

// The directory of the running test binary (build/bin: cohort is there).
std::string BinDir();

struct CommandRun {
  int exit_code = -1;  // the shell convention (128 + signal)
  std::string output;  // stdout and stderr
  absl::Duration elapsed;
};

// Starts `argv` with this process's environment plus `env` ("KEY=VALUE").
// Fails the current test and returns nullptr when it cannot start.
std::unique_ptr<Subprocess> StartCommand(const std::vector<std::string>& argv,
                                         const std::vector<std::string>& env);

// Reads the output until EOF, then waits for the exit.
CommandRun FinishCommand(Subprocess& process, absl::Time started);

CommandRun RunCommand(const std::vector<std::string>& argv,
                      const std::vector<std::string>& env);

}  // namespace cohort::launch::launch_testing

#endif  // COHORT_TESTS_LAUNCH_COMMAND_RUN_H_
