// StepLog's file format, and train_ps --step-times-dir writing it (the
// binary next to this test in <build>/bin, run alone: no TF_CONFIG).
#include "examples/train/step_log.h"

#include <stdlib.h>

#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "cohort/base/env.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/launch/command_run.h"

namespace cohort::examples {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string TempDir() {
  std::string dir = ::testing::TempDir() + "/step_log_test-XXXXXX";
  if (mkdtemp(dir.data()) == nullptr) ADD_FAILURE() << "mkdtemp " << dir;
  return dir;
}

TEST(StepLogTest, FileNameNamesTheTask) {
  EXPECT_EQ(StepLogFileName("worker", 1), "worker-1.json");
  EXPECT_EQ(StepLogFileName("chief", 0), "chief-0.json");
  EXPECT_EQ(StepLogFileName("", 0), "local.json");
}

TEST(StepLogTest, WrittenLogReadsBackTheSame) {
  const std::string dir = TempDir();
  StepLog log;
  log.task = "worker:0";
  log.batch = 64;
  log.step_end_unix_us = {1795000000000000, 1795000000012345, 1795000000012345};
  log.global_step = 400;
  log.heldout_accuracy = 0.9375;
  ASSERT_TRUE(WriteStepLog(dir + "/w.json", log).ok());
  absl::StatusOr<StepLog> back = ReadStepLog(Env::Default(), dir + "/w.json");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->task, "worker:0");
  EXPECT_EQ(back->batch, 64);
  EXPECT_EQ(back->step_end_unix_us, log.step_end_unix_us);
  EXPECT_EQ(back->global_step, 400);
  EXPECT_EQ(back->heldout_accuracy, 0.9375);
  std::filesystem::remove_all(dir);
}

TEST(StepLogTest, ANonChiefLogHasNoAccuracy) {
  absl::StatusOr<StepLog> log = ParseStepLog(
      R"({"task":"worker:1","batch":8,"step_end_unix_us":[5,7]})", "f");
  ASSERT_TRUE(log.ok()) << log.status();
  EXPECT_THAT(log->step_end_unix_us, ElementsAre(5, 7));
  EXPECT_FALSE(log->global_step.has_value());
  EXPECT_FALSE(log->heldout_accuracy.has_value());
}

TEST(StepLogTest, BadLogsAreInvalidArgumentNamingTheFileAndField) {
  struct Case {
    const char* text;
    const char* says;
  };
  const Case cases[] = {
      {"[1]", "not a JSON object"},
      {R"({"batch":8,"step_end_unix_us":[]})", "\"task\""},
      {R"({"task":"w","batch":0,"step_end_unix_us":[]})", "\"batch\""},
      {R"({"task":"w","batch":4294967297,"step_end_unix_us":[]})", "\"batch\""},
      {R"({"task":"w","batch":8})", "\"step_end_unix_us\""},
      {R"({"task":"w","batch":8,"step_end_unix_us":[1,"x"]})", "step 1's time"},
      {R"({"task":"w","batch":8,"step_end_unix_us":[1,9,3]})",
       "step 2 ends at 3 us, before step 1 (9 us)"},
      {R"({"task":"w","batch":8,"step_end_unix_us":[],"global_step":1.5})",
       "\"global_step\""},
      {R"({"task":"w","batch":8,"step_end_unix_us":[],)"
       R"("heldout_accuracy":"high"})",
       "\"heldout_accuracy\""},
  };
  for (const Case& c : cases) {
    absl::StatusOr<StepLog> log = ParseStepLog(c.text, "dir/worker-0.json");
    ASSERT_FALSE(log.ok()) << c.text;
    EXPECT_EQ(log.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(log.status().message()),
                HasSubstr("dir/worker-0.json"));
    EXPECT_THAT(std::string(log.status().message()), HasSubstr(c.says))
        << c.text;
  }
  EXPECT_EQ(ParseStepLog("{", "f").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(StepLogTest, AMissingFileIsNotFound) {
  EXPECT_EQ(
      ReadStepLog(Env::Default(), "/nonexistent/worker-0.json").status().code(),
      absl::StatusCode::kNotFound);
}

// train_ps alone (no TF_CONFIG) is the chief of a one-task job: its log has
// one time per step, in order, within the run, and the final global step
// and accuracy it printed.
TEST(TrainPsStepTimesTest, TheLoneTaskWritesOneTimePerStep) {
  const std::string dir = TempDir();
  const int64_t before = absl::ToUnixMicros(absl::Now());
  launch::launch_testing::CommandRun run = launch::launch_testing::RunCommand(
      {launch::launch_testing::BinDir() + "/train_ps", "--steps", "4",
       "--hidden", "8", "--batch", "16", "--log-every", "0", "--step-times-dir",
       dir},
      {"TF_CONFIG="}, absl::Seconds(50));
  const int64_t after = absl::ToUnixMicros(absl::Now());
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_THAT(run.output, HasSubstr("final: global_step 4 "));
  absl::StatusOr<StepLog> log =
      ReadStepLog(Env::Default(), dir + "/local.json");
  ASSERT_TRUE(log.ok()) << log.status();
  EXPECT_EQ(log->task, "local");
  EXPECT_EQ(log->batch, 16);
  ASSERT_EQ(log->step_end_unix_us.size(), 4u);
  EXPECT_GE(log->step_end_unix_us.front(), before);
  EXPECT_LE(log->step_end_unix_us.back(), after);
  EXPECT_EQ(log->global_step, 4);
  ASSERT_TRUE(log->heldout_accuracy.has_value());
  EXPECT_THAT(
      run.output,
      HasSubstr(absl::StrCat("heldout_accuracy ",
                             absl::StrFormat("%.4f", *log->heldout_accuracy))));
  std::filesystem::remove_all(dir);
}

// A directory that does not exist is refused before any training, naming it.
TEST(TrainPsStepTimesTest, AMissingDirectoryIsRefusedUpFront) {
  launch::launch_testing::CommandRun run = launch::launch_testing::RunCommand(
      {launch::launch_testing::BinDir() + "/train_ps", "--steps", "4",
       "--hidden", "8", "--step-times-dir", "/nonexistent/steps"},
      {"TF_CONFIG="}, absl::Seconds(50));
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_THAT(run.output,
              HasSubstr("--step-times-dir /nonexistent/steps is not a "
                        "directory"));
  EXPECT_THAT(run.output, ::testing::Not(HasSubstr("final:")));
}

}  // namespace
}  // namespace cohort::examples
