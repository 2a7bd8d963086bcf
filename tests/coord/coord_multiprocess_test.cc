// Multi-process coordination tests: a service process and task processes on
// 127.0.0.1 (OS-chosen ports), killed with SIGKILL, restarted, cut off by a
// proxy, or given the wrong token. Short heartbeat timeouts (1-2 s); every
// wait is on an expected output line with a deadline.
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/coord/test_process.h"

namespace cohort::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

const char kTaskBinary[] = COORD_TEST_TASK_BINARY;

struct Service {
  std::unique_ptr<TestProcess> process;
  int port = 0;
};

Service StartService(int tasks, int heartbeat_ms,
                     const std::vector<std::string>& extra = {}, int port = 0) {
  std::vector<std::string> argv = {kTaskBinary,
                                   "serve",
                                   "--jobs",
                                   absl::StrCat("worker=", tasks),
                                   "--heartbeat-timeout-ms",
                                   std::to_string(heartbeat_ms),
                                   "--port",
                                   std::to_string(port)};
  argv.insert(argv.end(), extra.begin(), extra.end());
  Service service;
  service.process = std::make_unique<TestProcess>(argv);
  std::string line = service.process->WaitForLine("PORT ");
  EXPECT_FALSE(line.empty()) << "service did not start";
  if (!line.empty() && !absl::SimpleAtoi(line.substr(5), &service.port)) {
    service.port = 0;
  }
  return service;
}

std::unique_ptr<TestProcess> StartTask(
    int port, int index, int heartbeat_ms, const std::string& actions,
    const std::vector<std::string>& extra = {}) {
  std::vector<std::string> argv = {kTaskBinary,
                                   "task",
                                   "--coordinator",
                                   absl::StrCat("127.0.0.1:", port),
                                   "--task",
                                   absl::StrCat("worker:", index),
                                   "--heartbeat-timeout-ms",
                                   std::to_string(heartbeat_ms),
                                   "--actions",
                                   actions};
  argv.insert(argv.end(), extra.begin(), extra.end());
  return std::make_unique<TestProcess>(argv);
}

TEST(CoordMultiprocessTest, KillDuringBarrierFailsSurvivorsNamingTheDeadTask) {
  Service service = StartService(3, 2000);
  auto t0 = StartTask(service.port, 0, 2000, "barrier:b:60000,wait");
  auto t1 = StartTask(service.port, 1, 2000, "barrier:b:60000,wait");
  auto t2 = StartTask(service.port, 2, 2000, "wait");
  for (auto* t : {t0.get(), t1.get(), t2.get()}) {
    ASSERT_THAT(t->WaitForLine("CONNECTED"), Not(IsEmpty()));
  }
  t2->Kill9();
  // The failed barrier and the error callback race in each survivor.
  for (auto* t : {t0.get(), t1.get()}) {
    std::string barrier = t->WaitForLineInAnyOrder("BARRIER b");
    EXPECT_THAT(barrier, HasSubstr("ERROR"));
    EXPECT_THAT(barrier, HasSubstr("worker:2"));
    EXPECT_THAT(t->WaitForLineInAnyOrder("AGENT_ERROR"), HasSubstr("worker:2"));
  }
}

TEST(CoordMultiprocessTest, KillWhileIdleReachesEverySurvivor) {
  Service service = StartService(3, 2000);
  auto t0 = StartTask(service.port, 0, 2000, "wait");
  auto t1 = StartTask(service.port, 1, 2000, "wait");
  auto t2 = StartTask(service.port, 2, 2000, "wait");
  for (auto* t : {t0.get(), t1.get(), t2.get()}) {
    ASSERT_THAT(t->WaitForLine("CONNECTED"), Not(IsEmpty()));
  }
  t1->Kill9();
  for (auto* t : {t0.get(), t2.get()}) {
    std::string error = t->WaitForLine("AGENT_ERROR");
    EXPECT_THAT(error, HasSubstr("unavailable"));
    EXPECT_THAT(error, HasSubstr("worker:1"));
  }
}

TEST(CoordMultiprocessTest, RestartWithNewIncarnationIsRejected) {
  Service service = StartService(2, 2000);
  auto t0 = StartTask(service.port, 0, 2000, "wait");
  auto t1 = StartTask(service.port, 1, 2000, "wait");
  ASSERT_THAT(t0->WaitForLine("CONNECTED"), Not(IsEmpty()));
  ASSERT_THAT(t1->WaitForLine("CONNECTED"), Not(IsEmpty()));
  t0->Kill9();
  t0->Wait();
  auto again = StartTask(service.port, 0, 2000, "wait");
  std::string line = again->WaitForLine("CONNECT");
  EXPECT_THAT(line, HasSubstr("CONNECT_ERROR aborted"));
  EXPECT_THAT(line, HasSubstr("restarted"));
  EXPECT_THAT(t1->WaitForLine("AGENT_ERROR"), HasSubstr("worker:0"));
}

TEST(CoordMultiprocessTest, RestartAcceptedWhenRecoverable) {
  Service service = StartService(2, 2000, {"--recoverable-jobs", "worker"});
  auto t0 = StartTask(service.port, 0, 2000, "wait");
  auto t1 =
      StartTask(service.port, 1, 2000, "get:go:20000,barrier:b:20000,shutdown");
  ASSERT_THAT(t0->WaitForLine("CONNECTED"), Not(IsEmpty()));
  ASSERT_THAT(t1->WaitForLine("CONNECTED"), Not(IsEmpty()));
  t0->Kill9();
  t0->Wait();
  auto again =
      StartTask(service.port, 0, 2000, "set:go:1,barrier:b:20000,shutdown");
  EXPECT_THAT(again->WaitForLine("CONNECT"), HasSubstr("CONNECTED"));
  EXPECT_THAT(again->WaitForLine("BARRIER b"), HasSubstr("OK"));
  EXPECT_THAT(t1->WaitForLine("BARRIER b"), HasSubstr("OK"));
  EXPECT_THAT(t1->WaitForLine("DONE"), Not(IsEmpty()));
  EXPECT_FALSE(t1->SawLineContaining("AGENT_ERROR"));
}

// The restart is seen by the task's re-issued error poll, which carries the
// old service incarnation. The heartbeat timeout (20 s) is far longer than
// the restart takes, so "lost contact" (tested by
// SilentPartitionIsDetectedByBothSides) cannot win the race here.
TEST(CoordMultiprocessTest, ServiceRestartIsDetected) {
  Service service = StartService(2, 20000);
  auto t0 = StartTask(service.port, 0, 20000, "wait");
  ASSERT_THAT(t0->WaitForLine("CONNECTED"), Not(IsEmpty()));
  const int port = service.port;
  service.process->Kill9();
  service.process->Wait();
  Service restarted = StartService(2, 20000, {}, port);
  ASSERT_EQ(restarted.port, port);
  std::string error = t0->WaitForLine("AGENT_ERROR");
  EXPECT_THAT(error, HasSubstr("restarted"));
}

TEST(CoordMultiprocessTest, DroppedConnectionThatRecoversIsNotAnError) {
  Service service = StartService(2, 2000);
  TcpProxy proxy(service.port);
  const std::string actions =
      "barrier:before:20000,get:go:20000,barrier:after:20000,shutdown";
  auto t0 = StartTask(proxy.port(), 0, 2000, actions);  // through the proxy
  auto t1 = StartTask(service.port, 1, 2000, actions);
  ASSERT_THAT(t0->WaitForLine("BARRIER before"), HasSubstr("OK"));
  ASSERT_THAT(t1->WaitForLine("BARRIER before"), HasSubstr("OK"));
  // Both now wait for "go". Cut worker:0 off for ~0.5 s (a network blip,
  // well inside the 2 s heartbeat timeout), then release both.
  proxy.Pause();
  absl::SleepFor(absl::Milliseconds(500));
  proxy.Resume();
  TestProcess setter({kTaskBinary, "set", "--coordinator",
                      absl::StrCat("127.0.0.1:", service.port), "--key", "go",
                      "--value", "1"});
  EXPECT_THAT(setter.WaitForLine("SET"), HasSubstr("OK"));
  for (auto* t : {t0.get(), t1.get()}) {
    EXPECT_THAT(t->WaitForLine("GET go"), HasSubstr("GET go 1"));
    EXPECT_THAT(t->WaitForLine("BARRIER after"), HasSubstr("OK"));
    EXPECT_THAT(t->WaitForLine("SHUTDOWN"), HasSubstr("SHUTDOWN OK"));
    EXPECT_FALSE(t->SawLineContaining("AGENT_ERROR"));
  }
}

// A silent partition (packets dropped, no reset) between worker:0 and the
// service: the service fails worker:0 once its heartbeats stop for the
// heartbeat timeout and tells worker:1; worker:0's agent, whose heartbeat
// calls now time out, reports the lost contact itself. Neither waits for
// its 20 s blocking get.
TEST(CoordMultiprocessTest, SilentPartitionIsDetectedByBothSides) {
  constexpr int kHeartbeatMs = 2000;
  Service service = StartService(2, kHeartbeatMs);
  TcpProxy proxy(service.port);
  const std::string actions = "get:never:20000,shutdown";
  auto t0 = StartTask(proxy.port(), 0, kHeartbeatMs, actions);
  auto t1 = StartTask(service.port, 1, kHeartbeatMs, actions);
  ASSERT_THAT(t0->WaitForLine("CONNECTED"), Not(IsEmpty()));
  ASSERT_THAT(t1->WaitForLine("CONNECTED"), Not(IsEmpty()));
  proxy.Blackhole();
  // Bounded by a few heartbeat timeouts, far below the get's 20 s.
  const absl::Duration within = absl::Milliseconds(3 * kHeartbeatMs);
  std::string told = t1->WaitForLine("AGENT_ERROR", within);
  EXPECT_THAT(told, HasSubstr("worker:0"));
  std::string own = t0->WaitForLine("AGENT_ERROR", within);
  EXPECT_THAT(own, Not(IsEmpty()))
      << "worker:0 did not notice that it lost the service";
}

// A wrong token is refused at once (the server's certificate is from
// another token's CA); a missing one cannot connect at all.
TEST(CoordMultiprocessTest, WrongOrMissingTokenIsRefused) {
  Service service = StartService(1, 2000, {"--token", "right-token-0123456"});
  auto wrong =
      StartTask(service.port, 0, 2000, "", {"--token", "wrong-token-0123456"});
  EXPECT_THAT(wrong->WaitForLine("CONNECT"),
              HasSubstr("CONNECT_ERROR unauthenticated"));
  // Without a token the client speaks plaintext to a job-TLS server, which
  // closes the connection: indistinguishable from a server still starting,
  // so the task retries until its register timeout (20 s), then says it
  // has no token.
  auto missing = StartTask(service.port, 0, 2000, "");
  const std::string line = missing->WaitForLine("CONNECT", absl::Seconds(40));
  EXPECT_THAT(line, HasSubstr("CONNECT_ERROR deadline_exceeded"));
  EXPECT_THAT(line, HasSubstr("no job token"));
  auto right = StartTask(service.port, 0, 2000, "shutdown",
                         {"--token", "right-token-0123456"});
  EXPECT_THAT(right->WaitForLine("CONNECT"), HasSubstr("CONNECTED"));
}

}  // namespace
}  // namespace cohort::testing
