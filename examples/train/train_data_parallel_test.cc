// Tests of the data-parallel job: its building blocks in process, and the
// whole job as a real gang of two processes started by `cohort launch` (the
// binary next to this test in <build>/bin).
#include <unistd.h>

#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "cohort/training/data_parallel.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/launch/command_run.h"

namespace cohort::training {
namespace {

using ::testing::HasSubstr;

TEST(DataParallelTest, SyntheticDataIsDeterministicAndShardsPartitionIt) {
  TrainOptions o;
  o.train_examples = 101;
  o.heldout_examples = 10;
  SyntheticData a = MakeSyntheticData(o), b = MakeSyntheticData(o);
  EXPECT_TRUE(a.train.x.Equals(b.train.x));
  EXPECT_TRUE(a.train.labels.Equals(b.train.labels));
  EXPECT_TRUE(a.heldout.x.Equals(b.heldout.x));
  int total = 0;
  for (int p = 0; p < 3; ++p) {
    absl::StatusOr<Dataset> s = Shard(a.train, p, 3);
    ASSERT_TRUE(s.ok()) << s.status();
    // The shard is the contiguous block starting at row p * 101 / 3.
    const int begin = p * 101 / 3;
    EXPECT_EQ(s->x.data<float>()[0],
              a.train.x.data<float>()[begin * o.features]);
    total += s->size();
  }
  EXPECT_EQ(total, 101);
  EXPECT_FALSE(Shard(a.train, 3, 3).ok());
}

// The other member of a fake gang of two computes exactly what this one
// does: the mean of two equal buffers is the buffer itself.
absl::Status MirroredMean(float*, size_t) { return absl::OkStatus(); }

// A tiny job (two steps) and a fake gang of two, partition 0, whose other
// task sends back `other` in every all-gather ("" for this task's own
// string) and mirrors every all-reduce.
struct TinyJob {
  TrainOptions options;
  Collective gang;
  explicit TinyJob(std::string other) {
    options.train_examples = 256;
    options.heldout_examples = 16;
    options.steps = 2;
    options.log_every = 0;
    gang.partition_id = 0;
    gang.num_tasks = 2;
    gang.all_gather =
        [other](
            const std::string& m) -> absl::StatusOr<std::vector<std::string>> {
      return std::vector<std::string>{m, other.empty() ? m : other};
    };
    gang.all_reduce_mean = MirroredMean;
  }
};

// A gang of two whose other task reports different parameters: the
// training must refuse to go on, naming the partition and checksums.
TEST(DataParallelTest, DifferingParametersAreReported) {
  TinyJob job("deadbeef");
  std::ostringstream log;
  absl::StatusOr<TrainReport> r =
      RunDataParallelTraining(job.options, job.gang, log);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(r.status().message()),
              HasSubstr("partition 1=deadbeef"));
}

// With a fake gang whose other task mirrors this one, training runs the
// same arithmetic as a real gang of two and lowers the loss.
TEST(DataParallelTest, MirroredGangTrains) {
  TrainOptions o;
  o.steps = 60;
  o.log_every = 0;
  Collective gang;
  gang.partition_id = 0;
  gang.num_tasks = 2;
  gang.all_gather =
      [](const std::string& m) -> absl::StatusOr<std::vector<std::string>> {
    return std::vector<std::string>{m, m};
  };
  gang.all_reduce_mean = MirroredMean;
  std::ostringstream log;
  absl::StatusOr<TrainReport> r = RunDataParallelTraining(o, gang, log);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_GT(r->initial_loss, 1.0);
  EXPECT_LT(r->heldout_loss, 0.6);
  EXPECT_LT(r->final_train_loss, r->initial_loss);
}

// An elastic gang of two whose members are both replacements (every member
// that held the training state was lost): the job must refuse to go on from
// fresh weights, which would look like success while it threw the training
// away.
TEST(DataParallelTest, AnElasticGangOfOnlyReplacementsRefusesToStartOver) {
  TinyJob job("");
  Collective& gang = job.gang;
  gang.broadcast = [](void*, size_t, int) { return absl::OkStatus(); };
  gang.reform = [](const absl::Status&, Collective&) {
    return absl::OkStatus();
  };
  gang.membership_changed = [] { return false; };
  gang.describe = [] {
    return std::string("generation 3: worker:0, worker:1");
  };
  gang.job_finished = [] { return false; };
  gang.mark_finished = [] { return absl::OkStatus(); };
  gang.joins_running_job = true;
  std::ostringstream log;
  absl::StatusOr<TrainReport> r =
      RunDataParallelTraining(job.options, gang, log);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(r.status().message()),
              HasSubstr("every member of elastic generation 3: worker:0, "
                        "worker:1 joined after training started"));
}

using launch::launch_testing::BinDir;

// Runs argv to completion (at most 50 s, under the test's 60 s timeout);
// returns (shell exit code, stdout + stderr).
std::pair<int, std::string> RunToEnd(const std::vector<std::string>& argv,
                                     const std::vector<std::string>& env = {}) {
  launch::launch_testing::CommandRun r =
      launch::launch_testing::RunCommand(argv, env, absl::Seconds(50));
  return {r.exit_code, r.status.ok() || r.exit_code > 0
                           ? r.output
                           : absl::StrCat(r.status.message(), "\n", r.output)};
}

// The value after `key` on the chief's "final:" line, or -1.
double FinalFigure(const std::string& output, const std::string& key) {
  for (absl::string_view line : absl::StrSplit(output, '\n')) {
    if (line.find("[worker:0] final:") == absl::string_view::npos) continue;
    const size_t at = line.find(key + " ");
    double v;
    if (at == absl::string_view::npos) return -1;
    std::vector<std::string> rest =
        absl::StrSplit(line.substr(at + key.size() + 1), ' ');
    return absl::SimpleAtod(absl::StripSuffix(rest[0], ")"), &v) ? v : -1;
  }
  return -1;
}

TEST(DataParallelJobTest, TwoTasksTrainToTheSameParametersAndLowerLoss) {
  const std::string dir =
      absl::StrCat(::testing::TempDir(), "train_dp_test.", getpid(), ".",
                   absl::ToUnixNanos(absl::Now()));
  const std::string bin = BinDir();
  auto [code, output] = RunToEnd(
      {bin + "/cohort", "launch", "-n", "2", "--no-progress",
       "--barrier-timeout", "60", "--log-dir", dir + "/logs", "--",
       bin + "/train_data_parallel", "--steps", "150", "--log-every", "50",
       "--checkpoint-dir", dir + "/ckpt", "--target-loss", "0.6"});
  ASSERT_EQ(code, 0) << output;
  // The job checks the parameters' checksums across tasks; it says so.
  EXPECT_THAT(
      output,
      HasSubstr("[worker:0] parameters identical across 2 tasks: checksum"));
  EXPECT_THAT(output, HasSubstr("[worker:0] step 150/150 loss"));
  EXPECT_THAT(output, HasSubstr("checkpoint: " + dir + "/ckpt/model.ckpt-150"));
  const double initial = FinalFigure(output, "(initial");
  const double train = FinalFigure(output, "train_loss");
  const double heldout = FinalFigure(output, "heldout_loss");
  const double accuracy = FinalFigure(output, "heldout_accuracy");
  // Four classes: chance is log(4) = 1.386 and 25% accuracy.
  EXPECT_GT(initial, 1.0) << output;
  EXPECT_GE(train, 0) << output;
  EXPECT_LT(train, 0.6) << output;
  EXPECT_GE(heldout, 0) << output;
  EXPECT_LT(heldout, 0.6) << output;
  EXPECT_GT(accuracy, 0.75) << output;
}

// The checksum on the "parameters identical across N tasks" line of `task`
// ("worker:0", "chief:0"), or "" when there is none.
std::string Checksum(const std::string& output, const std::string& task) {
  const std::string key =
      absl::StrCat("[", task, "] parameters identical across ");
  for (absl::string_view line : absl::StrSplit(output, '\n')) {
    if (!absl::StartsWith(line, key)) continue;
    const size_t at = line.find("checksum ");
    if (at != absl::string_view::npos) return std::string(line.substr(at + 9));
  }
  return "";
}

// The same job through the runtime (collective ops in each task's graph,
// the distribute coordinator, MonitoredTrainingSession) computes the gang's
// parameters bit for bit.
TEST(CollectiveJobTest, ThroughTheRuntimeItComputesTheGangsParameters) {
  const std::string dir =
      absl::StrCat(::testing::TempDir(), "train_collective_test.", getpid(),
                   ".", absl::ToUnixNanos(absl::Now()));
  const std::string bin = BinDir();
  auto [gang_code, gang] =
      RunToEnd({bin + "/cohort", "launch", "-n", "2", "--no-progress",
                "--barrier-timeout", "60", "--", bin + "/train_data_parallel",
                "--steps", "120", "--log-every", "0", "--target-loss", "0.7"});
  ASSERT_EQ(gang_code, 0) << gang;
  auto [code, output] = RunToEnd({bin + "/cohort",
                                  "launch",
                                  "--chief",
                                  "--workers",
                                  "1",
                                  "--no-progress",
                                  "--barrier-timeout",
                                  "60",
                                  "--",
                                  bin + "/train_collective",
                                  "--steps",
                                  "120",
                                  "--log-every",
                                  "60",
                                  "--checkpoint-dir",
                                  dir + "/ckpt",
                                  "--save-checkpoint-steps",
                                  "50",
                                  "--target-loss",
                                  "0.7"});
  ASSERT_EQ(code, 0) << output;
  const std::string checksum = Checksum(output, "chief:0");
  ASSERT_FALSE(checksum.empty()) << output;
  EXPECT_EQ(checksum, Checksum(gang, "worker:0")) << output << gang;
  EXPECT_THAT(output, HasSubstr("[chief:0] step 120 (global step"));
  EXPECT_THAT(output, HasSubstr("checkpoint: " + dir + "/ckpt/model.ckpt-120"));
}

// A second run on the chief's checkpoint directory: the chief restores, every
// worker takes the chief's state (otherwise its fresh weights would differ
// and the final comparison would fail), and training goes on to the new
// last step.
TEST(CollectiveJobTest, ARestoredChiefHandsItsStateToEveryWorker) {
  const std::string dir =
      absl::StrCat(::testing::TempDir(), "train_collective_restore.", getpid(),
                   ".", absl::ToUnixNanos(absl::Now()));
  const std::string bin = BinDir();
  auto run = [&](int steps) {
    return RunToEnd({bin + "/cohort", "launch", "--chief", "--workers", "2",
                     "--no-progress", "--barrier-timeout", "60", "--",
                     bin + "/train_collective", "--steps",
                     std::to_string(steps), "--log-every", "0",
                     "--checkpoint-dir", dir, "--target-loss", "5"});
  };
  auto [first_code, first] = run(40);
  ASSERT_EQ(first_code, 0) << first;
  auto [code, output] = run(80);
  ASSERT_EQ(code, 0) << output;
  EXPECT_THAT(output,
              HasSubstr("[chief:0] restored from " + dir + "/model.ckpt-40"));
  EXPECT_THAT(output,
              HasSubstr("[chief:0] parameters identical across 3 tasks"));
  EXPECT_THAT(output, HasSubstr("checkpoint: " + dir + "/model.ckpt-80"));
  EXPECT_NE(Checksum(output, "chief:0"), Checksum(first, "chief:0"));
}

TEST(CollectiveJobTest, OutsideACluster) {
  auto [code, output] =
      RunToEnd({BinDir() + "/train_collective", "--steps", "1"}, {"TF_CONFIG"});
  EXPECT_EQ(code, 1);
  EXPECT_THAT(output, HasSubstr("cohort launch --chief --workers N"));
}

TEST(DataParallelJobTest, OutsideALaunchItNamesTheMissingVariable) {
  auto [code, output] = RunToEnd(
      {BinDir() + "/train_data_parallel", "--steps", "1"},
      {"COHORT_BARRIER_ADDRESS", "COHORT_PARTITION_ID", "COHORT_NUM_TASKS"});
  EXPECT_EQ(code, 1);
  EXPECT_THAT(output, HasSubstr("COHORT_"));
  EXPECT_THAT(output, HasSubstr("cohort launch -n 2"));
}

}  // namespace
}  // namespace cohort::training
