#include "cohort/base/backoff.h"

#include "gtest/gtest.h"

namespace cohort {
namespace {

TEST(BackoffTest, DoublesFromInitialUpToMax) {
  Backoff backoff(absl::Milliseconds(20), absl::Seconds(1));
  const int64_t expected_ms[] = {20, 40, 80, 160, 320, 640, 1000, 1000};
  for (int64_t ms : expected_ms) {
    EXPECT_EQ(backoff.current(), absl::Milliseconds(ms));
    EXPECT_EQ(backoff.Next(), absl::Milliseconds(ms));
  }
}

TEST(BackoffTest, ResetStartsOverAtInitial) {
  Backoff backoff(absl::Milliseconds(50), absl::Seconds(1));
  backoff.Next();
  backoff.Next();
  EXPECT_EQ(backoff.current(), absl::Milliseconds(200));
  backoff.Reset();
  EXPECT_EQ(backoff.Next(), absl::Milliseconds(50));
}

TEST(BackoffTest, JitterStaysWithinItsBandAndVaries) {
  Backoff backoff(absl::Seconds(1), absl::Seconds(1), /*jitter=*/0.5);
  absl::Duration lowest = absl::InfiniteDuration();
  absl::Duration highest = absl::ZeroDuration();
  for (int i = 0; i < 200; ++i) {
    const absl::Duration wait = backoff.Next();
    ASSERT_GE(wait, absl::Milliseconds(500));
    ASSERT_LE(wait, absl::Milliseconds(1500));
    lowest = std::min(lowest, wait);
    highest = std::max(highest, wait);
  }
  // 200 uniform draws all within 100 ms of each other has probability
  // (0.1)^199: jitter that does nothing fails here.
  EXPECT_GT(highest - lowest, absl::Milliseconds(100));
}

TEST(BackoffTest, NonsenseOptionsAreClamped) {
  Backoff backoff(absl::Seconds(2), absl::Seconds(1), /*jitter=*/7);
  // max below initial: the waits stay at initial; jitter 7 is 1, so a wait
  // is never negative.
  for (int i = 0; i < 50; ++i) {
    const absl::Duration wait = backoff.Next();
    EXPECT_GE(wait, absl::ZeroDuration());
    EXPECT_LE(wait, absl::Seconds(4));
    EXPECT_EQ(backoff.current(), absl::Seconds(2));
  }
}

}  // namespace
}  // namespace cohort
