// `cohort launch --engine slurm` under a real Slurm (scripts/slurm_local.sh
// starts one on this machine): `srun -n 4 -O cohort launch --engine slurm`,
// one launcher per Slurm task, for the gang barrier and allGather, a failing
// task stopping the others, a whole-gang retry, a task restarted alone
// (--restart task) and the parameter-server training job with --jobs.
// Without a running Slurm every test is skipped, with the reason printed.
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "cohort/rpc/socket.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/launch/command_run.h"

namespace cohort::launch {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

using launch_testing::BinDir;
using launch_testing::CommandRun;
using launch_testing::RunCommand;

// Why Slurm cannot run jobs here, or "" when it can.
std::string SlurmUnavailable() {
  RunProgramOptions options;
  options.deadline = absl::Seconds(30);
  if (RunProgram({"srun", "--version"}, options).status.code() ==
      absl::StatusCode::kNotFound) {
    return "srun is not installed (scripts/slurm_local.sh start installs and "
           "starts Slurm as root)";
  }
  ProgramRun status = RunProgram(
      {"bash", absl::StrCat(COHORT_SOURCE_DIR, "/scripts/slurm_local.sh"),
       "status"},
      options);
  if (!status.status.ok()) {
    fprintf(stderr, "%s\n", std::string(status.status.message()).c_str());
    return "Slurm is not running (scripts/slurm_local.sh status failed; "
           "scripts/slurm_local.sh start)";
  }
  return "";
}

class SlurmLaunchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::string why = SlurmUnavailable(); !why.empty()) {
      fprintf(stderr, "SKIPPED: real-Slurm test: %s\n", why.c_str());
      GTEST_SKIP() << why;
    }
    dir_ = absl::StrCat(::testing::TempDir(), "/slurm_launch_test.", getpid(),
                        ".", absl::ToUnixNanos(absl::Now()));
    ASSERT_TRUE(std::filesystem::create_directories(dir_)) << dir_;
    auto port = rpc::PickFreePort("0.0.0.0");
    ASSERT_TRUE(port.ok());
    port_ = *port;
  }

  // `srun -n N -O cohort launch --engine slurm FLAGS -- /bin/sh -c SCRIPT`,
  // bounded by `timeout`. In SCRIPT, $C is the cohort binary and $D a
  // scratch directory every task shares.
  CommandRun Srun(int n, const std::vector<std::string>& flags,
                  const std::string& script) {
    const std::string cohort = BinDir() + "/cohort";
    std::vector<std::string> argv = {"timeout",
                                     "240",
                                     "srun",
                                     "-n",
                                     std::to_string(n),
                                     "-O",
                                     "--job-name",
                                     "cohort-test",
                                     cohort,
                                     "launch",
                                     "--engine",
                                     "slurm",
                                     "--rendezvous",
                                     absl::StrCat(":", port_),
                                     "--no-progress",
                                     "--rendezvous-timeout",
                                     "60",
                                     "--log-dir",
                                     dir_ + "/logs"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    argv.push_back("--");
    argv.push_back("/bin/sh");
    argv.push_back("-c");
    argv.push_back("C=" + cohort + "; D=" + dir_ + "; " + script);
    return RunCommand(argv, {absl::StrCat("COHORT_JOB_TOKEN=slurm-test-",
                                          getpid(), "-", port_)});
  }

  // Output lines starting with `prefix`.
  static std::vector<std::string> Lines(const std::string& output,
                                        const std::string& prefix) {
    std::vector<std::string> out;
    for (absl::string_view line : absl::StrSplit(output, '\n')) {
      if (absl::StartsWith(line, prefix)) out.emplace_back(line);
    }
    return out;
  }

  std::string dir_;
  int port_ = 0;
};

TEST_F(SlurmLaunchTest, BarrierAndAllGatherAcrossFourTasks) {
  CommandRun r = Srun(4, {},
                      "$C task barrier && $C task allgather \"from "
                      "$COHORT_PARTITION_ID of $COHORT_NUM_TASKS\"");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string all =
      R"(["from 0 of 4","from 1 of 4","from 2 of 4","from 3 of 4"])";
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(Lines(r.output, absl::StrCat("[worker:", i, "] [")),
              std::vector<std::string>{absl::StrCat("[worker:", i, "] ", all)})
        << r.output;
  }
  EXPECT_THAT(r.output, HasSubstr("job succeeded: all 4 task(s)"));
}

TEST_F(SlurmLaunchTest, AFailingTaskStopsTheOthers) {
  // worker:2 fails once every task has started; the others would sleep a
  // minute.
  CommandRun r = Srun(4, {},
                      "touch $D/up.$COHORT_PARTITION_ID; "
                      "if [ $COHORT_PARTITION_ID = 2 ]; then "
                      "while [ $(ls $D | grep -c ^up) -lt 4 ]; do sleep 0.01; "
                      "done; echo giving up; exit 3; fi; exec sleep 60");
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_LT(r.elapsed, absl::Seconds(30)) << r.output;
  EXPECT_THAT(r.output, HasSubstr("[cohort slurm task 0] attempt 0 failed: "
                                  "task worker:2 (pid "));
  EXPECT_THAT(r.output, HasSubstr("exited with code 3"));
  EXPECT_THAT(r.output, HasSubstr("  | giving up"));
  EXPECT_THAT(r.output, HasSubstr("stopped 3 other task(s) of attempt 0"));
  EXPECT_EQ(Lines(r.output, "[cohort slurm task 1] attempt 0 failed").size(),
            1u)
      << r.output;
}

TEST_F(SlurmLaunchTest, TheWholeGangRetries) {
  CommandRun r =
      Srun(4, {"--max-restarts", "1"},
           "echo $COHORT_ATTEMPT_NUMBER >> $D/starts; "
           "if [ $COHORT_ATTEMPT_NUMBER = 0 ]; then "
           "if [ $COHORT_PARTITION_ID = 1 ]; then "
           "while [ $(grep -c 0 $D/starts) -lt 4 ]; do sleep 0.01; "
           "done; exit 4; fi; exec sleep 60; fi; "
           "$C task barrier && echo attempt $COHORT_ATTEMPT_NUMBER ok");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("restarting the whole gang as attempt 1"));
  for (int i = 0; i < 4; ++i) {
    EXPECT_THAT(r.output,
                HasSubstr(absl::StrCat("[worker:", i, "] attempt 1 ok")));
  }
}

// --restart task under Slurm: worker:1's process is killed (kill -9 of
// itself) once all four run; its launcher starts it again alone, and the
// three others, which wait for the restarted one, were never stopped.
TEST_F(SlurmLaunchTest, AKilledTaskIsRestartedAlone) {
  CommandRun r =
      Srun(4, {"--restart", "task", "--max-restarts", "1"},
           "echo $COHORT_TASK_NAME.$COHORT_TASK_RESTART >> $D/starts; "
           "if [ $COHORT_PARTITION_ID = 1 ]; then "
           "if [ $COHORT_TASK_RESTART = 0 ]; then "
           "while [ $(grep -c '[.]0$' $D/starts) -lt 4 ]; do sleep 0.01; done; "
           "kill -9 $$; fi; touch $D/back; exit 0; fi; "
           "while [ ! -e $D/back ]; do sleep 0.01; done; "
           "echo done in process $COHORT_TASK_RESTART");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("killed by signal 9 (SIGKILL)"));
  EXPECT_THAT(r.output, HasSubstr("restarted alone (restart 1 of 1)"));
  EXPECT_THAT(r.output, Not(HasSubstr("restarting the whole gang")));
  for (int i : {0, 2, 3}) {
    EXPECT_EQ(Lines(r.output, absl::StrCat("[worker:", i, "] done")),
              std::vector<std::string>{
                  absl::StrCat("[worker:", i, "] done in process 0")})
        << r.output;
  }
  std::ifstream starts_file(dir_ + "/starts");
  std::vector<std::string> starts;
  for (std::string line; std::getline(starts_file, line);) {
    starts.push_back(line);
  }
  std::sort(starts.begin(), starts.end());
  EXPECT_EQ(starts,
            (std::vector<std::string>{"worker:0.0", "worker:1.0", "worker:1.1",
                                      "worker:2.0", "worker:3.0"}));
}

// The script of an elastic job's task: train_data_parallel, except that
// worker:1's first process runs `action` (with its program's pid in $P)
// once worker:0 has logged step 1000.
std::string ElasticJobActingOnWorker1(const std::string& action) {
  const std::string train =
      absl::StrCat(BinDir(),
                   "/train_data_parallel --steps 8000 --log-every 100 "
                   "--target-loss 0.7");
  return absl::StrCat(
      "if [ $COHORT_TASK_NAME = worker:1 ] && [ $COHORT_TASK_RESTART = 0 "
      "]; then ",
      train,
      " & P=$!; i=0; while ! grep -q 'step 1000/' "
      "$D/logs/worker-0.attempt-0.log 2>/dev/null; do i=$((i+1)); "
      "[ $i -gt 6000 ] && exit 7; sleep 0.01; done; ",
      action, "; fi; exec ", train);
}

// An elastic job of 4 whose worker:1 was lost once: restarted alone by its
// launcher, generation 1 without it, generation 2 with it, identical
// parameters at the end, and task 0's success line names generation 2.
void ExpectWorker1LeftAndCameBack(const std::string& output) {
  EXPECT_THAT(output, HasSubstr("restarted alone (restart 1 of 1)"));
  EXPECT_THAT(output,
              HasSubstr("[worker:0] elastic generation 1: worker:0, worker:2, "
                        "worker:3: 3 task(s) go on from step"));
  EXPECT_THAT(output,
              HasSubstr("[worker:0] elastic generation 2: worker:0, worker:1, "
                        "worker:2, worker:3: 4 task(s) go on from step"));
  EXPECT_THAT(output,
              HasSubstr("[worker:0] parameters identical across 4 tasks"));
  EXPECT_THAT(output,
              HasSubstr("job succeeded: attempt 0 finished; the elastic job "
                        "ended with generation 2: worker:0, worker:1, "
                        "worker:2, worker:3"));
}

// --elastic under Slurm: worker:1's program is killed (kill -9) once
// worker:0 has logged step 1000; the three others go on as generation 1, its
// launcher restarts it alone and it joins as generation 2; the job ends
// with identical parameters on all four.
TEST_F(SlurmLaunchTest, AnElasticJobGoesOnWithoutAKilledTaskAndTakesItBack) {
#ifdef COHORT_TSAN_BUILD
  fprintf(stderr,
          "SKIPPED: thousands of steps of four processes under "
          "ThreadSanitizer take minutes; plain and ASan builds only\n");
  GTEST_SKIP() << "elastic job under ThreadSanitizer";
#endif
  CommandRun r = Srun(4, {"--elastic", "3:4", "--max-restarts", "1"},
                      ElasticJobActingOnWorker1("kill -9 $P; kill -9 $$"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ExpectWorker1LeftAndCameBack(r.output);
  EXPECT_THAT(r.output, Not(HasSubstr("restarting the whole gang")));
}

// --elastic under Slurm, a member alive but silent: worker:1's program is
// stopped (SIGSTOP) once worker:0 has logged step 1000. Task 0's launcher
// hears from the coordination service that it is lost and removes it from
// the membership instead of failing the job; worker:1's own launcher sees
// it removed while running, kills and restarts it, and it joins again.
TEST_F(SlurmLaunchTest, AnElasticJobRemovesASilentTaskAndTakesItBack) {
#ifdef COHORT_TSAN_BUILD
  fprintf(stderr,
          "SKIPPED: thousands of steps of four processes under "
          "ThreadSanitizer take minutes; plain and ASan builds only\n");
  GTEST_SKIP() << "elastic job under ThreadSanitizer";
#endif
  CommandRun r =
      Srun(4, {"--elastic", "3:4", "--max-restarts", "1"},
           ElasticJobActingOnWorker1("kill -STOP $P; wait $P; exit 9"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output,
              HasSubstr("was failed by the coordination service: task "
                        "worker:1"));
  EXPECT_THAT(r.output, HasSubstr("; elastic: removed from the membership, "
                                  "its launcher stops it; 3 task(s) train on "
                                  "(worker:0, worker:2, worker:3)"));
  EXPECT_THAT(r.output, HasSubstr("worker:1 (pid "));
  EXPECT_THAT(r.output,
              HasSubstr("was removed from the elastic membership while "
                        "running (the coordination service failed it: "
                        "silent or cut off); killing it"));
  ExpectWorker1LeftAndCameBack(r.output);
}

TEST_F(SlurmLaunchTest, ParameterServerTrainingWithJobs) {
#ifdef COHORT_TSAN_BUILD
  fprintf(stderr,
          "SKIPPED: the parameter-server job under ThreadSanitizer takes "
          "minutes; it runs in the plain and ASan builds\n");
  GTEST_SKIP() << "train_ps under ThreadSanitizer";
#endif
  CommandRun r = Srun(
      4, {"--jobs", "chief=1,worker=2,ps=1"},
      absl::StrCat(BinDir(),
                   "/train_ps --steps 100 --log-every 50 --target-accuracy 0.6 "
                   "--checkpoint-dir $D/checkpoint"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("[chief:0] final: global_step"));
  EXPECT_THAT(r.output, HasSubstr("job succeeded: all 4 task(s)"));
}

// Synchronous training through the runtime under Slurm: the chief and two
// workers form their collective group through the group leader and end with
// identical parameters (the job compares them and fails otherwise).
TEST_F(SlurmLaunchTest, CollectiveTrainingThroughTheRuntime) {
  CommandRun r =
      Srun(3, {"--jobs", "chief=1,worker=2"},
           absl::StrCat(BinDir(),
                        "/train_collective --steps 100 --log-every 50 "
                        "--target-loss 0.7 --checkpoint-dir $D/checkpoint"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output,
              HasSubstr("[chief:0] parameters identical across 3 tasks"));
  EXPECT_THAT(r.output, HasSubstr("job succeeded: all 3 task(s)"));
}

}  // namespace
}  // namespace cohort::launch
