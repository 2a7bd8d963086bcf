// Test support for whole training jobs run under `cohort launch` as child
// processes (ps_job_test, elastic_job_test): fresh directories, figures in
// output lines, the pid of a launched task.
#ifndef COHORT_TESTS_TRAIN_JOB_TEST_UTIL_H_
#define COHORT_TESTS_TRAIN_JOB_TEST_UTIL_H_

#include <sys/types.h>

#include <optional>
#include <string>

#include "absl/time/time.h"
#include "tests/coord/test_process.h"
#include "tests/launch/command_run.h"

namespace cohort::testing {

// A new directory under the test's temporary directory (command_run.h).
using launch::launch_testing::FreshTestDir;

// The number after `key` in `line` ("global_step 420 ...", "step 20/300"),
// if any.
std::optional<double> FigureAfter(const std::string& line,
                                  const std::string& key);

// Reads `p`'s lines until one contains `needle` and its figure after `key`
// is at least `at_least`; "" on the deadline.
std::string WaitForFigure(TestProcess* p, const std::string& needle,
                          const std::string& key, double at_least,
                          absl::Duration timeout);

// `p`'s exit code, or -1 when it did not exit normally within `timeout`.
int ExitCode(TestProcess* p, absl::Duration timeout);

// Reads every remaining line (until the process closes stdout).
void Drain(TestProcess* p, absl::Duration timeout);

// The first line read so far that contains `needle`, or "".
std::string LineWith(TestProcess* p, const std::string& needle);

// A `/bin/sh -c` script that runs "$0" "$@" (the program and its
// arguments that follow it), except that `task`'s first restart
// (COHORT_TASK_RESTART=1) first prints "held down" and waits for the file
// <dir>/go (at most 120 s, then exits 7).
std::string HoldFirstRestart(const std::string& dir, const std::string& task);

// The pid of the launched task `task` ("ps:0"): a process whose
// environment has COHORT_TASK_NAME=<task> and whose parent is `launcher`.
std::optional<pid_t> TaskPid(pid_t launcher, const std::string& task);

}  // namespace cohort::testing

#endif  // COHORT_TESTS_TRAIN_JOB_TEST_UTIL_H_
