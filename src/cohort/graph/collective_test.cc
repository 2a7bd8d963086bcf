// CollectiveGroups on its own: resolution per key, a failed resolution not
// remembered, one resolver per task.
#include "cohort/graph/collective.h"

#include <atomic>
#include <memory>
#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort {
namespace {

using ::testing::HasSubstr;

// A group that only answers its size.
class FakeGroup : public CollectiveGroups::Group {
 public:
  explicit FakeGroup(int size) : size_(size) {}
  int size() const override { return size_; }
  int rank() const override { return 0; }
  std::string transport() const override { return "fake"; }
  absl::Status AllReduce(Tensor*, bool, int64_t, absl::Time) override {
    return absl::OkStatus();
  }
  absl::Status Broadcast(Tensor*, bool, int64_t, absl::Time) override {
    return absl::OkStatus();
  }
  absl::Status AllGather(const Tensor&, Tensor*, int64_t, absl::Time) override {
    return absl::OkStatus();
  }

 private:
  const int size_;
};

absl::Time Soon() { return absl::Now() + absl::Seconds(30); }

// Key 1's resolution cannot finish before key 2's has started: with one lock
// over every resolution this would wait out the deadline.
TEST(CollectiveGroupsTest, KeysResolveIndependently) {
  CollectiveGroups groups;
  absl::Notification key2_started;
  ASSERT_TRUE(
      groups
          .SetResolver(
              "leader",
              [&](int64_t key, int size, const std::string&,
                  absl::Time deadline)
                  -> absl::StatusOr<std::shared_ptr<CollectiveGroups::Group>> {
                if (key == 1) {
                  if (!key2_started.WaitForNotificationWithDeadline(deadline)) {
                    return absl::DeadlineExceededError("key 1");
                  }
                } else {
                  key2_started.Notify();
                }
                return std::make_shared<FakeGroup>(size);
              })
          .ok());
  absl::StatusOr<std::shared_ptr<CollectiveGroups::Group>> one;
  std::thread first([&] { one = groups.FindOrResolve(1, 2, "auto", Soon()); });
  auto two = groups.FindOrResolve(2, 3, "auto", Soon());
  first.join();
  ASSERT_TRUE(one.ok()) << one.status();
  ASSERT_TRUE(two.ok()) << two.status();
  EXPECT_EQ((*one)->size(), 2);
  EXPECT_EQ((*two)->size(), 3);
}

// A second op of a key being resolved waits for that resolution (here past
// its own deadline: the first is held) rather than resolving again; once the
// first is done, the group is found and the resolver ran once.
TEST(CollectiveGroupsTest, ASecondOpOfTheKeyWaitsForTheFirstResolution) {
  CollectiveGroups groups;
  absl::Notification entered, release;
  std::atomic<int> calls{0};
  ASSERT_TRUE(
      groups
          .SetResolver(
              "leader",
              [&](int64_t, int size, const std::string&, absl::Time)
                  -> absl::StatusOr<std::shared_ptr<CollectiveGroups::Group>> {
                ++calls;
                entered.Notify();
                release.WaitForNotification();
                return std::make_shared<FakeGroup>(size);
              })
          .ok());
  absl::StatusOr<std::shared_ptr<CollectiveGroups::Group>> a;
  std::thread first([&] { a = groups.FindOrResolve(5, 2, "auto", Soon()); });
  entered.WaitForNotification();
  auto waiting =
      groups.FindOrResolve(5, 2, "auto", absl::Now() + absl::Milliseconds(50));
  EXPECT_EQ(waiting.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(waiting.status().message(),
              HasSubstr("another op of this task is still forming collective "
                        "group 5"));
  release.Notify();
  first.join();
  ASSERT_TRUE(a.ok()) << a.status();
  auto b = groups.FindOrResolve(5, 2, "auto", Soon());
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(a->get(), b->get());
  EXPECT_EQ(calls.load(), 1);
}

TEST(CollectiveGroupsTest, AFailedResolutionIsNotRemembered) {
  CollectiveGroups groups;
  int calls = 0;
  ASSERT_TRUE(
      groups
          .SetResolver(
              "leader",
              [&](int64_t, int size, const std::string&, absl::Time)
                  -> absl::StatusOr<std::shared_ptr<CollectiveGroups::Group>> {
                if (++calls == 1) return absl::UnavailableError("not yet");
                return std::make_shared<FakeGroup>(size);
              })
          .ok());
  EXPECT_TRUE(
      absl::IsUnavailable(groups.FindOrResolve(7, 2, "auto", Soon()).status()));
  auto again = groups.FindOrResolve(7, 2, "auto", Soon());
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(calls, 2);
  // Found now without the resolver.
  EXPECT_TRUE(groups.Find(7).ok());
}

TEST(CollectiveGroupsTest, OneLeaderPerTask) {
  CollectiveGroups groups;
  auto resolver = [](int64_t, int size, const std::string&, absl::Time)
      -> absl::StatusOr<std::shared_ptr<CollectiveGroups::Group>> {
    return std::make_shared<FakeGroup>(size);
  };
  ASSERT_TRUE(groups.SetResolver("/job:chief/replica:0/task:0", resolver).ok());
  EXPECT_TRUE(groups.SetResolver("/job:chief/replica:0/task:0", resolver).ok());
  absl::Status other =
      groups.SetResolver("/job:worker/replica:0/task:0", resolver);
  EXPECT_EQ(other.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(other.message(),
              HasSubstr("formed through the group leader "
                        "/job:chief/replica:0/task:0; a session now names "
                        "/job:worker/replica:0/task:0"));
}

TEST(CollectiveGroupsTest, WithoutAResolverAnUnknownKeyNamesTheKnownOnes) {
  CollectiveGroups groups;
  ASSERT_TRUE(groups.Add(3, std::make_shared<FakeGroup>(2)).ok());
  auto missing = groups.FindOrResolve(4, 2, "auto", Soon());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(missing.status().message(),
              HasSubstr("no collective group with group_key 4 in this task "
                        "(registered: 3)"));
}

}  // namespace
}  // namespace cohort
