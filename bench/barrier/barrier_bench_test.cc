// The barrier suite's AllGather content check: what makes a gang with a
// wrong gather fail instead of reporting its time.
#include "bench/barrier/barrier_bench.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort::bench {
namespace {

using ::testing::HasSubstr;

std::vector<std::string> InOrder(int world) {
  std::vector<std::string> all;
  for (int id = 0; id < world; ++id) all.push_back(GatherMessage(id));
  return all;
}

TEST(GatherMessageTest, SixtyFourBytesNamingThePartition) {
  EXPECT_EQ(GatherMessage(3).size(), 64u);
  EXPECT_EQ(GatherMessage(3).substr(0, 12), "partition 3 ");
  EXPECT_NE(GatherMessage(1), GatherMessage(10));
}

TEST(CheckGatheredTest, EveryMessageInPartitionOrderPasses) {
  EXPECT_TRUE(CheckGathered({InOrder(4), InOrder(4)}, 4).ok());
  EXPECT_TRUE(CheckGathered({}, 4).ok());
}

TEST(CheckGatheredTest, SwappedMessagesFail) {
  std::vector<std::string> swapped = InOrder(3);
  std::swap(swapped[1], swapped[2]);
  absl::Status s = CheckGathered({InOrder(3), swapped}, 3);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("AllGather call 1: slot 1 holds "
                                     "\"partition 2 "));
}

TEST(CheckGatheredTest, RepeatedMessageFails) {
  std::vector<std::string> repeated = InOrder(2);
  repeated[1] = repeated[0];
  absl::Status s = CheckGathered({repeated}, 2);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("slot 1"));
}

TEST(CheckGatheredTest, MissingOrExtraMessageFails) {
  std::vector<std::string> short_one = InOrder(4);
  short_one.pop_back();
  absl::Status s = CheckGathered({InOrder(4), InOrder(4), short_one}, 4);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("AllGather call 2 returned 3 messages "
                                     "in a gang of 4"));
  EXPECT_EQ(CheckGathered({InOrder(5)}, 4).code(), absl::StatusCode::kDataLoss);
}

TEST(CheckGatheredTest, TruncatedMessageFails) {
  std::vector<std::string> cut = InOrder(2);
  cut[0].resize(63);
  EXPECT_EQ(CheckGathered({cut}, 2).code(), absl::StatusCode::kDataLoss);
}

}  // namespace
}  // namespace cohort::bench
