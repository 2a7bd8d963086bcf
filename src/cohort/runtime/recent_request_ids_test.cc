#include "cohort/runtime/recent_request_ids.h"

#include "absl/strings/match.h"
#include "cohort/worker.pb.h"
#include "gtest/gtest.h"

namespace cohort::runtime {
namespace {

RunGraphRequest Request(int64_t id) {
  RunGraphRequest r;
  r.set_graph_handle("g");
  r.set_step_id(7);
  r.set_request_id(id);
  return r;
}

TEST(RecentRequestIdsTest, ZeroIsNeverChecked) {
  RecentRequestIds ids(10);
  for (int i = 0; i < 5; ++i) {
    EXPECT_TRUE(ids.TrackUnique(0, "RunGraph (Worker)", Request(0)).ok());
  }
}

TEST(RecentRequestIdsTest, SecondSightingIsAbortedWithMethodAndRequest) {
  RecentRequestIds ids(10);
  ASSERT_TRUE(ids.TrackUnique(42, "RunGraph (Worker)", Request(42)).ok());
  absl::Status s = ids.TrackUnique(42, "RunGraph (Worker)", Request(42));
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(s.message(),
            "The same RunGraph (Worker) request was received twice. "
            "RunGraphRequest { graph_handle: \"g\" step_id: 7 request_id: "
            "42 }");
  // Still tracked after the refusal.
  EXPECT_EQ(ids.TrackUnique(42, "RunGraph (Worker)", Request(42)).code(),
            absl::StatusCode::kAborted);
}

TEST(RecentRequestIdsTest, FifoWindowEvictsOldestAndRepeatDoesNotRefresh) {
  RecentRequestIds ids(2);
  ASSERT_TRUE(ids.TrackUnique(1, "m", Request(1)).ok());
  ASSERT_TRUE(ids.TrackUnique(2, "m", Request(2)).ok());
  // Seeing 1 again does not move it to the back of the window...
  EXPECT_FALSE(ids.TrackUnique(1, "m", Request(1)).ok());
  ASSERT_TRUE(ids.TrackUnique(3, "m", Request(3)).ok());
  // ...so 3 evicted 1 (the oldest arrival), and 2 is still there.
  EXPECT_TRUE(ids.TrackUnique(1, "m", Request(1)).ok());
  EXPECT_FALSE(ids.TrackUnique(3, "m", Request(3)).ok());
}

TEST(RecentRequestIdsTest, ShardedWindowKeepsEveryRecentIdIncludingNegative) {
  RecentRequestIds ids(1000, 16);
  for (int64_t id = -500; id < 500; ++id) {
    if (id == 0) continue;
    ASSERT_TRUE(ids.TrackUnique(id, "m", Request(id)).ok()) << id;
  }
  for (int64_t id = -500; id < 500; ++id) {
    if (id == 0) continue;
    EXPECT_FALSE(ids.TrackUnique(id, "m", Request(id)).ok()) << id;
  }
}

TEST(RecentRequestIdsTest, LongFieldsAreCutAndTensorsLeftOut) {
  RecentRequestIds ids(10);
  RunGraphRequest r = Request(5);
  r.set_session_handle(std::string(4000, 'x'));
  // A large feed: the message never contains its bytes.
  r.add_send()->mutable_tensor()->set_tensor_content(std::string(1 << 20, 'z'));
  ASSERT_TRUE(ids.TrackUnique(5, "m", r).ok());
  absl::Status s = ids.TrackUnique(5, "m", r);
  EXPECT_LT(s.message().size(), 700u);
  EXPECT_TRUE(absl::StrContains(s.message(), "xxx..."));
  EXPECT_FALSE(absl::StrContains(s.message(), "zzz"));
  EXPECT_TRUE(absl::StrContains(s.message(), "request_id: 5"));
}

}  // namespace
}  // namespace cohort::runtime
