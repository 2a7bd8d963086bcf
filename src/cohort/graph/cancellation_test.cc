#include "cohort/graph/cancellation.h"

#include <thread>

#include "gtest/gtest.h"

namespace cohort {
namespace {

TEST(CancellationManagerTest, RunsCallbacksOnceAndRefusesLateOnes) {
  CancellationManager cm;
  int runs = 0;
  auto t1 = cm.GetCancellationToken();
  auto t2 = cm.GetCancellationToken();
  ASSERT_TRUE(cm.RegisterCallback(t1, [&] { ++runs; }));
  ASSERT_TRUE(cm.RegisterCallback(t2, [&] { runs += 10; }));
  EXPECT_TRUE(cm.DeregisterCallback(t2));
  EXPECT_FALSE(cm.IsCancelled());
  cm.StartCancel();
  cm.StartCancel();
  EXPECT_TRUE(cm.IsCancelled());
  EXPECT_EQ(runs, 1);
  EXPECT_FALSE(cm.RegisterCallback(cm.GetCancellationToken(), [&] { ++runs; }));
  EXPECT_FALSE(cm.DeregisterCallback(t1));
  EXPECT_EQ(runs, 1);
}

TEST(CancellationManagerTest, DeregisterWaitsForARunningCallback) {
  CancellationManager cm;
  auto token = cm.GetCancellationToken();
  absl::Notification started, release;
  bool finished = false;
  ASSERT_TRUE(cm.RegisterCallback(token, [&] {
    started.Notify();
    release.WaitForNotification();
    finished = true;
  }));
  std::thread canceller([&] { cm.StartCancel(); });
  started.WaitForNotification();
  std::thread releaser([&] { release.Notify(); });
  EXPECT_FALSE(cm.DeregisterCallback(token));
  EXPECT_TRUE(finished);
  canceller.join();
  releaser.join();
}

}  // namespace
}  // namespace cohort
