// CommonMeasuredSpan: which steps count towards the ps job's examples/s.
// (RunPsJob itself runs in bench_training_smoke, a real job of train_ps.)
#include "bench/training/ps_job.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort::bench {
namespace {

using ::testing::HasSubstr;

examples::StepLog Worker(const std::string& task, int batch,
                         std::vector<int64_t> times) {
  examples::StepLog log;
  log.task = task;
  log.batch = batch;
  log.step_end_unix_us = std::move(times);
  return log;
}

// One worker: the span runs from the end of its warm-up to its last step,
// and every step after the warm-up counts.
TEST(CommonMeasuredSpanTest, OneWorkerCountsEveryStepAfterItsWarmUp) {
  absl::StatusOr<CommonSpan> s = CommonMeasuredSpan(
      {Worker("worker:0", 64, {100, 200, 300, 400, 500})}, 2);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->start_unix_us, 200);
  EXPECT_EQ(s->end_unix_us, 500);
  EXPECT_EQ(s->steps, 3);
  EXPECT_EQ(s->examples, 192);
  EXPECT_DOUBLE_EQ(s->examples_per_second, 192 / 300e-6);
}

// Two workers, the second starting late and the first stopping early: the
// span is the stretch where both run past their warm-up, and only the steps
// that end inside it count (worker:0's first three and worker:1's last are
// left out).
TEST(CommonMeasuredSpanTest, TwoWorkersCountOnlyTheirCommonSpan) {
  absl::StatusOr<CommonSpan> s =
      CommonMeasuredSpan({Worker("worker:0", 10, {0, 10, 20, 30, 40, 50}),
                          Worker("worker:1", 10, {25, 35, 45, 55, 65})},
                         2);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->start_unix_us, 35);  // worker:1's warm-up ends last
  EXPECT_EQ(s->end_unix_us, 50);    // worker:0 stops first
  EXPECT_EQ(s->steps, 3);           // 40, 50 and 45
  EXPECT_EQ(s->examples, 30);
  EXPECT_DOUBLE_EQ(s->examples_per_second, 30 / 15e-6);
}

// Each worker's examples are its own batch times its steps.
TEST(CommonMeasuredSpanTest, ExamplesUseEachWorkersBatch) {
  absl::StatusOr<CommonSpan> s = CommonMeasuredSpan(
      {Worker("worker:0", 8, {0, 10, 20}), Worker("worker:1", 32, {0, 10, 20})},
      1);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->steps, 4);
  EXPECT_EQ(s->examples, 2 * 8 + 2 * 32);
}

TEST(CommonMeasuredSpanTest, WorkersThatNeverTrainTogetherAreRefused) {
  absl::StatusOr<CommonSpan> s = CommonMeasuredSpan(
      {Worker("worker:0", 64, {0, 1, 2}), Worker("worker:1", 64, {10, 11, 12})},
      1);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.status().message()),
              HasSubstr("worker:0 ended its last step at 2 us"));
  EXPECT_THAT(std::string(s.status().message()),
              HasSubstr("worker:1 ended its warm-up at 10 us"));
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("--ps-steps"));
}

TEST(CommonMeasuredSpanTest, AWorkerWithNoStepPastItsWarmUpIsRefused) {
  absl::StatusOr<CommonSpan> s = CommonMeasuredSpan(
      {Worker("worker:0", 64, {0, 1, 2, 3}), Worker("worker:1", 64, {1, 2})},
      2);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.status().message()),
              HasSubstr("worker:1 ran 2 step(s), none past the warm-up of 2"));
}

TEST(CommonMeasuredSpanTest, NoWorkersOrNoWarmUpIsInvalid) {
  EXPECT_EQ(CommonMeasuredSpan({}, 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CommonMeasuredSpan({Worker("worker:0", 64, {0, 1, 2})}, 0)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace cohort::bench
