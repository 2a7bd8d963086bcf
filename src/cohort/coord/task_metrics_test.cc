#include "cohort/coord/task_metrics.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace cohort::coord {
namespace {

TaskMetrics Point(const std::string& task, int64_t step, int64_t ms) {
  TaskMetrics m;
  m.task = task;
  m.global_step = step;
  m.loss = 0.5;
  m.examples_per_sec = 1000;
  m.global_steps_per_sec = 40;
  m.last_step = 2000;
  m.time_unix_ms = ms;
  return m;
}

TEST(TaskMetricsTest, EncodeDecodeKeepsEveryField) {
  TaskMetrics m = Point("worker:1", 1200, 1700000000123);
  auto back = DecodeTaskMetrics(EncodeTaskMetrics(m), MetricsKey(m.task));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->task, "worker:1");
  EXPECT_EQ(back->global_step, 1200);
  EXPECT_EQ(back->loss, 0.5);
  EXPECT_EQ(back->examples_per_sec, 1000);
  EXPECT_EQ(back->global_steps_per_sec, 40);
  EXPECT_EQ(back->last_step, 2000);
  EXPECT_EQ(back->time_unix_ms, 1700000000123);
  EXPECT_EQ(MetricsKey("worker:1"), "cohort/metrics/worker:1");
  m.loss.reset();
  m.last_step.reset();
  back = DecodeTaskMetrics(EncodeTaskMetrics(m), "k");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_FALSE(back->loss.has_value());
  EXPECT_FALSE(back->last_step.has_value());
}

TEST(TaskMetricsTest, BadValuesAreRefusedNamingTheKey) {
  EXPECT_EQ(DecodeTaskMetrics(std::string(5000, ' '), "cohort/metrics/x")
                .status()
                .message(),
            "metrics at cohort/metrics/x are 5000 bytes, more than the 4096 "
            "a task's metrics may take");
  EXPECT_EQ(DecodeTaskMetrics("[1]", "k").status().message(),
            "metrics at k must be a JSON object");
  EXPECT_EQ(DecodeTaskMetrics(R"({"global_step":1})", "k").status().message(),
            "metrics at k: \"task\" must name the task (1-128 chars)");
  EXPECT_EQ(DecodeTaskMetrics(R"({"task":"w:0","global_step":"1",
                                  "examples_per_sec":1,
                                  "global_steps_per_sec":1,"time_unix_ms":1})",
                              "k")
                .status()
                .message(),
            "metrics at k: \"global_step\" must be a number, got string");
  EXPECT_EQ(DecodeTaskMetrics(R"({"task":"w:0","global_step":1})", "k")
                .status()
                .message(),
            "metrics at k: \"examples_per_sec\" is missing");
  EXPECT_FALSE(DecodeTaskMetrics("{", "k").ok());
}

TEST(TaskMetricsTest, HistoryKeepsTheNewestPointsOnce) {
  MetricsHistory h(3);
  for (int i = 0; i < 5; ++i) h.Add(Point("worker:0", i * 10, 1000 + i));
  h.Add(Point("worker:0", 99, 1004));  // same time as the newest: dropped
  h.Add(Point("chief:0", 7, 1000));
  auto series = h.Series();
  ASSERT_EQ(series["worker:0"].size(), 3u);
  EXPECT_EQ(series["worker:0"][0].global_step, 20);
  EXPECT_EQ(series["worker:0"][2].global_step, 40);
  ASSERT_EQ(series["chief:0"].size(), 1u);
  auto latest = h.Latest();
  ASSERT_EQ(latest.size(), 2u);
}

TEST(TaskMetricsTest, ProgressSumsRatesAndEstimatesTheTimeLeft) {
  const absl::Time now = absl::FromUnixSeconds(1'700'000'000);
  EXPECT_EQ(ProgressLine(ProgressOf({}, now)), "");
  TaskMetrics a = Point("chief:0", 1200, 2000);
  TaskMetrics b = Point("worker:0", 1100, 1000);
  a.received_unix_ms = absl::ToUnixMillis(now - absl::Seconds(1));
  b.received_unix_ms = absl::ToUnixMillis(now - absl::Seconds(2));
  b.time_unix_ms = 9'000'000'000'000;  // a skewed clock decides nothing
  b.examples_per_sec = 4120;
  b.global_steps_per_sec = 10;  // heard from earlier: a's rate counts
  JobProgress p = ProgressOf({a, b}, now);
  EXPECT_EQ(p.global_step, 1200);
  EXPECT_EQ(p.last_step, 2000);
  EXPECT_EQ(p.examples_per_sec, 5120);
  ASSERT_TRUE(p.eta.has_value());
  EXPECT_EQ(*p.eta, absl::Seconds(20));  // 800 steps at 40/s
  EXPECT_EQ(ProgressLine(p),
            "progress: global step 1200/2000 (60%), 5,120 examples/s, ETA 20s");
  a.last_step.reset();
  b.last_step.reset();
  EXPECT_EQ(ProgressLine(ProgressOf({a, b}, now)),
            "progress: global step 1200, 5,120 examples/s");
  a.last_step = 1000000;
  EXPECT_EQ(ProgressLine(ProgressOf({a}, now)),
            "progress: global step 1200/1000000 (0%), 1,000 examples/s, ETA "
            "6h56m");
  // A task not heard from for 10 s (finished, lost) adds no rate, and
  // without a fresh rate there is no ETA.
  b.received_unix_ms = absl::ToUnixMillis(now - absl::Seconds(11));
  EXPECT_EQ(ProgressOf({a, b}, now).examples_per_sec, 1000);
  a.received_unix_ms = b.received_unix_ms;
  EXPECT_EQ(ProgressLine(ProgressOf({a, b}, now)),
            "progress: global step 1200/1000000 (0%), 0 examples/s");
}

TEST(TaskMetricsTest, NumbersOutOfRangeAreRefused) {
  auto with = [](const std::string& fields) {
    return DecodeTaskMetrics(
        absl::StrCat(R"({"task":"w:0","global_step":1,"examples_per_sec":1,)"
                     R"("global_steps_per_sec":1,"time_unix_ms":1,)",
                     fields, "}"),
        "k");
  };
  EXPECT_TRUE(with(R"("last_step":10)").ok());
  EXPECT_EQ(with(R"("last_step":1e17)").status().message(),
            "metrics at k: \"last_step\" must be an integer in [0, "
            "9.0072e+15], got 1e+17");
  EXPECT_FALSE(with(R"("last_step":-1)").ok());
  EXPECT_FALSE(with(R"("last_step":1.5)").ok());
  EXPECT_FALSE(with(R"("loss":"x")").ok());
  EXPECT_FALSE(DecodeTaskMetrics(
                   R"({"task":"w:0","global_step":1,"examples_per_sec":1e300,)"
                   R"("global_steps_per_sec":1,"time_unix_ms":1})",
                   "k")
                   .ok());
}

TEST(TaskMetricsTest, HistoryKeepsAtMostMaxTasks) {
  MetricsHistory h(10, 2);
  h.Add(Point("worker:0", 1, 1));
  h.Add(Point("worker:1", 1, 1));
  h.Add(Point("worker:2", 1, 1));  // a third task: dropped
  h.Add(Point("worker:0", 2, 2));  // a known task goes on
  auto series = h.Series();
  ASSERT_EQ(series.size(), 2u);
  EXPECT_EQ(series["worker:0"].size(), 2u);
  h.Clear();
  EXPECT_TRUE(h.Series().empty());
}

}  // namespace
}  // namespace cohort::coord
