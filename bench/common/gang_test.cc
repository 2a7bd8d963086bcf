// RunGang against real gangs of this test binary: a static initializer
// turns the re-executed binary into a gang member (the role comes from
// COHORT_GANG_TEST_ROLE in the task's environment, the partition from
// COHORT_TASK_NAME), so the launcher, its output capture and its verdict
// are the ones the suites use.
#include "bench/common/gang.h"

#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort::bench {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kRoleVar[] = "COHORT_GANG_TEST_ROLE";
constexpr char kDirVar[] = "COHORT_GANG_TEST_DIR";

// Partition 0's result line in every role that prints one.
Json ResultLine() {
  return Json{{"suite", "gangtest"},
              {"metric", "sync_p50"},
              {"params", {{"world", 2}}},
              {"value", 12.5},
              {"unit", "us"}};
}

// Waits (polling; no fixed sleep decides anything) until `path` exists, at
// most 60 s: the test's own timeout is the real bound.
bool WaitForFile(const std::string& path) {
  for (int i = 0; i < 6000; ++i) {
    if (access(path.c_str(), F_OK) == 0) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

// The gang member's behaviour; never returns when this process is one.
//  - "succeed": partition 0 prints the result line; everyone exits 0.
//  - "fail_after_result": partition 0 prints the result line, then marks
//    a file and exits 0; partition 1 waits for that file (so the line is
//    surely out before anything fails) and exits 3.
//  - "silent": everyone exits 0 and nobody prints a result.
//  - "garbled": partition 0 prints a result tag followed by non-JSON.
int RunAsGangMemberIfAsked() {
  const char* role = getenv(kRoleVar);
  if (role == nullptr) return 0;
  const std::string r = role;
  const char* task = getenv("COHORT_TASK_NAME");
  const bool first = task != nullptr && std::string(task) == "worker:0";
  const std::string mark = std::string(getenv(kDirVar)) + "/printed";
  if (r == "succeed" || r == "fail_after_result") {
    if (first) {
      PrintChildResult(ResultLine());
      std::ofstream(mark) << "1";
      _exit(0);
    }
    if (r == "succeed") _exit(0);
    _exit(WaitForFile(mark) ? 3 : 4);
  }
  if (r == "garbled") {
    if (first) std::cout << kResultTag << "{not json" << std::endl;
    _exit(0);
  }
  _exit(0);  // "silent"
}

[[maybe_unused]] const int kGangMember = RunAsGangMemberIfAsked();

class GangTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/cohort-gang-test-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
  }
  void TearDown() override {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }

  // Runs a gang of 2 in `role`; returns RunGang's verdict and the stdout
  // it printed.
  bool Run(const std::string& role, MeasurementLog* log, std::string* out) {
    GangRun run;
    run.suite = "gangtest";
    run.world = 2;
    run.rep = 4;
    run.note = "from the test";
    run.env = {std::string(kRoleVar) + "=" + role,
               std::string(kDirVar) + "=" + dir_};
    testing::internal::CaptureStdout();
    const bool ok = RunGang(run, log);
    *out = testing::internal::GetCapturedStdout();
    return ok;
  }

  std::string dir_;
};

TEST_F(GangTest, SucceededGangReportsPartitionZerosLines) {
  MeasurementLog log;
  std::string out;
  ASSERT_TRUE(Run("succeed", &log, &out)) << out;
  ASSERT_EQ(log.lines().size(), 1u) << out;
  Json want = ResultLine();
  want["rep"] = 4;
  want["note"] = "from the test";
  EXPECT_EQ(log.lines()[0], want);
  EXPECT_THAT(out, HasSubstr("\"sync_p50\""));
  EXPECT_THAT(out, Not(HasSubstr("\"error\"")));
}

TEST_F(GangTest, FailedGangNeverReportsPartitionZerosLines) {
  MeasurementLog log;
  std::string out;
  EXPECT_FALSE(Run("fail_after_result", &log, &out));
  // Partition 0 did print its line (partition 1 waited for it) and exited
  // 0; the gang failed all the same, so nothing of it is a figure.
  EXPECT_TRUE(log.lines().empty());
  EXPECT_THAT(out, Not(HasSubstr("\"metric\"")));
  EXPECT_THAT(out, HasSubstr("\"error\""));
  EXPECT_THAT(out, HasSubstr("the gang of 2 failed (1 result line(s) of "
                             "partition 0 dropped)"));
  EXPECT_THAT(out, HasSubstr("\"suite\":\"gangtest\""));
}

TEST_F(GangTest, GangWithoutResultFails) {
  MeasurementLog log;
  std::string out;
  EXPECT_FALSE(Run("silent", &log, &out));
  EXPECT_TRUE(log.lines().empty());
  EXPECT_THAT(out, HasSubstr("partition 0 printed no measurement"));
}

TEST_F(GangTest, UnreadableResultLineFails) {
  MeasurementLog log;
  std::string out;
  EXPECT_FALSE(Run("garbled", &log, &out));
  EXPECT_TRUE(log.lines().empty());
  EXPECT_THAT(out, HasSubstr("partition 0 printed an unreadable result line"));
}

}  // namespace
}  // namespace cohort::bench
