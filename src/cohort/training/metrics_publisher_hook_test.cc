#include "cohort/training/metrics_publisher_hook.h"

#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "cohort/base/fake_env.h"
#include "cohort/training/monitored_session.h"
#include "cohort/training/session_creator.h"
#include "cohort/training/training_test_util.h"
#include "gtest/gtest.h"

namespace cohort::training {
namespace {

class Recorder {
 public:
  MetricsPut Put() {
    return [this](const std::string& key, const std::string& value) {
      bool first;
      {
        absl::MutexLock lock(&mu_);
        keys_.push_back(key);
        values_.push_back(*coord::DecodeTaskMetrics(value, key));
        first = values_.size() == 1;
      }
      // The first write stalls, as a slow store would, until released.
      if (first) release_.WaitForNotificationWithTimeout(absl::Seconds(30));
      return absl::OkStatus();
    };
  }
  // Blocks until the first write started (at most 30 s).
  bool AwaitFirstWrite() {
    absl::MutexLock lock(&mu_);
    return mu_.AwaitWithTimeout(
        absl::Condition(
            +[](std::vector<coord::TaskMetrics>* v) { return !v->empty(); },
            &values_),
        absl::Seconds(30));
  }
  void Release() { release_.Notify(); }
  std::vector<coord::TaskMetrics> values() {
    absl::MutexLock lock(&mu_);
    return values_;
  }
  std::vector<std::string> keys() {
    absl::MutexLock lock(&mu_);
    return keys_;
  }

 private:
  absl::Mutex mu_;
  std::vector<std::string> keys_ ABSL_GUARDED_BY(mu_);
  std::vector<coord::TaskMetrics> values_ ABSL_GUARDED_BY(mu_);
  absl::Notification release_;
};

TEST(MetricsPublisherHookTest, PublishesAtMostOncePerIntervalKeepingTheNewest) {
  FakeEnv env;
  Scope root = Scope::NewRootScope();
  testing::BuildCounterModel(root);
  testing::SharedLocalCluster cluster;
  Recorder recorder;
  MetricsPublisherOptions o;
  o.task = "worker:1";
  o.examples_per_step = 10;
  o.last_step = 100;
  o.interval = absl::Seconds(1);
  o.put = recorder.Put();
  o.env = &env;
  auto hook = MetricsPublisherHook::Create(o);
  ASSERT_TRUE(hook.ok()) << hook.status();
  SessionCreatorOptions c;
  c.factory = cluster.factory();
  MonitoredSessionOptions m;
  m.env = &env;
  auto sess = MonitoredSession::Create(
      root, std::make_unique<ChiefSessionCreator>(nullptr, c), {*hook}, m);
  ASSERT_TRUE(sess.ok()) << sess.status();
  // Steps 250 ms apart: the first opens the window; a sample every 4th
  // step after it (1 s), at global steps 5, 9 and 13.
  auto run = [&](int n) {
    for (int i = 0; i < n; ++i) {
      ASSERT_TRUE((*sess)->Run({}, {"train"}, nullptr).ok());
      env.AdvanceTime(absl::Milliseconds(250));
    }
  };
  run(5);
  // The sample at step 5 is being written, and the write stalls: the
  // samples at 9 and 13 arrive meanwhile; only the newest is kept.
  ASSERT_TRUE(recorder.AwaitFirstWrite());
  run(8);
  recorder.Release();
  // No step since the last sample: End adds none.
  ASSERT_TRUE((*sess)->Close().ok());
  std::vector<coord::TaskMetrics> got = recorder.values();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].global_step, 5);
  const coord::TaskMetrics& last = got[1];
  EXPECT_EQ(last.task, "worker:1");
  EXPECT_EQ(last.global_step, 13);
  EXPECT_EQ(last.last_step, 100);
  // 4 local steps (and 4 global steps) per simulated second.
  EXPECT_DOUBLE_EQ(last.examples_per_sec, 40);
  EXPECT_DOUBLE_EQ(last.global_steps_per_sec, 4);
  EXPECT_EQ(last.time_unix_ms,
            absl::ToUnixMillis(absl::FromUnixSeconds(1'700'000'000) +
                               absl::Seconds(3)));
  for (const std::string& k : recorder.keys()) {
    EXPECT_EQ(k, "cohort/metrics/worker:1");
  }
}

TEST(MetricsPublisherHookTest, BadOptionsAreNamed) {
  MetricsPublisherOptions o;
  EXPECT_EQ(MetricsPublisherHook::Create(o).status().message(),
            "MetricsPublisherHook needs the task it publishes for");
  o.task = "worker:0";
  EXPECT_EQ(MetricsPublisherHook::Create(o).status().message(),
            "MetricsPublisherHook needs a store to put its metrics into");
  o.put = [](const std::string&, const std::string&) {
    return absl::OkStatus();
  };
  o.interval = absl::ZeroDuration();
  EXPECT_EQ(MetricsPublisherHook::Create(o).status().message(),
            "MetricsPublisherHook: interval must be > 0, got 0");
  FakeEnv env;
  EXPECT_TRUE(absl::IsNotFound(MetricsPutFromEnvironment(&env).status()));
}

}  // namespace
}  // namespace cohort::training
