// `cohort launch --engine tf_config --rendezvous etcd://...` as separate
// processes against a real 3-member etcd cluster (LocalEtcd): the job runs
// with its control plane in etcd, survives the etcd leader's death, fails
// clearly when etcd loses its majority, treats task 0's launcher as any
// other, keeps two jobs under two prefixes apart, and refuses bad input.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <system_error>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "cohort/coord/etcd_testing.h"
#include "cohort/rpc/socket.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/launch/command_run.h"

namespace cohort::launch {
namespace {

using coord::LocalEtcd;
using launch_testing::BinDir;
using launch_testing::CommandRun;
using launch_testing::FinishCommand;
using launch_testing::StartCommand;
using ::testing::HasSubstr;
using ::testing::Not;

class EtcdLaunchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    COHORT_START_ETCD_OR_SKIP(etcd_);
    dir_ = launch_testing::FreshTestDir("etcd_launch_test");
    ASSERT_FALSE(dir_.empty());
  }

  // Starts `n` launchers of one job under etcd prefix `prefix`, each running
  // `script` ($C: cohort, $D: a directory every task shares, $A: the
  // programs' coordination address).
  std::vector<std::unique_ptr<Subprocess>> StartJob(
      int n, const std::string& prefix, const std::string& script,
      const std::vector<std::string>& flags = {},
      const std::string& token = "etcd-launch-token-0123") {
    hosts_.clear();
    for (int i = 0; i < n; ++i) {
      absl::StatusOr<int> port = rpc::PickFreePort("127.0.0.1");
      EXPECT_TRUE(port.ok());
      hosts_.push_back(
          absl::StrCat("\"127.0.0.1:", port.ok() ? *port : 0, "\""));
    }
    std::vector<std::unique_ptr<Subprocess>> launchers;
    for (int i = 0; i < n; ++i) {
      launchers.push_back(StartLauncher(i, prefix, script, flags, token));
    }
    return launchers;
  }

  // Starts the launcher of task `i` of the job StartJob started last (a
  // replacement for a lost one: the same arguments).
  std::unique_ptr<Subprocess> StartLauncher(
      int i, const std::string& prefix, const std::string& script,
      const std::vector<std::string>& flags = {},
      const std::string& token = "etcd-launch-token-0123") {
    std::vector<std::string> argv = {
        BinDir() + "/cohort", "launch",
        "--engine",           "tf_config",
        "--rendezvous",       etcd_.Url(prefix),
        "--log-dir",          absl::StrCat(dir_, "/logs", prefix, "/", i),
        "--stop-grace",       "1"};
    // 30 s unless `flags` give one.
    if (std::find(flags.begin(), flags.end(), "--rendezvous-timeout") ==
        flags.end()) {
      argv.insert(argv.end(), {"--rendezvous-timeout", "30"});
    }
    argv.insert(argv.end(), flags.begin(), flags.end());
    for (const std::string& a :
         {std::string("--"), std::string("/bin/sh"), std::string("-c"),
          "C=" + BinDir() + "/cohort; D=" + dir_ +
              "; A=$COHORT_COORDINATION_SERVICE_ADDRESS; " + script}) {
      argv.push_back(a);
    }
    std::unique_ptr<Subprocess> launcher = StartCommand(
        argv,
        {absl::StrCat(R"(TF_CONFIG={"cluster": {"worker": [)",
                      absl::StrJoin(hosts_, ","),
                      R"(]}, "task": {"type": "worker", "index": )", i, "}}"),
         "COHORT_JOB_TOKEN=" + token});
    EXPECT_NE(launcher, nullptr);
    return launcher;
  }

  // Waits until every program of an n-task job wrote $D/ready.<index>.
  void AwaitReady(int n, absl::Time start) {
    for (int i = 0; i < n; ++i) {
      const std::string f = absl::StrCat(dir_, "/ready.", i);
      while (access(f.c_str(), F_OK) != 0) {
        ASSERT_LT(absl::Now() - start, absl::Seconds(60))
            << "program " << i << " never ran";
        absl::SleepFor(absl::Milliseconds(20));
      }
    }
  }
  void Release() { std::ofstream(dir_ + "/go") << "go"; }

  // A program that says it is ready, waits for Release(), then exchanges a
  // key with the next task through the programs' store in etcd.
  static std::string Gated(int n) {
    return absl::StrCat(
        "i=${COHORT_TASK_NAME#*:}; touch $D/ready.$i; "
        "while [ ! -f $D/go ]; do sleep 0.05; done; "
        "$C kv set --coordinator $A k/$i v$i && "
        "$C kv get --coordinator $A --wait 30s k/$(( (i + 1) % ",
        n, " ))");
  }

  // etcd holds no key under `prefix` ("": anywhere).
  void ExpectNoKeysUnder(const std::string& prefix) {
    absl::StatusOr<std::string> left =
        etcd_.Ctl({"get", prefix, "--prefix", "--keys-only"});
    ASSERT_TRUE(left.ok()) << left.status();
    EXPECT_EQ(*left, "") << "under \"" << prefix << "\"";
  }
  // Waits until `file` (under the shared directory) exists.
  void AwaitFile(const std::string& file, absl::Time start) {
    const std::string path = absl::StrCat(dir_, "/", file);
    while (access(path.c_str(), F_OK) != 0) {
      ASSERT_LT(absl::Now() - start, absl::Seconds(60))
          << path << " never came";
      absl::SleepFor(absl::Milliseconds(20));
    }
  }
  LocalEtcd etcd_;
  std::string dir_;
  std::vector<std::string> hosts_;  // of the job StartJob started last
};

TEST_F(EtcdLaunchTest, AJobRunsWithItsControlPlaneInEtcd) {
  const absl::Time start = absl::Now();
  std::vector<std::unique_ptr<Subprocess>> launchers = StartJob(
      3, "/job-a",
      "i=${COHORT_TASK_NAME#*:}; $C kv set --coordinator $A k/$i v$i && "
      "$C kv get --coordinator $A --wait 30s k/$(( (i + 1) % 3 )) && "
      "echo \"address $A\"");
  for (int i = 0; i < 3; ++i) {
    CommandRun r = FinishCommand(*launchers[i], start);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_THAT(r.output, HasSubstr(absl::StrCat(
                              "joined the job (control plane: etcd at ",
                              etcd_.Url("/job-a"), ") as worker:", i)));
    EXPECT_THAT(r.output,
                HasSubstr(absl::StrCat("[worker:", i, "] v", (i + 1) % 3)));
    EXPECT_THAT(r.output, HasSubstr(absl::StrCat(
                              "address ", etcd_.Url("/job-a"), "/programs/0")));
  }
  // The last launcher out removed the job's keys; nothing was written
  // outside the job's prefix.
  ExpectNoKeysUnder("");
}

// `cohort launch -n 3 --rendezvous etcd://...`: the three launchers run as
// threads of one process and meet in etcd; the programs exchange keys
// through it, roles come from --jobs, and the keys are removed at the end.
TEST_F(EtcdLaunchTest, NTasksOnOneMachineRunWithTheControlPlaneInEtcd) {
  const absl::Time start = absl::Now();
  std::unique_ptr<Subprocess> job =
      StartCommand({BinDir() + "/cohort", "launch", "-n", "3", "--jobs",
                    "chief=1,worker=2", "--rendezvous", etcd_.Url("/here"),
                    "--log-dir", dir_ + "/logs-here", "--", "/bin/sh", "-c",
                    "C=" + BinDir() +
                        "/cohort; A=$COHORT_COORDINATION_SERVICE_ADDRESS; "
                        "$C kv set --coordinator $A k/$COHORT_TASK_NAME x && "
                        "$C kv get --coordinator $A --wait 30s k/chief:0 && "
                        "echo \"address $A\""},
                   {});
  ASSERT_NE(job, nullptr);
  CommandRun r = FinishCommand(*job, start);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  for (const std::string& task : {"chief:0", "worker:0", "worker:1"}) {
    EXPECT_THAT(r.output, HasSubstr(absl::StrCat("[", task, "] x")));
    EXPECT_THAT(r.output,
                HasSubstr(absl::StrCat("[", task, "] address ",
                                       etcd_.Url("/here"), "/programs/0")));
  }
  EXPECT_THAT(r.output,
              HasSubstr(absl::StrCat(
                  "[cohort local task 2] joined the job (control plane: etcd "
                  "at ",
                  etcd_.Url("/here"), ") as worker:1 (-n 3 on this machine)")));
  EXPECT_THAT(r.output, HasSubstr("[cohort local task 0] job succeeded: all 3 "
                                  "task(s) of attempt 0 finished"));
  ExpectNoKeysUnder("");

  // A failing task's code is the job's; task 0's launcher names it, the
  // other task was stopped.
  std::unique_ptr<Subprocess> failing = StartCommand(
      {BinDir() + "/cohort", "launch", "-n", "2", "--rendezvous",
       etcd_.Url("/here-fails"), "--stop-grace", "1", "--", "/bin/sh", "-c",
       "[ $COHORT_TASK_NAME = worker:1 ] && exit 3; exec sleep 60"},
      {});
  ASSERT_NE(failing, nullptr);
  r = FinishCommand(*failing, start);
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_THAT(r.output, HasSubstr("[cohort local task 0] attempt 0 failed: "
                                  "task worker:1 (pid "));
  EXPECT_THAT(r.output, HasSubstr("exited with code 3"));
  EXPECT_THAT(r.output, HasSubstr("[cohort local task 0] stopped 1 other "
                                  "task(s) of attempt 0"));
}

TEST_F(EtcdLaunchTest, TheEtcdLeaderKilledMidJobCostsNothing) {
  const absl::Time start = absl::Now();
  std::vector<std::unique_ptr<Subprocess>> launchers =
      StartJob(3, "/job", Gated(3),
               {"--heartbeat-timeout", "2", "--partition-grace", "10"});
  AwaitReady(3, start);
  etcd_.Kill(etcd_.Leader());
  Release();
  for (int i = 0; i < 3; ++i) {
    CommandRun r = FinishCommand(*launchers[i], start);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_THAT(r.output,
                HasSubstr(absl::StrCat("[worker:", i, "] v", (i + 1) % 3)));
    EXPECT_THAT(r.output, Not(HasSubstr("attempt 1")));  // no restart
  }
}

TEST_F(EtcdLaunchTest, EtcdWithoutAMajorityFailsTheLaunchersNamingIt) {
  const absl::Time start = absl::Now();
  std::vector<std::unique_ptr<Subprocess>> launchers =
      StartJob(2, "/job", Gated(2),
               {"--heartbeat-timeout", "2", "--partition-grace", "2"});
  AwaitReady(2, start);
  etcd_.KillMajority();
  for (int i = 0; i < 2; ++i) {
    CommandRun r = FinishCommand(*launchers[i], start);
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_THAT(r.output,
                HasSubstr(absl::StrCat("the launchers lost each other (control "
                                       "plane at ",
                                       etcd_.Url("/job"), ", in etcd): ")));
    EXPECT_THAT(r.output, HasSubstr("stopped worker:"));
  }
  Release();
}

TEST_F(EtcdLaunchTest, Task0sLauncherIsAnyLauncher) {
  const absl::Time start = absl::Now();
  std::vector<std::unique_ptr<Subprocess>> launchers = StartJob(
      3, "/job", "touch $D/ready.${COHORT_TASK_NAME#*:}; exec sleep 60",
      {"--heartbeat-timeout", "2", "--partition-grace", "2"});
  AwaitReady(3, start);
  kill(launchers[0]->pid(), SIGKILL);
  // Its loss is a task's loss like any other (gang policy: the job fails,
  // naming it), found in etcd by the others; their control plane lives on.
  for (int i = 1; i < 3; ++i) {
    CommandRun r = FinishCommand(*launchers[i], start);
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_THAT(r.output,
                HasSubstr("task launcher:0 was lost: no heartbeat reached "
                          "etcd for 4s and its lease expired"));
    EXPECT_THAT(r.output, HasSubstr("(launcher:0 runs on 127.0.0.1)"));
    EXPECT_THAT(r.output, HasSubstr(absl::StrCat("stopped worker:", i)));
  }
  FinishCommand(*launchers[0], start);
}

// With etcd and --elastic, task 0's launcher is not special either: killed
// (SIGKILL, its program dying with it) once the gang has trained 1000 steps,
// it is lost when its lease expires; the other launchers drop its task from
// the membership, as no launcher is left to restart it, their programs
// re-form as generation 1 and finish, launcher:1 (now the lowest) prints the
// job's success, and the last one out removes every key, counting
// launcher:0 as ended.
TEST_F(EtcdLaunchTest, AnElasticJobGoesOnWhenTask0sLauncherIsKilled) {
#ifdef COHORT_TSAN_BUILD
  fprintf(stderr,
          "SKIPPED: thousands of steps of three processes under "
          "ThreadSanitizer take minutes; plain and ASan builds only\n");
  GTEST_SKIP() << "elastic job under ThreadSanitizer";
#endif
  const absl::Time start = absl::Now();
  std::vector<std::unique_ptr<Subprocess>> launchers = StartJob(
      3, "/elastic",
      absl::StrCat("exec ", BinDir(),
                   "/train_data_parallel --steps 20000 --log-every 100"),
      {"--elastic", "2:3", "--heartbeat-timeout", "2", "--partition-grace",
       "2"});
  const std::string log0 = dir_ + "/logs/elastic/0/worker-0.attempt-0.log";
  while (true) {
    std::ifstream in(log0);
    const std::string text((std::istreambuf_iterator<char>(in)),
                           std::istreambuf_iterator<char>());
    if (text.find("step 1000/") != std::string::npos) break;
    ASSERT_EQ(text.find("final:"), std::string::npos)
        << "worker:0 finished before it was killed:\n"
        << text;
    ASSERT_LT(absl::Now() - start, absl::Seconds(120))
        << "worker:0 never reached step 1000:\n"
        << text;
    absl::SleepFor(absl::Milliseconds(10));
  }
  kill(launchers[0]->pid(), SIGKILL);
  FinishCommand(*launchers[0], start);
  for (int i = 1; i < 3; ++i) {
    CommandRun r = FinishCommand(*launchers[i], start);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_THAT(r.output,
                HasSubstr("worker:0 (on 127.0.0.1) was lost with its "
                          "launcher: launcher:0's lease in etcd expired (no "
                          "heartbeat for 4s)"));
    EXPECT_THAT(r.output,
                HasSubstr("elastic: removed from the membership; no launcher "
                          "is left to restart it, so it leaves the job; 2 "
                          "task(s) train on (worker:1, worker:2)"));
    EXPECT_THAT(r.output, Not(HasSubstr("restarted alone")));
    const std::string succeeded =
        "job succeeded: attempt 0 finished; the elastic job ended with "
        "generation 1: worker:1, worker:2";
    if (i == 1) {
      EXPECT_THAT(r.output,
                  HasSubstr("[worker:1] elastic generation 1: worker:1, "
                            "worker:2: 2 task(s) go on from step"));
      EXPECT_THAT(r.output,
                  HasSubstr("[worker:1] parameters identical across 2 tasks"));
      EXPECT_THAT(r.output, HasSubstr(succeeded));
    } else {
      EXPECT_THAT(r.output, Not(HasSubstr("job succeeded")));
    }
  }
  ExpectNoKeysUnder("");
}

// A program that says it is ready ($D/ready.<index>.<restart>), waits for
// Release(), then exchanges a key with the next task.
std::string GatedByRestart(int n) {
  return absl::StrCat(
      "i=${COHORT_TASK_NAME#*:}; touch $D/ready.$i.$COHORT_TASK_RESTART; "
      "while [ ! -f $D/go ]; do sleep 0.05; done; "
      "$C kv set --coordinator $A k/$i v$i && "
      "$C kv get --coordinator $A --wait 30s k/$(( (i + 1) % ",
      n, " ))");
}

// With etcd and --restart task, task 0's launcher SIGKILLed (its program
// dying with it) is a task lost like any other: the others run on and wait
// for a launcher to replace it. Once the loss is recorded, a launcher
// started again for task 0 (as Kubernetes restarts a pod) rejoins the
// running attempt and starts worker:0 as restart 1; the job then finishes
// in its first attempt, and the last launcher out removes every key.
TEST_F(EtcdLaunchTest, UnderTaskRestartsAReplacedTask0LauncherRejoins) {
  const absl::Time start = absl::Now();
  const std::vector<std::string> flags = {
      "--restart",           "task", "--max-restarts",    "1",
      "--heartbeat-timeout", "2",    "--partition-grace", "2"};
  std::vector<std::unique_ptr<Subprocess>> launchers =
      StartJob(3, "/rejoin", GatedByRestart(3), flags);
  for (int i = 0; i < 3; ++i) AwaitFile(absl::StrCat("ready.", i, ".0"), start);
  kill(launchers[0]->pid(), SIGKILL);
  FinishCommand(*launchers[0], start);
  // Started at once, as an engine restarts a pod: it waits until the others
  // have recorded launcher:0 lost (its lease lives 4 s), then rejoins.
  std::unique_ptr<Subprocess> replacement =
      StartLauncher(0, "/rejoin", GatedByRestart(3), flags);
  AwaitFile("ready.0.1", start);
  Release();
  CommandRun r0 = FinishCommand(*replacement, start);
  EXPECT_EQ(r0.exit_code, 0) << r0.output;
  EXPECT_THAT(r0.output,
              HasSubstr("rejoined attempt 0 of the running job in place of a "
                        "lost launcher:0: worker:0 starts as a restarted task "
                        "(restart 1 of 1"));
  EXPECT_THAT(r0.output,
              HasSubstr("replacing the lost launcher:0: waiting 3s so that, "
                        "were launcher:0 only cut off, its task has stopped"));
  EXPECT_THAT(r0.output, HasSubstr("[worker:0] v1"));
  // One launcher, the lowest not lost (the replacement), says the job
  // succeeded.
  int said = absl::StrContains(r0.output, "job succeeded") ? 1 : 0;
  EXPECT_EQ(said, 1) << r0.output;
  for (int i = 1; i < 3; ++i) {
    CommandRun r = FinishCommand(*launchers[i], start);
    if (absl::StrContains(r.output, "job succeeded")) ++said;
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_THAT(r.output,
                HasSubstr("worker:0 (on 127.0.0.1) was lost with its "
                          "launcher: launcher:0's lease in etcd expired (no "
                          "heartbeat for 4s)"));
    EXPECT_THAT(r.output, HasSubstr("the other tasks run on while a launcher "
                                    "started again for it (by the engine, or "
                                    "by hand) rejoins the job, within 30s"));
    EXPECT_THAT(r.output, HasSubstr("worker:0: a launcher rejoined the job for "
                                    "it and restarts it"));
    EXPECT_THAT(r.output,
                HasSubstr(absl::StrCat("[worker:", i, "] v", (i + 1) % 3)));
    EXPECT_THAT(r.output, Not(HasSubstr("attempt 1")));
  }
  EXPECT_EQ(said, 1);
  ExpectNoKeysUnder("");
}

// ... and when no launcher comes back for it within the rendezvous timeout,
// the others fail, naming the task, its launcher and the wait.
TEST_F(EtcdLaunchTest, UnderTaskRestartsALostLauncherNotReplacedFailsTheJob) {
  const absl::Time start = absl::Now();
  std::vector<std::unique_ptr<Subprocess>> launchers = StartJob(
      3, "/gone", GatedByRestart(3),
      {"--restart", "task", "--max-restarts", "1", "--heartbeat-timeout", "2",
       "--partition-grace", "2", "--rendezvous-timeout", "5"});
  for (int i = 0; i < 3; ++i) AwaitFile(absl::StrCat("ready.", i, ".0"), start);
  kill(launchers[0]->pid(), SIGKILL);
  FinishCommand(*launchers[0], start);
  std::vector<CommandRun> runs;
  for (int i = 1; i < 3; ++i) {
    runs.push_back(FinishCommand(*launchers[i], start));
    const CommandRun& r = runs.back();
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_THAT(r.output,
                HasSubstr("launcher:0's lease in etcd expired (no heartbeat "
                          "for 4s) or its key was deleted; check that host and "
                          "its launcher process; no launcher rejoined the job "
                          "for it within 5s"));
  }
  // launcher:1, the lowest live one, prints the summary; launcher:2 one line.
  EXPECT_THAT(runs[0].output,
              HasSubstr("stopped 2 other task(s) of attempt 0"));
  EXPECT_THAT(
      runs[0].output,
      HasSubstr("no output lines of it here; see its log on 127.0.0.1"));
  EXPECT_THAT(runs[1].output,
              HasSubstr("the lowest launcher not lost prints the summary"));
  EXPECT_THAT(runs[1].output, HasSubstr("stopped worker:2"));
  Release();
}

// A second launcher for a task whose launcher lives, in a job that takes
// replacements (--restart task, restarts left), waits for that launcher to
// be recorded lost and gives up at its rendezvous timeout, naming it; one
// in a job without restarts, or under the gang policy, is refused at once.
// The jobs are unharmed.
TEST_F(EtcdLaunchTest, ASecondLauncherForALiveTaskIsRefused) {
  const absl::Time start = absl::Now();
  const std::vector<std::string> restarts = {"--restart", "task",
                                             "--max-restarts", "1"};
  std::vector<std::unique_ptr<Subprocess>> launchers =
      StartJob(2, "/dup", GatedByRestart(2), restarts);
  for (int i = 0; i < 2; ++i) AwaitFile(absl::StrCat("ready.", i, ".0"), start);
  std::vector<std::string> impatient = restarts;
  impatient.insert(impatient.end(), {"--rendezvous-timeout", "2"});
  CommandRun duplicate = FinishCommand(
      *StartLauncher(1, "/dup", GatedByRestart(2), impatient), start);
  EXPECT_EQ(duplicate.exit_code, 1) << duplicate.output;
  EXPECT_THAT(
      duplicate.output,
      HasSubstr("launcher:1 of the job under etcd prefix " + etcd_.Url("/dup") +
                " is still registered, or not yet recorded lost by the "
                "others: a launcher replacing it waits for that; check "
                "that engine task 1 was not started twice"));
  Release();
  for (auto& l : launchers) {
    CommandRun r = FinishCommand(*l, start);
    EXPECT_EQ(r.exit_code, 0) << r.output;
  }

  const std::string held =
      "touch $D/held.${COHORT_TASK_NAME#*:}; exec sleep 60";
  for (const auto& [prefix, flags, refusal] : std::vector<
           std::tuple<std::string, std::vector<std::string>, std::string>>{
           {"/norestarts",
            {"--restart", "task", "--max-restarts", "0"},
            "is running, and launcher:0 cannot rejoin it: it runs with "
            "--max-restarts 0, so a lost task is not replaced"},
           {"/gang",
            {},
            "is going on, or stopped less than 1m10s ago (launcher:0 is "
            "registered), and launcher:0 cannot join it: only --restart task "
            "takes a launcher that replaces a lost one; check that engine "
            "task 0 was not started twice"}}) {
    std::filesystem::remove(dir_ + "/held.0");
    std::filesystem::remove(dir_ + "/held.1");
    std::vector<std::unique_ptr<Subprocess>> job =
        StartJob(2, prefix, held, flags);
    for (int i = 0; i < 2; ++i) AwaitFile(absl::StrCat("held.", i), start);
    CommandRun second =
        FinishCommand(*StartLauncher(0, prefix, held, flags), start);
    EXPECT_EQ(second.exit_code, 1) << prefix << second.output;
    EXPECT_THAT(second.output, HasSubstr(refusal)) << prefix;
    for (auto& l : job) kill(l->pid(), SIGTERM);
    for (auto& l : job) {
      CommandRun r = FinishCommand(*l, start);
      EXPECT_EQ(r.exit_code, 130) << prefix << r.output;
    }
  }
}

TEST_F(EtcdLaunchTest, TwoJobsUnderTwoPrefixesDoNotMeet) {
  const absl::Time start = absl::Now();
  const std::string script =
      "i=${COHORT_TASK_NAME#*:}; $C kv set --coordinator $A shared/$i "
      "\"$JOB_NAME-$i\" && $C kv get --coordinator $A --wait 30s "
      "shared/$(( (i + 1) % 2 ))";
  std::vector<std::unique_ptr<Subprocess>> a =
      StartJob(2, "/a", "JOB_NAME=a; " + script, {}, "etcd-token-a-0123");
  std::vector<std::unique_ptr<Subprocess>> b =
      StartJob(2, "/b", "JOB_NAME=b; " + script, {}, "etcd-token-b-0123");
  for (int i = 0; i < 2; ++i) {
    CommandRun ra = FinishCommand(*a[i], start);
    CommandRun rb = FinishCommand(*b[i], start);
    EXPECT_EQ(ra.exit_code, 0) << ra.output;
    EXPECT_EQ(rb.exit_code, 0) << rb.output;
    EXPECT_THAT(ra.output, HasSubstr(absl::StrCat("] a-", (i + 1) % 2)));
    EXPECT_THAT(rb.output, HasSubstr(absl::StrCat("] b-", (i + 1) % 2)));
    EXPECT_THAT(ra.output, Not(HasSubstr("] b-")));
    EXPECT_THAT(rb.output, Not(HasSubstr("] a-")));
  }
}

// A job under /a ends while one under /a/b runs: the first job's clean-up
// removes its own keys only.
TEST_F(EtcdLaunchTest, NestedPrefixesAreSeparateJobs) {
  const absl::Time start = absl::Now();
  std::vector<std::unique_ptr<Subprocess>> inner =
      StartJob(2, "/a/b", Gated(2), {}, "etcd-token-inner-0123");
  AwaitReady(2, start);
  std::vector<std::unique_ptr<Subprocess>> outer =
      StartJob(1, "/a", "exit 0", {}, "etcd-token-outer-0123");
  CommandRun o = FinishCommand(*outer[0], start);
  EXPECT_EQ(o.exit_code, 0) << o.output;
  absl::StatusOr<std::string> left =
      etcd_.Ctl({"get", "/a/launchers/", "--prefix", "--keys-only"});
  ASSERT_TRUE(left.ok());
  EXPECT_EQ(*left, "");  // /a's own keys are gone
  Release();
  for (int i = 0; i < 2; ++i) {
    CommandRun r = FinishCommand(*inner[i], start);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_THAT(r.output,
                HasSubstr(absl::StrCat("[worker:", i, "] v", (i + 1) % 2)));
  }
}

// Every launcher of a run SIGKILLed: its keys stay. A new run of the same
// job under that prefix is refused (it would read the old addresses and
// verdicts), saying how to clear them.
// Each outcome of a rerun over a run whose launchers were SIGKILLed: while
// their leases live (70 s by default) the run may be going on, and the
// rerun says so; once they have expired (2 s here; waited for in etcd) the
// keys are a leftover. Both name the etcdctl line that removes them.
TEST_F(EtcdLaunchTest, ARunThatWasKilledLeavesKeysTheNextRunRefuses) {
  const absl::Time start = absl::Now();
  for (const std::string prefix : {"/live", "/s"}) {
    const std::vector<std::string> flags =
        prefix == "/s" ? std::vector<std::string>{"--heartbeat-timeout", "1",
                                                  "--partition-grace", "1"}
                       : std::vector<std::string>{};
    std::filesystem::remove(dir_ + "/go");
    for (int i = 0; i < 2; ++i) {
      std::filesystem::remove(absl::StrCat(dir_, "/ready.", i));
    }
    std::vector<std::unique_ptr<Subprocess>> first =
        StartJob(2, prefix, Gated(2), flags);
    AwaitReady(2, start);
    for (auto& l : first) kill(l->pid(), SIGKILL);
    for (auto& l : first) FinishCommand(*l, start);
    Release();  // the orphaned programs end
    if (prefix == "/s") {
      // Every lease of the killed run has expired.
      while (true) {
        absl::StatusOr<std::string> registered = etcd_.Ctl(
            {"get", "/s/launchers/status/tasks/", "--prefix", "--keys-only"});
        ASSERT_TRUE(registered.ok()) << registered.status();
        if (registered->empty()) break;
        ASSERT_LT(absl::Now() - start, absl::Seconds(60)) << *registered;
        absl::SleepFor(absl::Milliseconds(100));
      }
    }
    std::vector<std::unique_ptr<Subprocess>> again =
        StartJob(2, prefix, "exit 0", flags);
    for (int i = 0; i < 2; ++i) {
      CommandRun r = FinishCommand(*again[i], start);
      EXPECT_EQ(r.exit_code, 1) << r.output;
      EXPECT_THAT(
          r.output,
          HasSubstr(
              prefix == "/s"
                  ? absl::StrCat("etcd prefix ", etcd_.Url("/s"),
                                 " holds the keys of a run of this job that "
                                 "has stopped without removing them; remove "
                                 "them (etcdctl del --prefix /s/)")
                  : absl::StrCat("a run of this job under etcd prefix ",
                                 etcd_.Url("/live"),
                                 " is going on, or stopped less than 1m10s "
                                 "ago (launcher:")));
      if (prefix == "/live") {
        EXPECT_THAT(r.output, HasSubstr("once that run has stopped, remove its "
                                        "keys (etcdctl del --prefix /live/)"));
      }
    }
  }
}

TEST_F(EtcdLaunchTest, BadInputIsRefusedClearly) {
  const absl::Time start = absl::Now();
  // Another job's record under the prefix: refused, nothing written.
  std::vector<std::unique_ptr<Subprocess>> first =
      StartJob(2, "/taken", "touch $D/ready.${COHORT_TASK_NAME#*:}; sleep 60",
               {}, "etcd-token-first-0123");
  AwaitReady(2, start);
  absl::StatusOr<std::string> before =
      etcd_.Ctl({"get", "", "--prefix", "--keys-only"});
  ASSERT_TRUE(before.ok());
  std::vector<std::unique_ptr<Subprocess>> second =
      StartJob(2, "/taken", "exit 0", {}, "etcd-token-second-0123");
  for (int i = 0; i < 2; ++i) {
    CommandRun r = FinishCommand(*second[i], start);
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_THAT(r.output,
                HasSubstr(absl::StrCat("etcd prefix ", etcd_.Url("/taken"),
                                       "/launchers/ holds another job's "
                                       "control plane")));
  }
  absl::StatusOr<std::string> after =
      etcd_.Ctl({"get", "", "--prefix", "--keys-only"});
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(*after, *before);
  for (auto& l : first) kill(l->pid(), SIGTERM);
  for (auto& l : first) FinishCommand(*l, start);

  // An etcd nobody serves: named, within the rendezvous timeout.
  absl::StatusOr<int> port = rpc::PickFreePort("127.0.0.1");
  ASSERT_TRUE(port.ok());
  const std::string nowhere = absl::StrCat("etcd://127.0.0.1:", *port, "/j");
  CommandRun r = launch_testing::RunCommand(
      {BinDir() + "/cohort", "launch", "--engine", "tf_config", "--rendezvous",
       nowhere, "--rendezvous-timeout", "3", "--", "true"},
      {R"(TF_CONFIG={"cluster": {"worker": ["127.0.0.1:1"]}, "task": {"type": "worker", "index": 0}})",
       "COHORT_JOB_TOKEN=etcd-token-none-0123"});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr(absl::StrCat("etcd at 127.0.0.1:", *port,
                                               " did not answer")));

  // A malformed URL and a credentials file that is not there.
  r = launch_testing::RunCommand(
      {BinDir() + "/cohort", "launch", "--engine", "tf_config", "--rendezvous",
       "etcd://127.0.0.1/j", "--", "true"},
      {R"(TF_CONFIG={"cluster": {"worker": ["127.0.0.1:1"]}, "task": {"type": "worker", "index": 0}})",
       "COHORT_JOB_TOKEN=etcd-token-none-0123"});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr("etcd endpoint '127.0.0.1'"));
  r = launch_testing::RunCommand(
      {BinDir() + "/cohort", "launch", "--engine", "tf_config", "--rendezvous",
       etcd_.Url("/j"), "--etcd-ca", dir_ + "/ca.pem", "--etcd-credentials",
       dir_ + "/missing", "--", "true"},
      {R"(TF_CONFIG={"cluster": {"worker": ["127.0.0.1:1"]}, "task": {"type": "worker", "index": 0}})",
       "COHORT_JOB_TOKEN=etcd-token-none-0123"});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr("cannot read the etcd credentials file"));
  // A password with no TLS to carry it: refused before anything is sent.
  r = launch_testing::RunCommand(
      {BinDir() + "/cohort", "launch", "--engine", "tf_config", "--rendezvous",
       etcd_.Url("/j"), "--etcd-credentials", dir_ + "/missing", "--", "true"},
      {R"(TF_CONFIG={"cluster": {"worker": ["127.0.0.1:1"]}, "task": {"type": "worker", "index": 0}})",
       "COHORT_JOB_TOKEN=etcd-token-none-0123"});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr("--etcd-credentials without --etcd-ca"));
  // On one machine (no --engine) --rendezvous is etcd's, with -n N and
  // --jobs for roles; --jobs alone needs one or the other.
  const std::string here =
      "--rendezvous without --engine runs -n N tasks on this machine with the "
      "control plane in etcd";
  for (const std::vector<std::string>& flags :
       std::vector<std::vector<std::string>>{
           {"-n", "2", "--rendezvous", "127.0.0.1:2222"},
           {"--rendezvous", etcd_.Url("/j")},
           {"--workers", "2", "--rendezvous", etcd_.Url("/j")}}) {
    std::vector<std::string> argv = {BinDir() + "/cohort", "launch"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    argv.insert(argv.end(), {"--", "true"});
    r = launch_testing::RunCommand(argv, {});
    EXPECT_EQ(r.exit_code, 1) << absl::StrJoin(flags, " ") << r.output;
    EXPECT_THAT(r.output, HasSubstr(here)) << absl::StrJoin(flags, " ");
  }
  r = launch_testing::RunCommand({BinDir() + "/cohort", "launch", "-n", "2",
                                  "--jobs", "worker=2", "--", "true"},
                                 {});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr("--jobs needs --engine, or -n N with "
                                  "--rendezvous etcd://..."));
}

}  // namespace
}  // namespace cohort::launch
