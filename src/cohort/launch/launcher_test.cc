// Launcher unit tests: job planning, TF_CONFIG, and the
// supervision of real /bin/sh tasks (exit codes, signals, retries, Stop).
// Barrier syncs across launched processes are tested in tests/barrier/.
#include "cohort/launch/launcher.h"

#include <unistd.h>

#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort::launch {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(PlanTasksTest, NumTasksGivesWorkers) {
  LaunchOptions o;
  o.num_workers = 3;
  auto tasks = PlanTasks(o);
  ASSERT_TRUE(tasks.ok());
  ASSERT_EQ(tasks->size(), 3u);
  EXPECT_EQ((*tasks)[2].Name(), "worker:2");
  EXPECT_EQ((*tasks)[2].partition_id, 2);
}

TEST(PlanTasksTest, TensorFlowShape) {
  LaunchOptions o;
  o.chief = true;
  o.num_workers = 2;
  o.num_ps = 1;
  o.evaluator = true;
  auto tasks = PlanTasks(o);
  ASSERT_TRUE(tasks.ok());
  std::vector<std::string> names;
  std::vector<int> partitions;
  for (const TaskSpec& t : *tasks) {
    names.push_back(t.Name());
    partitions.push_back(t.partition_id);
  }
  EXPECT_THAT(names, ElementsAre("chief:0", "worker:0", "worker:1", "ps:0",
                                 "evaluator:0"));
  EXPECT_THAT(partitions, ElementsAre(0, 1, 2, -1, -1));

  std::vector<std::string> addresses = {"h:1", "h:2", "h:3", "h:4", "h:5"};
  Json tf = MakeTfConfig(*tasks, addresses, (*tasks)[2]);
  EXPECT_EQ(tf["cluster"]["chief"], Json({"h:1"}));
  EXPECT_EQ(tf["cluster"]["worker"], Json({"h:2", "h:3"}));
  EXPECT_EQ(tf["cluster"]["ps"], Json({"h:4"}));
  EXPECT_FALSE(tf["cluster"].contains("evaluator"));
  EXPECT_EQ(tf["task"]["type"], "worker");
  EXPECT_EQ(tf["task"]["index"], 1);
}

TEST(PlanTasksTest, EmptyJobIsInvalid) {
  LaunchOptions o;
  o.num_ps = 2;
  EXPECT_EQ(PlanTasks(o).status().code(), absl::StatusCode::kInvalidArgument);
}

// Runs /bin/sh tasks through the Launcher library and keeps what it printed.
class LauncherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = absl::StrCat(::testing::TempDir(), "/launcher_test.", getpid(), ".",
                        absl::ToUnixNanos(absl::Now()));
    options_.log_dir = dir_ + "/logs";
    options_.progress = false;
    options_.stop_grace = absl::Seconds(2);
    options_.output = [this](const std::string& line) {
      absl::MutexLock lock(&mu_);
      output_.push_back(line);
    };
    options_.messages = [this](const std::string& line) {
      absl::MutexLock lock(&mu_);
      messages_.push_back(line);
    };
    options_.extra_env = {absl::StrCat("TEST_DIR=", dir_)};
  }

  void Script(const std::string& script) {
    options_.command = {"/bin/sh", "-c", script};
  }

  std::string Output() {
    absl::MutexLock lock(&mu_);
    return absl::StrJoin(output_, "\n");
  }
  std::string Messages() {
    absl::MutexLock lock(&mu_);
    return absl::StrJoin(messages_, "\n");
  }
  // Lines the tasks appended to $TEST_DIR/record (created by the tasks).
  std::set<std::string> Record() {
    std::ifstream in(dir_ + "/record");
    std::set<std::string> lines;
    for (std::string l; std::getline(in, l);) lines.insert(l);
    return lines;
  }

  std::string dir_;
  LaunchOptions options_;
  absl::Mutex mu_;
  std::vector<std::string> output_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> messages_ ABSL_GUARDED_BY(mu_);
};

TEST_F(LauncherTest, SuccessPrefixesOutputAndWritesLogs) {
  options_.num_workers = 2;
  Script("echo hello from $COHORT_PARTITION_ID; echo to stderr >&2");
  Launcher launcher(Env::Default(), options_);
  auto result = launcher.Run();
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_TRUE(result->succeeded);
  EXPECT_EQ(result->exit_code, 0);
  EXPECT_EQ(result->attempts, 1);
  EXPECT_THAT(Output(), HasSubstr("[worker:1] hello from 1"));
  EXPECT_THAT(Output(), HasSubstr("[worker:0] to stderr"));
  std::ifstream log(options_.log_dir + "/worker-1.attempt-0.log");
  std::stringstream content;
  content << log.rdbuf();
  EXPECT_EQ(content.str(), "hello from 1\nto stderr\n");
}

// Spark #23/#30: a job needing more slots than there are fails at once and
// starts nothing.
TEST_F(LauncherTest, SlotsCheckFailsBeforeStartingAnything) {
  options_.num_workers = 5;
  options_.slots = 4;
  Script("mkdir -p $TEST_DIR; touch $TEST_DIR/started");
  Launcher launcher(Env::Default(), options_);
  auto result = launcher.Run();
  EXPECT_EQ(result.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(result.status().message(),
              HasSubstr("requires more slots than the total number of slots"));
  EXPECT_FALSE(std::ifstream(dir_ + "/started").good());
}

// --elastic: the tasks learn the range; a task that fails with no restart
// left leaves the job while MIN remain, and the job succeeds without it.
TEST_F(LauncherTest, ElasticJobDropsATaskWithNoRestartLeftWhileMinRemain) {
  options_.num_workers = 4;
  options_.restart = RestartMode::kTask;
  options_.elastic = {3, 4};
  Script(
      "echo range $COHORT_ELASTIC wait $COHORT_ELASTIC_WAIT; "
      "if [ $COHORT_PARTITION_ID = 3 ]; then exit 5; fi");
  Launcher launcher(Env::Default(), options_);
  auto result = launcher.Run();
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_TRUE(result->succeeded) << Messages();
  EXPECT_THAT(Output(), HasSubstr("[worker:2] range 3:4 wait 1m"));
  EXPECT_THAT(Messages(),
              HasSubstr("elastic: worker:3 left the membership; 3 task(s) "
                        "train on (worker:0, worker:1, worker:2), minimum 3"));
  EXPECT_THAT(Messages(),
              HasSubstr("job succeeded: 3 of 4 task(s) of attempt 0 "
                        "finished; worker:3 (exited with code 5) left the "
                        "elastic job with no restart left"));
}

// Below MIN with a replacement that never joins: the attempt fails after
// the wait, naming the missing task; the others are stopped.
TEST_F(LauncherTest, ElasticJobBelowMinFailsAfterTheWaitNamingTheMissingTask) {
  options_.num_workers = 2;
  options_.restart = RestartMode::kTask;
  options_.max_restarts = 1;
  options_.elastic = {2, 2};
  options_.elastic_wait = absl::Seconds(1);
  options_.stop_grace = absl::Seconds(1);
  Script(
      "if [ $COHORT_PARTITION_ID = 1 ] && [ $COHORT_TASK_RESTART = 0 ]; then "
      "exit 3; fi; sleep 60");
  Launcher launcher(Env::Default(), options_);
  auto result = launcher.Run();
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_FALSE(result->succeeded);
  EXPECT_EQ(result->exit_code, 1);
  EXPECT_THAT(result->failure_summary, HasSubstr("task worker:1 (pid "))
      << Messages();
  EXPECT_THAT(result->failure_summary,
              HasSubstr("is missing from the elastic job, which stayed below "
                        "its minimum of 2 task(s) for 1s: members worker:0; "
                        "missing worker:1"))
      << Messages();
}

TEST_F(LauncherTest, ElasticFlagsAreCheckedBeforeAnythingStarts) {
  Script("mkdir -p $TEST_DIR; touch $TEST_DIR/started");
  options_.elastic = {2, 3};
  options_.restart = RestartMode::kTask;
  options_.num_workers = 2;
  auto result = Launcher(Env::Default(), options_).Run();
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(result.status().message(), HasSubstr("use -n 3"));
  options_.num_workers = 3;
  options_.restart = RestartMode::kGang;
  result = Launcher(Env::Default(), options_).Run();
  EXPECT_THAT(result.status().message(),
              HasSubstr("cannot be combined with --restart gang"));
  EXPECT_FALSE(std::ifstream(dir_ + "/started").good());
}

// Spark #25/#26: one failed task reruns the whole gang, with the next
// attempt number; then the job succeeds.
TEST_F(LauncherTest, FailureRerunsTheWholeGang) {
  options_.num_workers = 3;
  options_.max_restarts = 2;
  Script(
      "mkdir -p $TEST_DIR; echo $COHORT_ATTEMPT_NUMBER/$COHORT_PARTITION_ID "
      ">> $TEST_DIR/record; "
      "if [ $COHORT_ATTEMPT_NUMBER = 0 ] && [ $COHORT_PARTITION_ID = 1 ]; then "
      "echo boom; exit 3; fi");
  Launcher launcher(Env::Default(), options_);
  auto result = launcher.Run();
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_TRUE(result->succeeded) << Messages();
  EXPECT_EQ(result->attempts, 2);
  std::set<std::string> record = Record();
  for (const char* line : {"1/0", "1/1", "1/2"}) {
    EXPECT_TRUE(record.count(line)) << "attempt 1 did not rerun " << line;
  }
  EXPECT_FALSE(record.count("2/0"));
  EXPECT_THAT(Messages(), HasSubstr("task worker:1"));
  EXPECT_THAT(Messages(), HasSubstr("exited with code 3"));
  EXPECT_THAT(Messages(), HasSubstr("| boom"));
  EXPECT_THAT(Messages(), HasSubstr("restarting the whole gang as attempt 1"));
}

// Spark #28: two failures in one attempt cause exactly one retry.
TEST_F(LauncherTest, TwoFailuresInOneAttemptCauseOneRetry) {
  options_.num_workers = 3;
  options_.max_restarts = 5;
  Script(
      "mkdir -p $TEST_DIR; echo $COHORT_ATTEMPT_NUMBER >> $TEST_DIR/record; "
      "if [ $COHORT_ATTEMPT_NUMBER = 0 ] && [ $COHORT_PARTITION_ID != 2 ]; "
      "then exit 4; fi");
  Launcher launcher(Env::Default(), options_);
  auto result = launcher.Run();
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_TRUE(result->succeeded) << Messages();
  EXPECT_EQ(result->attempts, 2);
  EXPECT_THAT(Record(), ElementsAre("0", "1"));
}

// With no restarts left the job fails with the root-cause task's code, and
// the other tasks of the attempt are stopped at once.
TEST_F(LauncherTest, GivesUpAndStopsTheOtherTasks) {
  options_.num_workers = 3;
  options_.max_restarts = 1;
  Script(
      "if [ $COHORT_PARTITION_ID = 0 ]; then echo last words; exit 5; fi; "
      "exec sleep 60");
  Launcher launcher(Env::Default(), options_);
  const absl::Time start = absl::Now();
  auto result = launcher.Run();
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_FALSE(result->succeeded);
  EXPECT_EQ(result->exit_code, 5);
  EXPECT_EQ(result->attempts, 2);
  EXPECT_LT(absl::Now() - start, absl::Seconds(20));
  EXPECT_THAT(result->failure_summary,
              HasSubstr("attempt 1 failed: task worker:0"));
  EXPECT_THAT(result->failure_summary, HasSubstr("| last words"));
  EXPECT_THAT(result->failure_summary, HasSubstr("stopped 2 other task(s)"));
  EXPECT_THAT(Messages(), HasSubstr("giving up after 2 attempt(s)"));
}

TEST_F(LauncherTest, KilledBySignalIsAFailure) {
  options_.num_workers = 2;
  Script("if [ $COHORT_PARTITION_ID = 1 ]; then kill -9 $$; fi; exec sleep 60");
  Launcher launcher(Env::Default(), options_);
  auto result = launcher.Run();
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->exit_code, 128 + 9);
  EXPECT_THAT(result->failure_summary,
              HasSubstr("killed by signal 9 (SIGKILL)"));
}

// A task that ignores SIGTERM is killed after the grace period. worker:1
// fails only once worker:0 has set SIGTERM to ignored (and said so in a
// file): a stop that came earlier would end worker:0 by SIGTERM and never
// reach the grace period. Ignored, SIGTERM carries over to the sleep the
// shell becomes, so only the SIGKILL at the end of the grace can end it.
TEST_F(LauncherTest, TaskIgnoringSigtermIsKilledAfterGrace) {
  options_.num_workers = 2;
  options_.stop_grace = absl::Milliseconds(300);
  Script(
      "mkdir -p $TEST_DIR; "
      "if [ $COHORT_PARTITION_ID = 1 ]; then "
      "  while [ ! -f $TEST_DIR/ignoring ]; do sleep 0.01; done; exit 2; "
      "fi; "
      "trap '' TERM; touch $TEST_DIR/ignoring; exec sleep 60");
  Launcher launcher(Env::Default(), options_);
  const absl::Time start = absl::Now();
  auto result = launcher.Run();
  const absl::Duration took = absl::Now() - start;
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->exit_code, 2) << Messages();
  EXPECT_THAT(result->failure_summary, HasSubstr("worker:1"));
  // worker:0 outlived the SIGTERM: the launcher waited the whole grace.
  EXPECT_GE(took, options_.stop_grace) << Messages();
  EXPECT_LT(took, absl::Seconds(15)) << Messages();
}

// Ctrl-C: Stop() ends every task and Run() returns 130.
TEST_F(LauncherTest, StopEndsEveryTask) {
  options_.num_workers = 3;
  Script("mkdir -p $TEST_DIR; echo $$ >> $TEST_DIR/record; exec sleep 60");
  Launcher launcher(Env::Default(), options_);
  absl::StatusOr<LaunchResult> result;
  std::thread runner([&] { result = launcher.Run(); });
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (Record().size() < 3 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_EQ(Record().size(), 3u);
  launcher.Stop();
  runner.join();
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_FALSE(result->succeeded);
  EXPECT_EQ(result->exit_code, 130);
  EXPECT_EQ(result->attempts, 1);
  for (const std::string& pid : Record()) {
    EXPECT_NE(kill(std::stoi(pid), 0), 0) << "task pid " << pid << " survived";
  }
}

// ps tasks run until the chief and workers are done, then get stopped.
TEST_F(LauncherTest, PsTasksAreStoppedWhenTheGangSucceeds) {
  options_.chief = true;
  options_.num_workers = 1;
  options_.num_ps = 1;
  Script(
      "case $COHORT_TASK_NAME in ps:*) test -z \"$COHORT_PARTITION_ID\" && "
      "exec sleep 60; exit 9;; esac; echo \"$TF_CONFIG\"");
  Launcher launcher(Env::Default(), options_);
  auto result = launcher.Run();
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_TRUE(result->succeeded) << Messages();
  EXPECT_THAT(Output(),
              HasSubstr("[chief:0] {\"cluster\":{\"chief\":[\"127.0.0.1:"));
  EXPECT_THAT(Output(),
              HasSubstr("\"task\":{\"index\":0,\"type\":\"worker\"}"));
}

TEST_F(LauncherTest, MissingProgramIsNotFound) {
  options_.num_workers = 1;
  options_.command = {"/nonexistent/program"};
  Launcher launcher(Env::Default(), options_);
  auto result = launcher.Run();
  EXPECT_EQ(result.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(result.status().message(), HasSubstr("/nonexistent/program"));
}

}  // namespace
}  // namespace cohort::launch
