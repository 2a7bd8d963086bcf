// The parameter-server job (examples/train/train_ps.cc) between real
// processes on 127.0.0.1:
//  - a whole run under `cohort launch` (chief, 2 workers, ps, evaluator);
//  - kill -9 of the ps mid-run under `cohort launch --restart gang
//    --max-restarts 1`: the gang restarts and the chief resumes from its
//    latest checkpoint;
//  - kill -9 of a worker, of the ps, and of the chief under `--restart
//    task` (the default for a job with roles): that task alone is
//    restarted, the others keep their processes; the global step keeps
//    increasing while a worker is down; the chief goes on from the live
//    global step;
//  - kill -9 of a ps running as its own process, restarted on its port:
//    the chief and the worker recover their sessions (no process of theirs
//    restarts) and the chief restores the lost variables.
// Every wait is on an output line or an exit, with a deadline.
#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "cohort/rpc/socket.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/coord/test_process.h"
#include "tests/train/job_test_util.h"

namespace cohort::testing {
namespace {

std::string FreshDir(const std::string& name) {
  return FreshTestDir("ps_job_test." + name);
}

using ::testing::HasSubstr;
using ::testing::Not;

const char kCohort[] = COHORT_BINARY;
const char kTrainPs[] = TRAIN_PS_BINARY;

#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define COHORT_PS_JOB_TEST_SANITIZED 1
#endif
#if __has_feature(thread_sanitizer)
#define COHORT_PS_JOB_TEST_TSAN 1
#endif
#endif

// The model's size, and the accuracy the launched job must reach (none for
// `accuracy` 0: train_ps then exits 0 whatever it reaches). Under a
// sanitizer (built at -O1) Eigen's kernels run about a hundred times
// slower, so the job trains the model with 64 hidden units there, to a
// target 0.1 lower (the mechanics under test are the same); the release
// build trains the job's own 1.07M-parameter model.
std::vector<std::string> ModelFlags(double accuracy) {
#ifdef COHORT_PS_JOB_TEST_SANITIZED
  std::vector<std::string> flags = {"--hidden", "64"};
  accuracy = std::max(0.0, accuracy - 0.1);
#else
  std::vector<std::string> flags;
#endif
  if (accuracy > 0) {
    flags.push_back("--target-accuracy");
    flags.push_back(std::to_string(accuracy));
  }
  return flags;
}

std::vector<std::string> LaunchArgs(const std::string& dir,
                                    std::vector<std::string> launch_flags,
                                    std::vector<std::string> train_flags) {
  std::vector<std::string> argv = {kCohort, "launch", "--chief", "--workers"};
  argv.insert(argv.end(), launch_flags.begin(), launch_flags.end());
  for (std::string a :
       {std::string("--log-dir"), dir + "/logs", std::string("--"),
        std::string(kTrainPs), std::string("--checkpoint-dir"), dir + "/ckpt",
        std::string("--log-every"), std::string("50")}) {
    argv.push_back(std::move(a));
  }
  argv.insert(argv.end(), train_flags.begin(), train_flags.end());
  return argv;
}

std::vector<std::string> Concat(std::vector<std::string> a,
                                const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// train_ps alone (no TF_CONFIG), stderr folded into the lines read.
std::unique_ptr<TestProcess> StartAlone(const std::vector<std::string>& flags) {
  std::vector<std::string> argv = {"/bin/sh", "-c", "exec \"$0\" \"$@\" 2>&1",
                                   kTrainPs};
  argv.insert(argv.end(), flags.begin(), flags.end());
  return std::make_unique<TestProcess>(argv);
}

// Accuracy decides the exit status only when the caller asks for one: a
// run whose model cannot learn (learning rate 0, so its held-out accuracy
// stays at chance, about 1/4 over 4 classes) exits 0 without a target and
// 2, naming the target, with --target-accuracy 0.99. Before, every run
// had an implied target of 0.9, which a short run missed at random.
TEST(PsJobTest, AccuracyFailsTheRunOnlyAgainstAGivenTarget) {
  const std::vector<std::string> flags = {"--steps",     "2", "--hidden", "8",
                                          "--lr",        "0", "--batch",  "8",
                                          "--log-every", "1"};
  auto plain = StartAlone(flags);
  Drain(plain.get(), absl::Seconds(60));
  ASSERT_EQ(ExitCode(plain.get(), absl::Seconds(30)), 0)
      << absl::StrJoin(plain->lines(), "\n");
  const std::string final_line = LineWith(plain.get(), "final:");
  const double accuracy =
      FigureAfter(final_line, "heldout_accuracy").value_or(-1);
  EXPECT_GE(accuracy, 0) << final_line;
  EXPECT_LT(accuracy, 0.99) << final_line;

  auto targeted = StartAlone(Concat(flags, {"--target-accuracy", "0.99"}));
  Drain(targeted.get(), absl::Seconds(60));
  EXPECT_EQ(ExitCode(targeted.get(), absl::Seconds(30)), 2)
      << absl::StrJoin(targeted->lines(), "\n");
  EXPECT_THAT(LineWith(targeted.get(), "train_ps:"),
              HasSubstr("is below --target-accuracy 0.9900"));

  // A target that is no fraction is a bad flag, refused before training.
  auto bad = StartAlone(Concat(flags, {"--target-accuracy", "90"}));
  Drain(bad.get(), absl::Seconds(30));
  EXPECT_EQ(ExitCode(bad.get(), absl::Seconds(30)), 3);
  EXPECT_THAT(LineWith(bad.get(), "--target-accuracy 90"),
              HasSubstr("must be in [0, 1]"));
  EXPECT_EQ(LineWith(bad.get(), "final:"), "");
}

// The accuracy the launched job must reach. Asynchronous SGD's end point is
// a random variable: idle, this job reaches 0.94-0.95; with both cores busy
// (as under ctest -j2) its workers' gradients go staler, and runs of
// 6 ended at 0.92-0.95, one in CI at 0.85 after a late loss spike. A model
// that does not learn stays near chance (0.25 over 4 classes, as
// AccuracyFailsTheRunOnlyAgainstAGivenTarget shows with learning rate 0),
// so 0.8 still fails a job that does not train.
constexpr double kLaunchedJobAccuracy = 0.8;

TEST(PsJobTest, LaunchedJobTrainsToTheStepAndEvaluatesEachCheckpoint) {
  const std::string dir = FreshDir("launch");
  // The chief exits 2 below the target accuracy: exit 0 asserts it.
  TestProcess job(
      LaunchArgs(dir, {"2", "--ps", "1", "--evaluator"},
                 Concat({"--steps", "1500", "--save-checkpoint-steps", "100",
                         "--wait-steps-per-worker", "50"},
                        ModelFlags(kLaunchedJobAccuracy))));
  Drain(&job, absl::Seconds(240));
  ASSERT_EQ(ExitCode(&job, absl::Seconds(30)), 0)
      << absl::StrJoin(job.lines(), "\n");
  const std::string final_line = LineWith(&job, "[chief:0] final:");
  EXPECT_GE(FigureAfter(final_line, "global_step").value_or(-1), 1500)
      << final_line;
#ifndef COHORT_PS_JOB_TEST_SANITIZED
  EXPECT_GT(FigureAfter(final_line, "heldout_accuracy").value_or(-1),
            kLaunchedJobAccuracy)
      << final_line;
#endif
  // worker:1 waited for global step 2 x 50 before it trained.
  EXPECT_THAT(LineWith(&job, "[worker:1]"), Not(""));
  EXPECT_THAT(
      LineWith(&job, "Waiting for global step 100 before starting training."),
      HasSubstr("[worker:1]"));
  // The evaluator saw the last checkpoint.
  double evaluated = -1;
  for (const std::string& line : job.lines()) {
    if (!absl::StartsWith(line, "[evaluator:0] evaluation at global step")) {
      continue;
    }
    evaluated = std::max(evaluated, FigureAfter(line, "step").value_or(-1));
  }
  EXPECT_GE(evaluated, 1500);
  // Five checkpoints kept (of the eleven or more saved), and the pointer
  // file lists exactly those, oldest first, naming the last one saved.
  std::vector<std::string> kept;
  for (const auto& entry : std::filesystem::directory_iterator(dir + "/ckpt")) {
    const std::string name = entry.path().filename().string();
    if (absl::StartsWith(name, "model.ckpt-")) kept.push_back(name);
  }
  EXPECT_EQ(kept.size(), 5u) << absl::StrJoin(kept, " ");
  std::ifstream pointer(dir + "/ckpt/checkpoint");
  std::vector<std::string> listed;
  std::string model_path, line;
  while (std::getline(pointer, line)) {
    absl::string_view v = line;
    if (absl::ConsumePrefix(&v, "all_model_checkpoint_paths: \"")) {
      listed.emplace_back(absl::StripSuffix(v, "\""));
    } else if (absl::ConsumePrefix(&v, "model_checkpoint_path: \"")) {
      model_path = std::string(absl::StripSuffix(v, "\""));
    }
  }
  std::vector<std::string> sorted_listed = listed;
  std::sort(sorted_listed.begin(), sorted_listed.end());
  std::sort(kept.begin(), kept.end());
  EXPECT_EQ(sorted_listed, kept);
  ASSERT_FALSE(listed.empty());
  EXPECT_EQ(model_path, listed.back());
  EXPECT_GE(
      FigureAfter(absl::StrReplaceAll(model_path, {{"-", " "}}), "model.ckpt")
          .value_or(-1),
      1000);
}

TEST(PsJobTest, GangRestartedAfterKillResumesFromTheCheckpoint) {
  const std::string dir = FreshDir("restart");
  TestProcess job(LaunchArgs(
      dir, {"1", "--ps", "1", "--restart", "gang", "--max-restarts", "1"},
      Concat({"--steps", "800", "--save-checkpoint-steps", "100"},
             ModelFlags(0))));
  // Past the checkpoint at 100 (and more), kill the ps.
  ASSERT_THAT(WaitForFigure(&job, "[chief:0] chief:0: global_step",
                            "global_step", 300, absl::Seconds(120)),
              Not(""))
      << absl::StrJoin(job.lines(), "\n");
  std::optional<pid_t> ps = TaskPid(job.pid(), "ps:0");
  ASSERT_TRUE(ps.has_value()) << "no process of task ps:0 under the launcher";
  ASSERT_EQ(kill(*ps, SIGKILL), 0);
  Drain(&job, absl::Seconds(240));
  ASSERT_EQ(ExitCode(&job, absl::Seconds(30)), 0)
      << absl::StrJoin(job.lines(), "\n");
  // The chief of the second attempt restored the checkpoint, and its
  // training went on from there (not from step 0).
  const std::vector<std::string>& lines = job.lines();
  size_t at = 0;
  while (at < lines.size() &&
         !absl::StartsWith(lines[at], "[chief:0] restored from")) {
    ++at;
  }
  ASSERT_LT(at, lines.size()) << absl::StrJoin(lines, "\n");
  EXPECT_THAT(lines[at], HasSubstr(dir + "/ckpt/model.ckpt-"));
  const double restored_step = FigureAfter(lines[at], "step").value_or(-1);
  EXPECT_GE(restored_step, 100) << lines[at];
  double next_step = -1;
  for (size_t i = at + 1; i < lines.size() && next_step < 0; ++i) {
    if (absl::StartsWith(lines[i], "[chief:0] chief:0: global_step")) {
      next_step = FigureAfter(lines[i], "global_step").value_or(-1);
    }
  }
  EXPECT_GE(next_step, restored_step);
  const std::string final_line = LineWith(&job, "[chief:0] final:");
  EXPECT_GE(FigureAfter(final_line, "global_step").value_or(-1), 800)
      << final_line;
}

// `cohort launch --chief --workers 2 --ps 1 --max-restarts 1` (task
// restarts: the default for a job with roles) with its messages on stdout
// too. Each task runs train_ps through /bin/sh, and `task`'s first restart
// waits for <dir>/go before it runs train_ps (exit 7 after 120 s): while it
// is held down the test watches the others.
std::unique_ptr<TestProcess> StartTaskRestartJob(const std::string& dir,
                                                 const std::string& task,
                                                 int steps) {
  const std::string hold = HoldFirstRestart(dir, task);
  std::vector<std::string> argv = {"/bin/sh",
                                   "-c",
                                   "exec \"$0\" \"$@\" 2>&1",
                                   kCohort,
                                   "launch",
                                   "--chief",
                                   "--workers",
                                   "2",
                                   "--ps",
                                   "1",
                                   "--max-restarts",
                                   "1",
                                   "--log-dir",
                                   dir + "/logs",
                                   "--",
                                   "/bin/sh",
                                   "-c",
                                   hold,
                                   kTrainPs,
                                   "--checkpoint-dir",
                                   dir + "/ckpt",
                                   "--log-every",
                                   "50",
                                   "--steps",
                                   std::to_string(steps),
                                   "--save-checkpoint-steps",
                                   "100"};
  for (const std::string& f : ModelFlags(0)) argv.push_back(f);
  return std::make_unique<TestProcess>(argv);
}

// The chief's latest global step in the lines read so far.
double ChiefStep(TestProcess* job) {
  double step = -1;
  for (const std::string& line : job->lines()) {
    if (absl::StartsWith(line, "[chief:0] chief:0: global_step")) {
      step = std::max(step, FigureAfter(line, "global_step").value_or(-1));
    }
  }
  return step;
}

// A StartTaskRestartJob job in which one task is killed once: the fixture
// kills it, waits for its restart to be announced and held down, and checks
// that the other tasks keep the processes they had before the kill.
class TaskRestartJobTest : public ::testing::Test {
 protected:
  // Starts the job (its last step `steps`), waits for the chief's global
  // step `kill_after`, kills `victim` with SIGKILL, and waits for the
  // launcher's restart line naming it and for its restart to be held.
  void SetUp() override {
#ifdef COHORT_PS_JOB_TEST_TSAN
    // Whole PS jobs take minutes under ThreadSanitizer; the supervisor's
    // threads are checked there by launch_test's TaskRestartTest, and these
    // jobs run in the plain and ASan builds.
    GTEST_SKIP() << "task restarts of the PS job: plain and ASan builds only";
#endif
  }

  void KillAndHold(const std::string& name, const std::string& victim,
                   int steps, double kill_after) {
    dir_ = FreshDir(name);
    steps_ = steps;
    job_ = StartTaskRestartJob(dir_, victim, steps);
    ASSERT_THAT(WaitForFigure(job_.get(), "[chief:0] chief:0: global_step",
                              "global_step", kill_after, absl::Seconds(120)),
                Not(""))
        << absl::StrJoin(job_->lines(), "\n");
    for (const char* task : {"chief:0", "worker:0", "worker:1", "ps:0"}) {
      std::optional<pid_t> pid = TaskPid(job_->pid(), task);
      ASSERT_TRUE(pid.has_value()) << "no process of " << task;
      if (task == victim) {
        victim_pid_ = *pid;
      } else {
        others_.push_back({task, *pid});
      }
    }
    ASSERT_EQ(kill(victim_pid_, SIGKILL), 0);
    chief_step_at_kill_ = ChiefStep(job_.get());
    // The launcher's line and the restarted task's first line come from
    // two writers: they are looked for in either order.
    EXPECT_THAT(job_->WaitForLineInAnyOrder("restarted alone (restart 1 of 1)",
                                            absl::Seconds(30)),
                HasSubstr(absl::StrCat(victim, " (pid ", victim_pid_,
                                       ") killed by signal 9 (SIGKILL)")));
    ASSERT_THAT(
        job_->WaitForLineInAnyOrder(absl::StrCat("[", victim, "] held down"),
                                    absl::Seconds(30)),
        Not(""));
  }

  // Every other task still runs the process it ran before the kill.
  void ExpectOthersKeptTheirProcesses() {
    for (const auto& [task, pid] : others_) {
      EXPECT_EQ(TaskPid(job_->pid(), task), pid) << task;
    }
  }

  // The held restart goes on.
  void Release() { std::ofstream(dir_ + "/go").put('\n'); }

  // The job ends with exit 0 in its first attempt, the chief past its last
  // step, the restart in the launcher's summary.
  void ExpectTheJobSucceedsInAttemptZero() {
    Drain(job_.get(), absl::Seconds(240));
    ASSERT_EQ(ExitCode(job_.get(), absl::Seconds(30)), 0)
        << absl::StrJoin(job_->lines(), "\n");
    EXPECT_THAT(LineWith(job_.get(), "1 task restart(s) in attempt 0:"),
                Not(""));
    EXPECT_EQ(LineWith(job_.get(), "attempt 1"), "");
    EXPECT_GE(
        FigureAfter(LineWith(job_.get(), "[chief:0] final:"), "global_step")
            .value_or(-1),
        steps_);
  }

  std::string dir_;
  int steps_ = 0;
  std::unique_ptr<TestProcess> job_;
  pid_t victim_pid_ = -1;
  std::vector<std::pair<std::string, pid_t>> others_;
  double chief_step_at_kill_ = -1;
};

// A worker killed mid-training is started again alone: while it is down
// (held before train_ps) the chief's global step goes on increasing and no
// other task's process changes; the restarted worker then trains again
// (GlobalStepWaiterHook lets it through at once: the step is far past its
// wait), and the job ends in its first attempt, the restart in its summary.
TEST_F(TaskRestartJobTest,
       AKilledWorkerIsRestartedAloneWhileTheOthersKeepStepping) {
  ASSERT_NO_FATAL_FAILURE(
      KillAndHold("task_restart_worker", "worker:1", 1500, 200));
  // worker:1 is down: the others train on.
  const double at_restart = ChiefStep(job_.get());
  EXPECT_THAT(WaitForFigure(job_.get(), "[chief:0] chief:0: global_step",
                            "global_step", at_restart + 150, absl::Seconds(60)),
              Not(""))
      << "the chief stopped stepping while worker:1 was down (at " << at_restart
      << ")";
  ExpectOthersKeptTheirProcesses();
  Release();
  EXPECT_THAT(WaitForFigure(job_.get(), "[worker:1] worker:1: global_step",
                            "global_step", at_restart, absl::Seconds(60)),
              Not(""))
      << "the restarted worker:1 never trained";
  ExpectTheJobSucceedsInAttemptZero();
}

// The ps killed (past the checkpoint at step 100): it alone is started
// again on its port, empty; the chief's and the workers' sessions recover
// (MonitoredSession), the chief restores the variables from its latest
// checkpoint, and no other process changes.
TEST_F(TaskRestartJobTest, AKilledPsIsRestartedAloneAndTheSessionsRecover) {
  ASSERT_NO_FATAL_FAILURE(KillAndHold("task_restart_ps", "ps:0", 1000, 300));
  Release();
  ASSERT_THAT(
      job_->WaitForLine("Restoring parameters from", absl::Seconds(120)),
      HasSubstr(dir_ + "/ckpt/model.ckpt-"))
      << absl::StrJoin(job_->lines(), "\n");
  ExpectOthersKeptTheirProcesses();
  ExpectTheJobSucceedsInAttemptZero();
}

// The chief killed: it alone is started again while the workers and the ps
// keep their processes. The model's variables live on the ps, so the
// restarted chief finds the model ready and goes on from the live global
// step: nothing rolls back (TensorFlow's chief would restore its last
// checkpoint; SessionManager's documented difference).
TEST_F(TaskRestartJobTest,
       AKilledChiefIsRestartedAloneAndGoesOnFromTheLiveStep) {
  ASSERT_NO_FATAL_FAILURE(
      KillAndHold("task_restart_chief", "chief:0", 1000, 300));
  Release();
  ASSERT_THAT(
      job_->WaitForLine("Model is already initialized", absl::Seconds(120)),
      HasSubstr("[chief:0]"))
      << absl::StrJoin(job_->lines(), "\n");
  EXPECT_THAT(
      WaitForFigure(job_.get(), "[chief:0] chief:0: global_step", "global_step",
                    chief_step_at_kill_, absl::Seconds(60)),
      Not(""))
      << "the restarted chief did not go on from global step "
      << chief_step_at_kill_;
  ExpectOthersKeptTheirProcesses();
  ExpectTheJobSucceedsInAttemptZero();
}

// Processes started by hand from TF_CONFIG, as on machines without a
// launcher; ps:0 is killed and started again on its port.
class SeparateProcesses {
 public:
  SeparateProcesses() : dir_(FreshDir("separate")) {
    for (const char* task : {"chief", "worker", "ps"}) {
      auto port = rpc::PickFreePort("127.0.0.1");
      EXPECT_TRUE(port.ok()) << port.status();
      cluster_ += absl::StrCat(cluster_.empty() ? "" : ", ", "\"", task,
                               "\": [\"127.0.0.1:", port.value_or(0), "\"]");
    }
  }
  std::unique_ptr<TestProcess> Start(const std::string& type,
                                     const std::vector<std::string>& flags) {
    std::vector<std::string> argv = {
        "/usr/bin/env",
        absl::StrCat("TF_CONFIG={\"cluster\": {", cluster_,
                     "}, \"task\": {\"type\": \"", type, "\", \"index\": 0}}"),
        "COHORT_JOB_TOKEN=ps-job-test-token",
        kTrainPs,
        "--checkpoint-dir",
        dir_ + "/ckpt",
        "--log-every",
        "50"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    return std::make_unique<TestProcess>(argv);
  }

 private:
  const std::string dir_;
  std::string cluster_;
};

TEST(PsJobTest, KilledPsComesBackAndTheSessionsRecover) {
  SeparateProcesses cluster;
  const std::vector<std::string> flags = Concat(
      {"--steps", "800", "--save-checkpoint-steps", "100"}, ModelFlags(0));
  auto ps = cluster.Start("ps", flags);
  auto chief = cluster.Start("chief", flags);
  auto worker = cluster.Start("worker", flags);
  const std::string before =
      WaitForFigure(chief.get(), "chief:0: global_step", "global_step", 400,
                    absl::Seconds(120));
  ASSERT_THAT(before, Not(""));
  ps->Kill9();
  ps->Wait();
  ps = cluster.Start("ps", flags);
  EXPECT_EQ(ExitCode(chief.get(), absl::Seconds(180)), 0);
  EXPECT_EQ(ExitCode(worker.get(), absl::Seconds(60)), 0);
  Drain(chief.get(), absl::Seconds(5));
  Drain(worker.get(), absl::Seconds(5));
  ps->Kill9();
  const std::string final_line = LineWith(chief.get(), "final:");
  EXPECT_GE(FigureAfter(final_line, "global_step").value_or(-1), 800)
      << final_line;
  // The chief restored the checkpoint (>= 400 - 100 steps in) onto the new
  // ps: the two trained little more than 800 steps together. Starting over
  // from step 0 would have taken them past 800 + 400.
  const double chief_steps =
      FigureAfter(LineWith(chief.get(), "trained"), "trained").value_or(-1);
  const double worker_steps =
      FigureAfter(LineWith(worker.get(), "trained"), "trained").value_or(-1);
  ASSERT_GT(chief_steps, 0);
  ASSERT_GT(worker_steps, 0);
  EXPECT_LT(chief_steps + worker_steps, 800 + 300)
      << "chief " << chief_steps << " worker " << worker_steps;
}

}  // namespace
}  // namespace cohort::testing
