// The runtime suite's helpers: child processes (with /bin/sh as the
// child), iperf3's JSON report and /proc CPU times. The suite itself runs
// as the bench_runtime_smoke ctest.
#include <signal.h>
#include <unistd.h>

#include <string>

#include "absl/time/time.h"
#include "bench/runtime/child_process.h"
#include "bench/runtime/iperf3_peer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort::bench {
namespace {

using ::testing::HasSubstr;

TEST(ChildProcessTest, AwaitLineReturnsTheRestOfTheLineAndStopSignals) {
  auto child = ChildProcess::Start(
      "sh", {"/bin/sh", "-c",
             "echo starting >&2; echo 'serving grpc://h:1'; exec sleep 60"});
  ASSERT_TRUE(child.ok()) << child.status();
  auto rest = (*child)->AwaitLine("serving ", absl::Seconds(30));
  ASSERT_TRUE(rest.ok()) << rest.status();
  EXPECT_EQ(*rest, "grpc://h:1");
  const launch::ExitInfo how = (*child)->Stop(absl::Seconds(10));
  EXPECT_TRUE(how.signaled);
  EXPECT_EQ(how.value, SIGTERM);
  EXPECT_THAT((*child)->Tail(), HasSubstr("starting"));
  // Idempotent.
  EXPECT_EQ((*child)->Stop(absl::Seconds(1)).value, SIGTERM);
}

TEST(ChildProcessTest, AChildThatExitsFirstIsNamedWithItsOutput) {
  auto child = ChildProcess::Start(
      "task:7", {"/bin/sh", "-c", "echo 'bad flag --x'; exit 3"});
  ASSERT_TRUE(child.ok()) << child.status();
  auto rest = (*child)->AwaitLine("serving ", absl::Seconds(30));
  EXPECT_EQ(rest.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(rest.status().message(), HasSubstr("task:7"));
  EXPECT_THAT(rest.status().message(), HasSubstr("bad flag --x"));
  auto how = (*child)->WaitForExit(absl::Seconds(30));
  ASSERT_TRUE(how.ok()) << how.status();
  EXPECT_FALSE(how->signaled);
  EXPECT_EQ(how->value, 3);
}

TEST(ChildProcessTest, WaitForExitKillsAChildPastItsTimeout) {
  auto child = ChildProcess::Start("sleeper", {"/bin/sh", "-c", "sleep 60"});
  ASSERT_TRUE(child.ok()) << child.status();
  EXPECT_FALSE((*child)->AwaitExit(absl::Milliseconds(1)));
  auto how = (*child)->WaitForExit(absl::Milliseconds(50));
  EXPECT_EQ(how.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_TRUE((*child)->AwaitExit(absl::ZeroDuration()));
}

TEST(ChildProcessTest, AMissingProgramIsNotFound) {
  auto child =
      ChildProcess::Start("nothing", {"/nonexistent/cohort-no-such-program"});
  EXPECT_EQ(child.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(child.status().message(), HasSubstr("nothing"));
}

TEST(ProcessCpuSecondsTest, ReadsThisProcessAndRefusesAMissingOne) {
  auto self = ProcessCpuSeconds(getpid());
  ASSERT_TRUE(self.ok()) << self.status();
  EXPECT_GE(*self, 0);
  // Above pid_max (2^22 at most on Linux).
  EXPECT_EQ(ProcessCpuSeconds(1 << 23).status().code(),
            absl::StatusCode::kNotFound);
}

TEST(Iperf3Test, ParsesTheReceiverRateAfterOtherOutput) {
  const std::string report = R"(warning: something
{"start": {"version": "iperf 3.12"},
 "end": {"sum_sent": {"bits_per_second": 2e10},
         "sum_received": {"bits_per_second": 12284000000.5}}}
)";
  auto bps = ParseIperf3ReceivedBitsPerSecond(report);
  ASSERT_TRUE(bps.ok()) << bps.status();
  EXPECT_DOUBLE_EQ(*bps, 12284000000.5);
}

TEST(Iperf3Test, ReportsIperf3sOwnErrorAndRefusesOtherText) {
  auto error = ParseIperf3ReceivedBitsPerSecond(
      R"({"start": {}, "error": "unable to connect to server"})");
  EXPECT_EQ(error.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(error.status().message(), HasSubstr("unable to connect"));
  EXPECT_EQ(ParseIperf3ReceivedBitsPerSecond("no json").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseIperf3ReceivedBitsPerSecond(R"({"end": {}})").status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace cohort::bench
