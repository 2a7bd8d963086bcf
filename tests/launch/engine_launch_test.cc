// `cohort launch --engine ...` as separate processes on this machine: two
// pods of a Kubernetes Indexed Job against the fake API server, a launcher
// killed with SIGKILL failing the whole job, and the job token file that
// engine task 0 creates for the others.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "cohort/base/json.h"
#include "cohort/cluster/resolvers/testing/fake_kubernetes_server.h"
#include "cohort/rpc/socket.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/launch/command_run.h"

namespace cohort::launch {
namespace {

using launch_testing::BinDir;
using launch_testing::CommandRun;
using launch_testing::FinishCommand;
using launch_testing::StartCommand;
using ::testing::HasSubstr;
using ::testing::Not;

class EngineLaunchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = launch_testing::FreshTestDir("engine_launch_test");
    ASSERT_FALSE(dir_.empty());
    for (int i = 0; i < 2; ++i) {
      auto port = rpc::PickFreePort("127.0.0.1");
      ASSERT_TRUE(port.ok());
      ports_.push_back(*port);
    }
  }

  // `cohort launch --engine ENGINE FLAGS -- /bin/sh -c SCRIPT` ($C: cohort,
  // $D: a directory every task shares).
  std::vector<std::string> Argv(const std::string& engine,
                                const std::vector<std::string>& flags,
                                const std::string& script) {
    std::vector<std::string> argv = {BinDir() + "/cohort",
                                     "launch",
                                     "--engine",
                                     engine,
                                     "--log-dir",
                                     dir_ + "/logs",
                                     "--rendezvous-timeout",
                                     "30"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    for (const std::string& a :
         {std::string("--"), std::string("/bin/sh"), std::string("-c"),
          "C=" + BinDir() + "/cohort; D=" + dir_ + "; " + script}) {
      argv.push_back(a);
    }
    return argv;
  }

  // TF_CONFIG of engine task `index` in a 2-worker cluster on ports_.
  std::string TfConfig(int index) {
    return absl::StrCat(R"(TF_CONFIG={"cluster": {"worker": ["127.0.0.1:)",
                        ports_[0], R"(", "127.0.0.1:)", ports_[1],
                        R"("]}, "task": {"type": "worker", "index": )", index,
                        "}}");
  }

  std::string dir_;
  std::vector<int> ports_;
};

// Two pods of the Indexed Job "train" (namespace "ml"): the fixture's pod
// list cut to indexes 0 and 1, with this machine's address as their pod IP.
TEST_F(EngineLaunchTest, KubernetesIndexedJobPodsRunTheJob) {
  auto list = cohort::testing::IndexedJobPods(COHORT_SOURCE_DIR, 2);
  ASSERT_TRUE(list.ok()) << list.status();
  for (Json& pod : (*list)["items"]) pod["status"]["podIP"] = "127.0.0.1";
  cohort::testing::FakeKubernetesServer server{std::string("sa-token")};
  const std::string selector = "batch.kubernetes.io/job-name=train";
  server.SetPodList(selector, *list);
  ASSERT_TRUE(server.Start().ok());
  const std::string kubeconfig = dir_ + "/kubeconfig";
  std::ofstream(kubeconfig) << server.Kubeconfig("sa-token");

  std::vector<std::unique_ptr<Subprocess>> pods;
  const absl::Time start = absl::Now();
  for (int i = 0; i < 2; ++i) {
    pods.push_back(StartCommand(
        Argv("kubernetes", {"--num-tasks", "2", "--bind-host", "127.0.0.1"},
             "$C task barrier && $C task allgather \"pod $JOB_COMPLETION_INDEX "
             "is $COHORT_TASK_NAME\""),
        {absl::StrCat("JOB_COMPLETION_INDEX=", i),
         absl::StrCat("HOSTNAME=train-", i), "KUBERNETES_SERVICE_HOST=",
         "KUBECONFIG=" + kubeconfig, "COHORT_KUBERNETES_NAMESPACE=ml",
         absl::StrCat("COHORT_KUBERNETES_PORT=", ports_[0]),
         "COHORT_JOB_TOKEN=k8s-test-token-0123"}));
    ASSERT_NE(pods.back(), nullptr);
  }
  for (int i = 0; i < 2; ++i) {
    CommandRun r = FinishCommand(*pods[i], start);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_THAT(r.output, HasSubstr(absl::StrCat("[worker:", i,
                                                 "] [\"pod 0 is worker:0\","
                                                 "\"pod 1 is worker:1\"]")));
  }
  EXPECT_EQ(
      server.requests().at(0),
      absl::StrCat("GET /api/v1/namespaces/ml/pods?labelSelector=", selector));
}

// Task 0's launcher prints the training progress line from the programs'
// metrics (coord/task_metrics.h): each task publishes one point, then both
// meet at the barrier; the attempt's last line (printed when it ends, from
// both points) is deterministic.
TEST_F(EngineLaunchTest, Task0PrintsTheTrainingProgressLine) {
  std::vector<std::unique_ptr<Subprocess>> launchers;
  const absl::Time start = absl::Now();
  for (int i = 0; i < 2; ++i) {
    launchers.push_back(StartCommand(
        Argv("tf_config", {"--progress-every", "60"},
             "i=${COHORT_TASK_NAME#*:}; $C kv set --overwrite --coordinator "
             "$COHORT_COORDINATION_SERVICE_ADDRESS "
             "cohort/metrics/$COHORT_TASK_NAME "
             "\"{\\\"task\\\":\\\"$COHORT_TASK_NAME\\\",\\\"global_step\\\":$(("
             "10 + i)),"
             "\\\"examples_per_sec\\\":100,\\\"global_steps_per_sec\\\":10,"
             "\\\"last_step\\\":100,\\\"time_unix_ms\\\":$(date +%s%3N)}\" && "
             "$C task barrier"),
        {TfConfig(i), "COHORT_JOB_TOKEN=engine-progress-token-0123"}));
    ASSERT_NE(launchers.back(), nullptr);
  }
  for (int i = 0; i < 2; ++i) {
    CommandRun r = FinishCommand(*launchers[i], start);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    if (i == 0) {
      EXPECT_THAT(r.output,
                  HasSubstr("[cohort tf_config task 0] progress: global step "
                            "11/100 (11%), 200 examples/s, ETA 9s"));
    } else {
      EXPECT_THAT(r.output, Not(HasSubstr("progress: global step")));
    }
  }
}

// A launcher that dies (its node lost) stops its heartbeats to task 0's
// control plane: task 0's launcher names it at the heartbeat timeout, and
// once the partition grace has passed too the other launcher stops its
// program and fails, naming it and its host.
TEST_F(EngineLaunchTest, ALostLauncherFailsTheWholeJob) {
  std::vector<std::unique_ptr<Subprocess>> launchers;
  const absl::Time start = absl::Now();
  for (int i = 0; i < 2; ++i) {
    launchers.push_back(StartCommand(
        Argv("tf_config",
             {"--heartbeat-timeout", "2", "--partition-grace", "2",
              "--max-restarts", "3", "--stop-grace", "1"},
             "echo $$ > $D/pid.$COHORT_PARTITION_ID; exec sleep 60"),
        {TfConfig(i), "COHORT_JOB_TOKEN=lost-test-token-0123"}));
    ASSERT_NE(launchers.back(), nullptr);
  }
  // Once both programs run, kill launcher 1 (only the launcher: its program
  // lives on, as on a node whose launcher alone died).
  const std::string pid1 = dir_ + "/pid.1";
  while (access((dir_ + "/pid.0").c_str(), F_OK) != 0 ||
         access(pid1.c_str(), F_OK) != 0) {
    ASSERT_LT(absl::Now() - start, absl::Seconds(30)) << "programs never ran";
    absl::SleepFor(absl::Milliseconds(20));
  }
  kill(launchers[1]->pid(), SIGKILL);
  CommandRun r = FinishCommand(*launchers[0], start);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output,
              HasSubstr("launcher:1 (worker:1) on 127.0.0.1 has sent no "
                        "heartbeat for "));
  EXPECT_THAT(r.output,
              HasSubstr("s: its host may be partitioned, stalled or down; "
                        "it is declared lost 4s after its last heartbeat"));
  EXPECT_THAT(r.output, HasSubstr("task launcher:1 (incarnation"));
  EXPECT_THAT(r.output, HasSubstr("sent no heartbeat for 4"));
  EXPECT_THAT(r.output, HasSubstr("(launcher:1 runs on 127.0.0.1)"));
  EXPECT_THAT(r.output, HasSubstr("stopped worker:0"));
  // The orphaned program of the killed launcher.
  std::ifstream pid_in(pid1);
  int orphan = 0;
  if (pid_in >> orphan && orphan > 0) kill(-orphan, SIGKILL);
  FinishCommand(*launchers[1], start);
}

// A program whose heartbeats stop (SIGSTOP, tests/barrier/heartbeat_task.cc)
// is failed by the programs' coordination service on task 0's launcher,
// which fails the attempt for every launcher.
TEST_F(EngineLaunchTest, AProgramsLostHeartbeatFailsTheJob) {
  std::vector<std::unique_ptr<Subprocess>> launchers;
  const absl::Time start = absl::Now();
  for (int i = 0; i < 2; ++i) {
    std::vector<std::string> argv = {BinDir() + "/cohort",
                                     "launch",
                                     "--engine",
                                     "tf_config",
                                     "--log-dir",
                                     dir_ + "/logs",
                                     "--heartbeat-timeout",
                                     "2",
                                     "--partition-grace",
                                     "0",
                                     "--stop-grace",
                                     "1",
                                     "--",
                                     BinDir() + "/barrier_heartbeat_task"};
    launchers.push_back(
        StartCommand(argv, {TfConfig(i), "COHORT_JOB_TOKEN=hb-test-token-0123",
                            "TEST_HEARTBEAT_S=2"}));
    ASSERT_NE(launchers.back(), nullptr);
  }
  CommandRun task0 = FinishCommand(*launchers[0], start);
  CommandRun task1 = FinishCommand(*launchers[1], start);
  EXPECT_NE(task0.exit_code, 0) << task0.output;
  EXPECT_NE(task1.exit_code, 0) << task1.output;
  EXPECT_THAT(task0.output, HasSubstr("attempt 0 failed: task worker:1 (on "));
  EXPECT_THAT(task0.output,
              HasSubstr("was failed by the coordination service"));
  EXPECT_THAT(task1.output, HasSubstr("stopped worker:1"));
  EXPECT_LT(task1.elapsed, absl::Seconds(30));
}

// Any holder of the job token can write the control plane's keys: a forged
// failure record with wrong types, an engine task out of range, exit code 0
// and a long tail fails the job cleanly (exit 1, a bounded summary) instead
// of crashing a launcher or passing for success.
TEST_F(EngineLaunchTest, AForgedFailureRecordFailsTheJobCleanly) {
  std::string tail;
  for (int i = 0; i < 50; ++i) absl::StrAppend(&tail, i ? "," : "", "\"x\"");
  const std::string record =
      absl::StrCat(R"({"task":"evil:0","code":0,"job_task":100000000,)",
                   R"("when_ns":"soon","tail":[)", tail, "]}");
  std::vector<std::unique_ptr<Subprocess>> launchers;
  const absl::Time start = absl::Now();
  for (int i = 0; i < 2; ++i) {
    launchers.push_back(StartCommand(
        Argv("tf_config", {"--stop-grace", "1"},
             absl::StrCat("if [ $COHORT_PARTITION_ID = 1 ]; then $C kv set "
                          "--coordinator framed:127.0.0.1:",
                          ports_[0], " cohort/launch/0/verdict '", record,
                          "'; fi; exec sleep 60")),
        {TfConfig(i), "COHORT_JOB_TOKEN=forge-test-token-0123"}));
    ASSERT_NE(launchers.back(), nullptr);
  }
  for (int i = 0; i < 2; ++i) {
    CommandRun r = FinishCommand(*launchers[i], start);
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_THAT(r.output, HasSubstr("task evil:0"));
    EXPECT_LT(r.elapsed, absl::Seconds(30));
    if (i == 0) {
      EXPECT_THAT(r.output, HasSubstr("last 10 line(s)"));
      EXPECT_THAT(r.output, Not(HasSubstr("last 50 line(s)")));
    }
  }
}

// --token-file naming a file that does not exist: engine task 0 creates it
// (random, mode 0600) and task 1 waits for it on the shared file system.
TEST_F(EngineLaunchTest, Task0CreatesThePrivateTokenFile) {
  const std::string token_file = dir_ + "/job-token";
  std::vector<std::unique_ptr<Subprocess>> launchers;
  const absl::Time start = absl::Now();
  for (int i = 1; i >= 0; --i) {  // task 1 first: it must wait for the file
    launchers.push_back(StartCommand(
        Argv("tf_config", {"--token-file", token_file, "--no-progress"},
             "echo token=$COHORT_JOB_TOKEN"),
        {TfConfig(i), "COHORT_JOB_TOKEN="}));
    ASSERT_NE(launchers.back(), nullptr);
  }
  std::string tokens[2];
  for (int i = 0; i < 2; ++i) {
    CommandRun r = FinishCommand(*launchers[i], start);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    const size_t at = r.output.find("token=");
    ASSERT_NE(at, std::string::npos) << r.output;
    tokens[i] = r.output.substr(at, r.output.find('\n', at) - at);
  }
  EXPECT_EQ(tokens[0], tokens[1]);
  EXPECT_GE(tokens[0].size(), std::string("token=").size() + 32);
  struct stat st {};
  ASSERT_EQ(stat(token_file.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);

  // A token file others can read is refused.
  chmod(token_file.c_str(), 0644);
  CommandRun r = launch_testing::RunCommand(
      Argv("tf_config", {"--token-file", token_file}, "true"),
      {TfConfig(0), "COHORT_JOB_TOKEN="});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.output, HasSubstr("chmod 600"));

  // Nor is a link to a private file, or (as root) another user's file.
  chmod(token_file.c_str(), 0600);
  const std::string link = dir_ + "/token-link";
  ASSERT_EQ(symlink(token_file.c_str(), link.c_str()), 0);
  r = launch_testing::RunCommand(
      Argv("tf_config", {"--token-file", link}, "true"),
      {TfConfig(0), "COHORT_JOB_TOKEN="});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.output, HasSubstr("symbolic link"));
  if (geteuid() == 0 && chown(token_file.c_str(), 65534, 65534) == 0) {
    r = launch_testing::RunCommand(
        Argv("tf_config", {"--token-file", token_file}, "true"),
        {TfConfig(0), "COHORT_JOB_TOKEN="});
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_THAT(r.output, HasSubstr("owned by uid 65534"));
  }
}

}  // namespace
}  // namespace cohort::launch
