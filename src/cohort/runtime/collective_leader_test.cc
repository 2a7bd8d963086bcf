// The collective group leader on its own: calls in a forced order, deadlines
// on a fake clock.
#include "cohort/runtime/collective_leader.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/notification.h"
#include "cohort/base/fake_env.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort::runtime {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr char kLeader[] = "/job:chief/replica:0/task:0";
constexpr char kChief[] = "/job:chief/replica:0/task:0";
constexpr char kWorker0[] = "/job:worker/replica:0/task:0";
constexpr char kWorker2[] = "/job:worker/replica:0/task:2";
constexpr char kWorker10[] = "/job:worker/replica:0/task:10";

// One call in flight: its response and, once answered, its status.
template <typename Response>
struct Pending {
  Response response;
  absl::Status status;
  absl::Notification answered;
  StatusCallback Done() {
    return [this](const absl::Status& s) {
      status = s;
      answered.Notify();
    };
  }
};
using GroupCall = Pending<CompleteGroupResponse>;
using RoundCall = Pending<CompleteInstanceResponse>;

class CollectiveLeaderTest : public ::testing::Test {
 protected:
  CollectiveLeaderTest() : leader_(kLeader, &env_, nullptr) {}

  std::unique_ptr<GroupCall> Join(
      int64_t key, int size, const std::string& task, uint64_t incarnation = 1,
      absl::Time deadline = absl::InfiniteFuture()) {
    CompleteGroupRequest r;
    r.set_group_key(key);
    r.set_group_size(size);
    r.set_task(task);
    r.set_incarnation(incarnation);
    auto call = std::make_unique<GroupCall>();
    leader_.CompleteGroup(deadline, r, &call->response, call->Done());
    return call;
  }

  std::unique_ptr<RoundCall> Send(
      int64_t key, int64_t generation, int64_t round, const std::string& task,
      const std::string& payload,
      absl::Time deadline = absl::InfiniteFuture()) {
    CompleteInstanceRequest r;
    r.set_group_key(key);
    r.set_generation(generation);
    r.set_round(round);
    r.set_task(task);
    r.set_payload(payload);
    auto call = std::make_unique<RoundCall>();
    leader_.CompleteInstance(deadline, r, &call->response, call->Done());
    return call;
  }

  // Forms group `key` of chief:0 and worker:0.
  void FormPair(int64_t key) {
    auto a = Join(key, 2, kChief);
    auto b = Join(key, 2, kWorker0);
    ASSERT_TRUE(a->answered.HasBeenNotified());
    ASSERT_TRUE(a->status.ok()) << a->status;
    ASSERT_TRUE(b->status.ok()) << b->status;
  }

  FakeEnv env_;
  CollectiveLeader leader_;
};

TEST_F(CollectiveLeaderTest, AnswersEveryMemberInRankOrderOnceAllJoined) {
  // Joined out of order; rank order is job name, then task index as a number.
  auto w10 = Join(7, 4, kWorker10);
  auto w2 = Join(7, 4, kWorker2);
  auto w0 = Join(7, 4, kWorker0);
  EXPECT_FALSE(w10->answered.HasBeenNotified());
  EXPECT_FALSE(w0->answered.HasBeenNotified());
  auto chief = Join(7, 4, kChief);
  for (GroupCall* c : {w10.get(), w2.get(), w0.get(), chief.get()}) {
    ASSERT_TRUE(c->answered.HasBeenNotified());
    ASSERT_TRUE(c->status.ok()) << c->status;
    EXPECT_THAT(c->response.task(),
                ElementsAre(kChief, kWorker0, kWorker2, kWorker10));
    EXPECT_EQ(c->response.group_size(), 4);
    EXPECT_EQ(c->response.group_key(), 7);
  }
  // Asked again by a member (same incarnation): the same answer at once.
  auto again = Join(7, 4, kWorker2);
  ASSERT_TRUE(again->answered.HasBeenNotified());
  EXPECT_EQ(again->response.generation(), chief->response.generation());
  EXPECT_EQ(again->response.task_size(), 4);
}

TEST_F(CollectiveLeaderTest, DisagreementsAreRefusedNamingTheTasks) {
  auto chief = Join(1, 2, kChief);
  auto other_size = Join(1, 3, kWorker0);
  ASSERT_TRUE(other_size->answered.HasBeenNotified());
  EXPECT_EQ(other_size->status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(other_size->status.message(),
              HasSubstr("collective group 1: /job:worker/replica:0/task:0 "
                        "asked for group_size 3 but "
                        "/job:chief/replica:0/task:0 asked for 2"));
  auto w0 = Join(1, 2, kWorker0);
  ASSERT_TRUE(w0->status.ok()) << w0->status;
  auto third = Join(1, 2, kWorker2);
  EXPECT_EQ(third->status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(third->status.message(),
              HasSubstr("already has 2 members (/job:chief/replica:0/task:0, "
                        "/job:worker/replica:0/task:0); "
                        "/job:worker/replica:0/task:2 would be one more"));
}

TEST_F(CollectiveLeaderTest, BadRequestsAreRefusedWithoutState) {
  auto zero = Join(1, 0, kChief);
  EXPECT_EQ(zero->status.code(), absl::StatusCode::kInvalidArgument);
  auto huge = Join(1, CollectiveLeader::kMaxGroupSize + 1, kChief);
  EXPECT_EQ(huge->status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(huge->status.message(), HasSubstr("1 to 4096 members"));
  auto device = Join(1, 2, "/job:chief/replica:0/task:0/device:CPU:0");
  EXPECT_EQ(device->status.code(), absl::StatusCode::kInvalidArgument);
  auto junk = Join(1, 2, "chief0");
  EXPECT_EQ(junk->status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(junk->status.message(), HasSubstr("'chief0' is not a task"));
  // Another spelling of a member would take its slot: only the canonical one.
  auto short_form = Join(1, 2, "/job:chief/task:0");
  EXPECT_EQ(short_form->status.code(), absl::StatusCode::kInvalidArgument);
  auto long_name =
      Join(1, 2, "/job:" + std::string(300, 'a') + "/replica:0/task:0");
  EXPECT_EQ(long_name->status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(long_name->status.message(), HasSubstr("at most 256"));
  // None of them made a group: a pair still forms under key 1.
  FormPair(1);
  auto big = Send(1, 0, 0, kChief,
                  std::string(CollectiveLeader::kMaxPayloadBytes + 1, 'x'));
  EXPECT_EQ(big->status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(big->status.message(), HasSubstr("at most 4096"));
  auto stranger = Send(1, 0, 0, kWorker2, "x");
  EXPECT_EQ(stranger->status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(stranger->status.message(), HasSubstr("is not a member"));
}

TEST_F(CollectiveLeaderTest, TooManyGroupsIsResourceExhausted) {
  std::vector<std::unique_ptr<GroupCall>> waiting;
  for (int k = 0; k < CollectiveLeader::kMaxGroups; ++k) {
    waiting.push_back(Join(k, 2, kChief));
  }
  auto one_more = Join(CollectiveLeader::kMaxGroups, 2, kChief);
  EXPECT_EQ(one_more->status.code(), absl::StatusCode::kResourceExhausted);
  leader_.Stop(absl::CancelledError("test over"));
  for (auto& c : waiting) EXPECT_TRUE(absl::IsCancelled(c->status));
}

TEST_F(CollectiveLeaderTest, GroupDeadlineNamesWhoJoinedAndHowManyAreMissing) {
  const absl::Time start = env_.Now();
  auto chief = Join(3, 3, kChief, 1, start + absl::Seconds(10));
  auto w0 = Join(3, 3, kWorker0, 1, start + absl::Seconds(20));
  env_.BlockUntilAwaiting(start + absl::Seconds(10));
  env_.AdvanceTime(absl::Seconds(10));
  chief->answered.WaitForNotification();
  EXPECT_EQ(chief->status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(chief->status.message(),
              HasSubstr("collective group 3 (group_size 3) at the leader "
                        "/job:chief/replica:0/task:0: 2 of 3 members joined "
                        "by the deadline (/job:chief/replica:0/task:0, "
                        "/job:worker/replica:0/task:0), 1 missing"));
  // The chief stopped waiting, so it left the forming group.
  env_.BlockUntilAwaiting(start + absl::Seconds(20));
  env_.AdvanceTime(absl::Seconds(10));
  w0->answered.WaitForNotification();
  EXPECT_THAT(w0->status.message(),
              HasSubstr("1 of 3 members joined by the deadline "
                        "(/job:worker/replica:0/task:0), 2 missing"));
  // Nobody waits now: the group is forgotten, size and all.
  auto fresh = Join(3, 2, kWorker2);
  EXPECT_FALSE(fresh->answered.HasBeenNotified());
  // Answered before `fresh` goes (the leader outlives this body).
  leader_.Stop(absl::CancelledError("test over"));
  EXPECT_TRUE(absl::IsCancelled(fresh->status));
}

TEST_F(CollectiveLeaderTest, ACallWithoutADeadlineWaitsAtMostMaxWait) {
  auto chief = Join(5, 2, kChief);  // InfiniteFuture.
  env_.BlockUntilAwaiting(env_.Now() + CollectiveLeader::kMaxWait);
  env_.AdvanceTime(CollectiveLeader::kMaxWait);
  chief->answered.WaitForNotification();
  EXPECT_EQ(chief->status.code(), absl::StatusCode::kDeadlineExceeded);
}

TEST_F(CollectiveLeaderTest, ANewerCallOfAMemberReplacesItsOlderOne) {
  auto first = Join(6, 2, kChief);
  auto second = Join(6, 2, kChief);
  ASSERT_TRUE(first->answered.HasBeenNotified());
  EXPECT_EQ(first->status.code(), absl::StatusCode::kAborted);
  EXPECT_THAT(first->status.message(),
              HasSubstr("replaced by a newer call from "
                        "/job:chief/replica:0/task:0"));
  EXPECT_FALSE(second->answered.HasBeenNotified());
  auto w0 = Join(6, 2, kWorker0);
  ASSERT_TRUE(second->answered.HasBeenNotified());
  EXPECT_TRUE(second->status.ok()) << second->status;
}

// A round that a member's deadline ended is dropped whole: the next attempt
// must not complete against the old attempt's payload.
TEST_F(CollectiveLeaderTest, AnAbandonedRoundDoesNotPoisonTheNextAttempt) {
  FormPair(7);
  const absl::Time deadline = env_.Now() + absl::Seconds(3);
  auto stale = Send(7, 0, 0, kChief, "old", deadline);
  env_.BlockUntilAwaiting(deadline);
  env_.AdvanceTime(absl::Seconds(3));
  stale->answered.WaitForNotification();
  EXPECT_EQ(stale->status.code(), absl::StatusCode::kDeadlineExceeded);
  auto w = Send(7, 0, 0, kWorker0, "w");
  EXPECT_FALSE(w->answered.HasBeenNotified());
  auto c = Send(7, 0, 0, kChief, "new");
  ASSERT_TRUE(w->answered.HasBeenNotified());
  EXPECT_THAT(w->response.payload(), ElementsAre("new", "w"));
  EXPECT_THAT(c->response.payload(), ElementsAre("new", "w"));
}

TEST_F(CollectiveLeaderTest, OnlyTasksOfTheClusterMayAsk) {
  CollectiveLeader leader(kLeader, &env_, [] {
    return std::vector<std::string>{kChief, kWorker0};
  });
  CompleteGroupRequest r;
  r.set_group_key(1);
  r.set_group_size(2);
  r.set_task(kWorker2);
  GroupCall outsider;
  leader.CompleteGroup(absl::InfiniteFuture(), r, &outsider.response,
                       outsider.Done());
  EXPECT_EQ(outsider.status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(outsider.status.message(),
              HasSubstr("/job:worker/replica:0/task:2 is not a task of the "
                        "cluster"));
  r.set_task(kChief);
  r.set_group_size(3);
  GroupCall too_big;
  leader.CompleteGroup(absl::InfiniteFuture(), r, &too_big.response,
                       too_big.Done());
  EXPECT_EQ(too_big.status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(too_big.status.message(), HasSubstr("a group has 1 to 2"));
}

TEST_F(CollectiveLeaderTest, RoundsExchangePayloadsByRank) {
  FormPair(5);
  auto from_worker = Send(5, 0, 0, kWorker0, "w");
  EXPECT_FALSE(from_worker->answered.HasBeenNotified());
  auto from_chief = Send(5, 0, 0, kChief, "c");
  for (RoundCall* c : {from_worker.get(), from_chief.get()}) {
    ASSERT_TRUE(c->answered.HasBeenNotified());
    ASSERT_TRUE(c->status.ok()) << c->status;
    EXPECT_THAT(c->response.payload(), ElementsAre("c", "w"));
  }
  // The next round starts empty.
  auto next = Send(5, 0, 1, kChief, "c1");
  EXPECT_FALSE(next->answered.HasBeenNotified());
  auto next_w = Send(5, 0, 1, kWorker0, "w1");
  EXPECT_THAT(next->response.payload(), ElementsAre("c1", "w1"));
}

TEST_F(CollectiveLeaderTest, RoundDeadlineNamesTheMemberThatDidNotSend) {
  FormPair(5);
  const absl::Time deadline = env_.Now() + absl::Seconds(3);
  auto from_chief = Send(5, 0, 2, kChief, "c", deadline);
  env_.BlockUntilAwaiting(deadline);
  env_.AdvanceTime(absl::Seconds(3));
  from_chief->answered.WaitForNotification();
  EXPECT_EQ(from_chief->status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(from_chief->status.message(),
              HasSubstr("set-up round 2 at the leader "
                        "/job:chief/replica:0/task:0 still waits for "
                        "/job:worker/replica:0/task:0"));
}

TEST_F(CollectiveLeaderTest, ARestartedMemberFormsTheGroupAnew) {
  FormPair(9);
  auto waiting = Send(9, 0, 0, kChief, "c");
  // worker:0 comes back with a new incarnation.
  auto rejoin = Join(9, 2, kWorker0, /*incarnation=*/2);
  ASSERT_TRUE(waiting->answered.HasBeenNotified());
  EXPECT_EQ(waiting->status.code(), absl::StatusCode::kAborted);
  EXPECT_THAT(waiting->status.message(),
              HasSubstr("/job:worker/replica:0/task:0 restarted"));
  EXPECT_FALSE(rejoin->answered.HasBeenNotified());
  // A round of the old generation is refused.
  auto stale = Send(9, 0, 1, kChief, "c");
  EXPECT_EQ(stale->status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(stale->status.message(), HasSubstr("names generation 0"));
  auto chief = Join(9, 2, kChief);
  ASSERT_TRUE(rejoin->status.ok()) << rejoin->status;
  EXPECT_EQ(rejoin->response.generation(), 1);
  EXPECT_EQ(chief->response.generation(), 1);
}

TEST_F(CollectiveLeaderTest, StopAnswersWaitersAndLaterCalls) {
  auto chief = Join(4, 2, kChief);
  leader_.Stop(absl::UnavailableError("server chief:0 is stopping"));
  ASSERT_TRUE(chief->answered.HasBeenNotified());
  EXPECT_EQ(chief->status.message(), "server chief:0 is stopping");
  auto later = Join(4, 2, kWorker0);
  EXPECT_EQ(later->status.message(), "server chief:0 is stopping");
}

}  // namespace
}  // namespace cohort::runtime
