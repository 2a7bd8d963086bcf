// The coordination CLI end to end: `cohort coordinator` on an OS-chosen
// port, `cohort kv` and `cohort status` against it, with and without the
// job token, and a task process that registers.
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "cohort/base/json.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/coord/test_process.h"

namespace cohort::testing {
namespace {

using ::testing::HasSubstr;

const char kCohort[] = COHORT_BINARY;
const char kTaskBinary[] = COORD_TEST_TASK_BINARY;

// Runs the cohort CLI to completion; returns its stdout lines and exit code.
struct Result {
  std::vector<std::string> lines;
  int exit_code = -1;
};

Result RunCli(std::vector<std::string> args) {
  args.insert(args.begin(), kCohort);
  TestProcess p(args);
  p.WaitForLine("\x01never\x01", absl::Seconds(20));  // read until EOF
  Result r;
  r.lines = p.lines();
  int status = p.Wait(absl::Seconds(10));
  r.exit_code = (status >= 0 && WIFEXITED(status)) ? WEXITSTATUS(status) : -1;
  return r;
}

TEST(CoordCliTest, CoordinatorKvAndStatus) {
  TestProcess coordinator({kCohort, "coordinator", "--cluster",
                           R"({"worker": ["localhost:1", "localhost:2"]})",
                           "--port", "0", "--token", "coord-cli-test-token"});
  std::string first = coordinator.WaitForLine("");
  int port = 0;
  ASSERT_TRUE(absl::SimpleAtoi(first, &port)) << first;
  const std::string target = absl::StrCat("127.0.0.1:", port);
  const std::vector<std::string> auth = {"--coordinator", target, "--token",
                                         "coord-cli-test-token"};
  auto with = [&](std::vector<std::string> args) {
    args.insert(args.end(), auth.begin(), auth.end());
    return RunCli(args);
  };
  EXPECT_EQ(with({"kv", "set", "cfg/lr", "0.1"}).exit_code, 0);
  Result get = with({"kv", "get", "cfg/lr"});
  EXPECT_EQ(get.exit_code, 0);
  ASSERT_EQ(get.lines.size(), 1u);
  EXPECT_EQ(get.lines[0], "0.1");
  EXPECT_EQ(with({"kv", "set", "cfg/lr", "0.2"}).exit_code, 1);  // exists
  EXPECT_EQ(with({"kv", "add", "step", "3"}).lines.at(0), "3");
  EXPECT_EQ(with({"kv", "add", "step", "4"}).lines.at(0), "7");
  Result ls = with({"kv", "ls", "cfg"});
  EXPECT_THAT(ls.lines, ::testing::ElementsAre("cfg/lr=0.1"));
  EXPECT_EQ(with({"kv", "rm", "cfg"}).exit_code, 0);
  EXPECT_EQ(with({"kv", "get", "cfg/lr"}).exit_code, 2);
  // Wrong token: refused, and no data.
  Result wrong = RunCli({"kv", "get", "step", "--coordinator", target,
                         "--token", "not-the-job-token-0"});
  EXPECT_EQ(wrong.exit_code, 1);
  EXPECT_TRUE(wrong.lines.empty());

  TestProcess task({kTaskBinary, "task", "--coordinator", target, "--task",
                    "worker:1", "--token", "coord-cli-test-token",
                    "--heartbeat-timeout-ms", "5000", "--actions", "wait"});
  ASSERT_THAT(task.WaitForLine("CONNECTED"), HasSubstr("CONNECTED"));
  Result status = with({"status", "--format", "json"});
  ASSERT_EQ(status.exit_code, 0);
  ASSERT_EQ(status.lines.size(), 1u);
  auto json = ParseJson(status.lines[0], "status");
  ASSERT_TRUE(json.ok());
  EXPECT_EQ((*json)["job_state"], "running");
  ASSERT_EQ((*json)["tasks"].size(), 2u);
  EXPECT_EQ((*json)["tasks"][0]["state"], "not_registered");
  EXPECT_EQ((*json)["tasks"][1]["state"], "connected");
  Result text = with({"status"});
  EXPECT_EQ(text.exit_code, 0);
  bool saw_connected = false;
  for (const auto& line : text.lines) {
    if (line.find("worker:1") != std::string::npos &&
        line.find("connected") != std::string::npos) {
      saw_connected = true;
    }
  }
  EXPECT_TRUE(saw_connected);
  // SIGTERM stops the coordinator cleanly.
  coordinator.Terminate();
  int exit_status = coordinator.Wait(absl::Seconds(10));
  EXPECT_TRUE(exit_status >= 0 && WIFEXITED(exit_status) &&
              WEXITSTATUS(exit_status) == 0);
}

// The token from a file (not the command line, where `ps` shows it) and
// from the environment; a server beyond loopback without a token refuses to
// start unless told --insecure.
TEST(CoordCliTest, TokenFileEnvironmentAndLoopbackRule) {
  const std::string token_file =
      absl::StrCat(::testing::TempDir(), "/coord_cli_token.", getpid());
  FILE* f = fopen(token_file.c_str(), "w");
  ASSERT_NE(f, nullptr);
  fputs("file-token-0123456789\n", f);
  fclose(f);
  // Readable by others: refused before anything is sent.
  ASSERT_EQ(chmod(token_file.c_str(), 0644), 0);
  EXPECT_EQ(RunCli({"kv", "get", "k", "--coordinator", "127.0.0.1:1",
                    "--token-file", token_file})
                .exit_code,
            1);
  ASSERT_EQ(chmod(token_file.c_str(), 0600), 0);
  TestProcess coordinator({kCohort, "coordinator", "--cluster",
                           R"({"worker": ["localhost:1"]})", "--port", "0",
                           "--token-file", token_file});
  std::string first = coordinator.WaitForLine("");
  int port = 0;
  ASSERT_TRUE(absl::SimpleAtoi(first, &port)) << first;
  const std::string target = absl::StrCat("127.0.0.1:", port);
  EXPECT_EQ(RunCli({"kv", "set", "k", "v", "--coordinator", target,
                    "--token-file", token_file})
                .exit_code,
            0);
  // No token at all: refused.
  EXPECT_EQ(RunCli({"kv", "get", "k", "--coordinator", target}).exit_code, 1);
  // The token from the environment, as `cohort launch` gives its tasks.
  setenv("COHORT_JOB_TOKEN", "file-token-0123456789", 1);
  Result from_env = RunCli({"kv", "get", "k", "--coordinator", target});
  unsetenv("COHORT_JOB_TOKEN");
  EXPECT_EQ(from_env.exit_code, 0);
  EXPECT_THAT(from_env.lines, ::testing::ElementsAre("v"));
  // A token that can be guessed: refused.
  EXPECT_EQ(
      RunCli({"kv", "get", "k", "--coordinator", target, "--token", "short"})
          .exit_code,
      1);
  // Both token flags at once: a usage error, nothing sent.
  EXPECT_EQ(RunCli({"kv", "get", "k", "--coordinator", target, "--token-file",
                    token_file, "--token", "x"})
                .exit_code,
            1);

  // Beyond loopback with neither token nor TLS: refuses to start...
  setenv("COHORT_JOB_TOKEN", "", 1);
  Result open =
      RunCli({"coordinator", "--cluster", R"({"worker": ["localhost:1"]})",
              "--host", "0.0.0.0", "--port", "0"});
  EXPECT_NE(open.exit_code, 0);
  EXPECT_TRUE(open.lines.empty()) << "it must not print a port";
  // ...unless asked for explicitly.
  TestProcess insecure({kCohort, "coordinator", "--cluster",
                        R"({"worker": ["localhost:1"]})", "--host", "0.0.0.0",
                        "--port", "0", "--insecure"});
  unsetenv("COHORT_JOB_TOKEN");
  int insecure_port = 0;
  EXPECT_TRUE(absl::SimpleAtoi(insecure.WaitForLine(""), &insecure_port));
  insecure.Terminate();
  coordinator.Terminate();
  std::remove(token_file.c_str());
}

}  // namespace
}  // namespace cohort::testing
