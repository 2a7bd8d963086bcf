#include "cohort/base/deadline_timer.h"

#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "cohort/base/fake_env.h"
#include "gtest/gtest.h"

namespace cohort {
namespace {

// What the callbacks saw, in the order they ran.
struct Fired {
  absl::Mutex mu;
  std::vector<std::pair<int, absl::Time>> runs ABSL_GUARDED_BY(mu);

  void Add(int which, absl::Time at) {
    absl::MutexLock lock(&mu);
    runs.emplace_back(which, at);
  }
  std::vector<std::pair<int, absl::Time>> Get() {
    absl::MutexLock lock(&mu);
    return runs;
  }
};

TEST(DeadlineTimerTest, FiresAtTheExactInstantOfTheClock) {
  FakeEnv env;
  DeadlineTimer timer(&env);
  const absl::Time due = env.Now() + absl::Seconds(10);
  Fired fired;
  absl::Notification early_ran, done;
  timer.Schedule(due, [&] {
    fired.Add(1, env.Now());
    done.Notify();
  });
  // An entry one nanosecond before `due` wakes the timer at that instant,
  // so the timer itself must decide that `due` has not come: it runs the
  // early entry alone and parks again until `due`.
  timer.Schedule(due - absl::Nanoseconds(1), [&] {
    fired.Add(0, env.Now());
    early_ran.Notify();
  });
  env.BlockUntilAwaiting(due - absl::Nanoseconds(1));
  env.AdvanceTime(absl::Seconds(10) - absl::Nanoseconds(1));
  ASSERT_TRUE(early_ran.WaitForNotificationWithTimeout(absl::Seconds(10)));
  // Parked anew (an entry fired early would have left it waiting for
  // nothing, parked as well): the pass at due - 1ns is over.
  ASSERT_TRUE(env.BlockUntilParked(1));
  {
    const auto runs = fired.Get();
    ASSERT_EQ(runs.size(), 1u);
    EXPECT_EQ(runs[0].first, 0);
    EXPECT_EQ(runs[0].second, due - absl::Nanoseconds(1));
  }
  env.AdvanceTime(absl::Nanoseconds(1));
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  const auto runs = fired.Get();
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[1].first, 1);
  EXPECT_EQ(runs[1].second, due);
}

TEST(DeadlineTimerTest, AnEarlierEntryReplansTheWaitAndOrderIsByDeadline) {
  FakeEnv env;
  DeadlineTimer timer(&env);
  const absl::Time start = env.Now();
  Fired fired;
  absl::Notification both;
  timer.Schedule(start + absl::Seconds(20), [&] {
    fired.Add(2, env.Now());
    both.Notify();
  });
  env.BlockUntilAwaiting(start + absl::Seconds(20));
  timer.Schedule(start + absl::Seconds(5), [&] { fired.Add(1, env.Now()); });
  // The thread wakes and re-plans for the new, earlier deadline.
  env.BlockUntilAwaiting(start + absl::Seconds(5));
  env.AdvanceTime(absl::Seconds(30));
  ASSERT_TRUE(both.WaitForNotificationWithTimeout(absl::Seconds(10)));
  const auto runs = fired.Get();
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0].first, 1);
  EXPECT_EQ(runs[1].first, 2);
}

TEST(DeadlineTimerTest, CancelDropsACallbackThatHasNotRun) {
  FakeEnv env;
  DeadlineTimer timer(&env);
  const absl::Time due = env.Now() + absl::Seconds(1);
  Fired fired;
  absl::Notification sentinel;
  const uint64_t id = timer.Schedule(due, [&] { fired.Add(1, env.Now()); });
  EXPECT_NE(id, 0u);
  EXPECT_TRUE(timer.Cancel(id));
  EXPECT_FALSE(timer.Cancel(id));  // already gone
  // A later entry runs: every entry due before it has been handled.
  timer.Schedule(due + absl::Seconds(1), [&] {
    fired.Add(2, env.Now());
    sentinel.Notify();
  });
  env.AdvanceTime(absl::Seconds(5));
  ASSERT_TRUE(sentinel.WaitForNotificationWithTimeout(absl::Seconds(10)));
  const auto runs = fired.Get();
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].first, 2);
}

TEST(DeadlineTimerTest, ACallbackMayScheduleOnItsOwnTimer) {
  FakeEnv env;
  DeadlineTimer timer(&env);
  const absl::Time due = env.Now() + absl::Seconds(1);
  absl::Notification second;
  uint64_t first_id = 0;
  first_id = timer.Schedule(due, [&] {
    // Running callbacks are no longer cancellable...
    EXPECT_FALSE(timer.Cancel(first_id));
    // ...and may schedule more work without deadlocking the timer.
    timer.Schedule(due, [&] { second.Notify(); });
  });
  env.AdvanceTime(absl::Seconds(1));
  EXPECT_TRUE(second.WaitForNotificationWithTimeout(absl::Seconds(10)));
}

}  // namespace
}  // namespace cohort
