// ClusterLauncher: N launchers, as N engine tasks would run them, each in a
// thread of this test with its own /bin/sh program; the rendezvous, the
// agreed TF_CONFIG, gang failure, whole-gang retries and interruption over a
// real coordination service. Real Slurm runs are in tests/launch/.
#include "cohort/launch/cluster_launcher.h"

#include <unistd.h>

#include <fstream>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "cohort/base/json.h"
#include "cohort/rpc/socket.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort::launch {
namespace {

using ::testing::HasSubstr;

class ClusterLauncherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = absl::StrCat(::testing::TempDir(), "/cluster_launcher_test.",
                        getpid(), ".", absl::ToUnixNanos(absl::Now()));
    auto port = rpc::PickFreePort("127.0.0.1");
    ASSERT_TRUE(port.ok());
    rendezvous_ = absl::StrCat("127.0.0.1:", *port);
  }

  ClusterLaunchOptions Options(int index, int count) {
    ClusterLaunchOptions o;
    o.engine.engine = "test";
    o.engine.index = index;
    o.engine.count = count;
    o.engine.hosts.assign(count, "127.0.0.1");
    o.engine.rendezvous = rendezvous_;
    o.engine.source = "the test's engine";
    o.job_token = "test-token";
    o.bind_host = "127.0.0.1";
    o.rendezvous_timeout = absl::Seconds(30);
    o.stop_grace = absl::Seconds(2);
    o.log_dir = absl::StrCat(dir_, "/logs-", index);
    o.progress = false;
    o.command = {"/bin/sh", "-c", script_};
    o.extra_env = {absl::StrCat("TEST_DIR=", dir_)};
    o.output = [this](const std::string& line) {
      absl::MutexLock lock(&mu_);
      output_.push_back(line);
    };
    o.messages = [this, index](const std::string& line) {
      absl::MutexLock lock(&mu_);
      messages_[index].push_back(line);
    };
    return o;
  }

  // Runs `count` launchers to the end; `adjust` may change each's options.
  std::vector<absl::StatusOr<LaunchResult>> RunAll(
      int count, std::function<void(ClusterLaunchOptions&)> adjust = {}) {
    std::vector<absl::StatusOr<LaunchResult>> results(
        count, absl::UnknownError("not run"));
    std::vector<std::thread> threads;
    for (int i = 0; i < count; ++i) {
      threads.emplace_back([&, i] {
        ClusterLaunchOptions o = Options(i, count);
        if (adjust) adjust(o);
        ClusterLauncher launcher(Env::Default(), o);
        {
          absl::MutexLock lock(&mu_);
          launchers_[i] = &launcher;
        }
        results[i] = launcher.Run();
        absl::MutexLock lock(&mu_);
        launchers_.erase(i);
      });
    }
    for (std::thread& t : threads) t.join();
    return results;
  }

  std::string Messages(int index) {
    absl::MutexLock lock(&mu_);
    return absl::StrJoin(messages_[index], "\n");
  }
  std::set<std::string> Output() {
    absl::MutexLock lock(&mu_);
    return {output_.begin(), output_.end()};
  }
  std::vector<std::string> Record() {
    std::ifstream in(dir_ + "/record");
    std::vector<std::string> lines;
    for (std::string l; std::getline(in, l);) lines.push_back(l);
    return lines;
  }

  std::string dir_;
  std::string rendezvous_;
  std::string script_;
  absl::Mutex mu_;
  std::vector<std::string> output_ ABSL_GUARDED_BY(mu_);
  std::map<int, std::vector<std::string>> messages_ ABSL_GUARDED_BY(mu_);
  std::map<int, ClusterLauncher*> launchers_ ABSL_GUARDED_BY(mu_);
};

TEST_F(ClusterLauncherTest, EveryTaskGetsTheAgreedClusterAndItsRole) {
  // Each program prints what it got, then waits until all four have: the
  // gang's success stops the ps program, which must have printed by then.
  script_ =
      "echo \"$COHORT_TASK_NAME p=$COHORT_PARTITION_ID n=$COHORT_NUM_TASKS "
      "a=$COHORT_ATTEMPT_NUMBER t=$COHORT_JOB_TOKEN $TF_CONFIG\"; "
      "echo x >> $TEST_DIR/record; "
      "while [ $(wc -l < $TEST_DIR/record) -lt 4 ]; do sleep 0.01; done";
  mkdir(dir_.c_str(), 0755);
  auto results = RunAll(4, [](ClusterLaunchOptions& o) {
    o.jobs = {{"chief", 1}, {"worker", 2}, {"ps", 1}};
  });
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(results[i].ok()) << i << ": " << results[i].status();
    EXPECT_TRUE(results[i]->succeeded) << Messages(i);
    EXPECT_EQ(results[i]->exit_code, 0);
    EXPECT_EQ(results[i]->attempts, 1);
  }
  // Engine tasks in job-name order: chief:0, ps:0, worker:0, worker:1.
  std::map<std::string, Json> tf_config;
  for (const std::string& line : Output()) {
    const size_t brace = line.find('{');
    ASSERT_NE(brace, std::string::npos) << line;
    auto json = ParseJson(line.substr(brace), "TF_CONFIG");
    ASSERT_TRUE(json.ok()) << line;
    const std::string task = line.substr(1, line.find(']') - 1);
    tf_config[task] = *json;
    EXPECT_THAT(line, HasSubstr("a=0 t=test-token"));
    if (task == "chief:0") EXPECT_THAT(line, HasSubstr("p=0 n=3"));
    if (task == "worker:1") EXPECT_THAT(line, HasSubstr("p=2 n=3"));
    if (task == "ps:0") EXPECT_THAT(line, HasSubstr("p= n="));
  }
  ASSERT_EQ(tf_config.size(), 4u);
  const Json cluster = tf_config["chief:0"]["cluster"];
  EXPECT_EQ(cluster["worker"].size(), 2u);
  EXPECT_EQ(cluster["ps"].size(), 1u);
  std::set<std::string> addresses;
  for (auto& [task, config] : tf_config) {
    EXPECT_EQ(config["cluster"], cluster) << task;
    for (const auto& job : config["cluster"].items()) {
      for (const Json& a : job.value()) addresses.insert(a);
    }
  }
  EXPECT_EQ(addresses.size(), 4u) << cluster.dump();
  EXPECT_EQ(tf_config["worker:1"]["task"]["index"], 1);
}

TEST_F(ClusterLauncherTest, AFailureStopsEveryProgramAndTask0NamesIt) {
  script_ =
      "if [ \"$COHORT_TASK_NAME\" = worker:1 ]; then echo dying; exit 3; fi; "
      "exec sleep 60";
  auto results = RunAll(3);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(results[i].ok()) << i << ": " << results[i].status();
    EXPECT_FALSE(results[i]->succeeded);
    EXPECT_EQ(results[i]->exit_code, 3) << Messages(i);
    EXPECT_THAT(results[i]->failure_summary, HasSubstr("task worker:1 (pid "));
  }
  const std::string summary = results[0]->failure_summary;
  EXPECT_THAT(summary, HasSubstr("exited with code 3"));
  EXPECT_THAT(summary, HasSubstr("  | dying"));
  EXPECT_THAT(summary, HasSubstr("stopped 2 other task(s) of attempt 0"));
  EXPECT_THAT(Messages(2), HasSubstr("stopped worker:2"));
}

// worker:0 fails attempt 0 once every program of it runs.
TEST_F(ClusterLauncherTest, TheWholeGangRestartsTogether) {
  script_ =
      "echo $COHORT_ATTEMPT_NUMBER/$COHORT_TASK_NAME >> $TEST_DIR/record; "
      "if [ \"$COHORT_TASK_NAME/$COHORT_ATTEMPT_NUMBER\" = worker:0/0 ]; "
      "then while [ $(grep -c ^0/ $TEST_DIR/record) -lt 3 ]; do sleep 0.01; "
      "done; exit 5; fi; "
      "if [ $COHORT_ATTEMPT_NUMBER = 0 ]; then exec sleep 60; fi";
  mkdir(dir_.c_str(), 0755);
  auto results = RunAll(3, [](ClusterLaunchOptions& o) { o.max_restarts = 2; });
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(results[i].ok()) << i << ": " << results[i].status();
    EXPECT_TRUE(results[i]->succeeded) << Messages(i);
    EXPECT_EQ(results[i]->attempts, 2);
  }
  std::vector<std::string> record = Record();
  std::multiset<std::string> starts(record.begin(), record.end());
  EXPECT_EQ(starts, (std::multiset<std::string>{"0/worker:0", "0/worker:1",
                                                "0/worker:2", "1/worker:0",
                                                "1/worker:1", "1/worker:2"}));
  EXPECT_THAT(Messages(0), HasSubstr("restarting the whole gang as attempt 1"));
}

TEST_F(ClusterLauncherTest, PsProgramsStopWhenTheGangSucceeds) {
  script_ = "if [ \"$COHORT_TASK_NAME\" = ps:0 ]; then exec sleep 60; fi";
  auto results = RunAll(2, [](ClusterLaunchOptions& o) {
    o.jobs = {{"worker", 1}, {"ps", 1}};
  });
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(results[i].ok()) << results[i].status();
    EXPECT_TRUE(results[i]->succeeded) << Messages(i);
  }
}

TEST_F(ClusterLauncherTest, StopEndsTheJobEverywhereWithoutARestart) {
  script_ = "echo up >> $TEST_DIR/record; exec sleep 60";
  mkdir(dir_.c_str(), 0755);
  std::thread stopper([this] {
    // Once both programs run, interrupt launcher 1.
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    while (Record().size() < 2 && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(20));
    }
    absl::MutexLock lock(&mu_);
    if (launchers_.count(1)) launchers_[1]->Stop();
  });
  auto results = RunAll(2, [](ClusterLaunchOptions& o) { o.max_restarts = 3; });
  stopper.join();
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(results[i].ok()) << results[i].status();
    EXPECT_EQ(results[i]->exit_code, 130) << Messages(i);
    EXPECT_EQ(results[i]->attempts, 1);
  }
  EXPECT_THAT(results[0]->failure_summary, HasSubstr("was interrupted"));
}

// Launcher 1 is interrupted before the job starts (engine task 2 never
// comes): both launchers end at once with 130, nothing restarts.
TEST_F(ClusterLauncherTest, StopBeforeTheStartEndsEveryLauncher) {
  script_ = "exec sleep 60";
  std::thread stopper([this] {
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    while (absl::Now() < deadline) {
      {
        absl::MutexLock lock(&mu_);
        if (launchers_.count(1)) {
          launchers_[1]->Stop();
          return;
        }
      }
      absl::SleepFor(absl::Milliseconds(5));
    }
  });
  const absl::Time start = absl::Now();
  auto results = RunAll(2, [](ClusterLaunchOptions& o) {
    o.engine.count = 3;
    o.engine.hosts.assign(3, "127.0.0.1");
    o.max_restarts = 3;
  });
  stopper.join();
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(results[i].ok()) << i << ": " << results[i].status();
    EXPECT_EQ(results[i]->exit_code, 130) << Messages(i);
    EXPECT_THAT(results[i]->failure_summary,
                HasSubstr("interrupted before it started"));
  }
  EXPECT_LT(absl::Now() - start, absl::Seconds(20));  // not the 30 s timeout
}

TEST_F(ClusterLauncherTest, UnreachableTask0NamesTheAddressAndTheEngine) {
  ClusterLaunchOptions o = Options(1, 2);
  o.rendezvous_timeout = absl::Seconds(1);
  ClusterLauncher launcher(Env::Default(), o);
  auto result = launcher.Run();
  EXPECT_EQ(result.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(result.status().message(), HasSubstr(rendezvous_));
  EXPECT_THAT(result.status().message(), HasSubstr("the test's engine"));
}

TEST_F(ClusterLauncherTest, ALauncherWithAnotherTokenIsRefused) {
  script_ = "true";
  auto results = RunAll(2, [](ClusterLaunchOptions& o) {
    o.rendezvous_timeout = absl::Seconds(3);
    if (o.engine.index == 1) o.job_token = "wrong-token";
  });
  ASSERT_FALSE(results[1].ok());
  EXPECT_EQ(results[1].status().code(), absl::StatusCode::kUnauthenticated)
      << results[1].status();
  // Task 0 waited for it at the start and says who is missing.
  ASSERT_FALSE(results[0].ok());
  EXPECT_THAT(results[0].status().message(), HasSubstr("launcher:1"));
}

TEST_F(ClusterLauncherTest, NoTokenIsAnError) {
  ClusterLaunchOptions o = Options(0, 1);
  o.job_token.clear();
  auto result = ClusterLauncher(Env::Default(), o).Run();
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(result.status().message(), HasSubstr("COHORT_JOB_TOKEN"));
}

}  // namespace
}  // namespace cohort::launch
