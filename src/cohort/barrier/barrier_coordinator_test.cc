// Coordinator unit tests on a fake clock (Spark's BarrierCoordinatorSuite and
// the coordinator-side rules of BarrierTaskContextSuite).
#include "cohort/barrier/barrier_coordinator.h"

#include <memory>
#include <optional>

#include "absl/synchronization/mutex.h"
#include "cohort/base/fake_env.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort::barrier {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Collects the answer of one Sync.
class Answer {
 public:
  SyncDone Callback() {
    return [this](absl::StatusOr<SyncResult> r) {
      absl::MutexLock lock(&mu_);
      EXPECT_FALSE(result_.has_value()) << "done called twice";
      result_ = std::move(r);
    };
  }
  bool ready() {
    absl::MutexLock lock(&mu_);
    return result_.has_value();
  }
  // Waits (real time, bounded) for the answer; the timer thread may give it.
  absl::StatusOr<SyncResult> Wait() {
    absl::MutexLock lock(&mu_);
    auto has = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return result_.has_value();
    };
    if (!mu_.AwaitWithTimeout(absl::Condition(&has), absl::Seconds(10))) {
      return absl::DeadlineExceededError("test: no answer within 10 s");
    }
    return *result_;
  }

 private:
  absl::Mutex mu_;
  std::optional<absl::StatusOr<SyncResult>> result_ ABSL_GUARDED_BY(mu_);
};

SyncRequest Req(int num_tasks, int partition, int64_t epoch,
                SyncMethod method = SyncMethod::kBarrier,
                std::string message = "", int attempt = 0) {
  SyncRequest r;
  r.num_tasks = num_tasks;
  r.stage_id = 0;
  r.stage_attempt = attempt;
  r.task_attempt_id = partition;
  r.barrier_epoch = epoch;
  r.partition_id = partition;
  r.message = std::move(message);
  r.method = method;
  return r;
}

class BarrierCoordinatorTest : public ::testing::Test {
 protected:
  void Send(const SyncRequest& r, Answer& a) {
    coordinator_->Sync(coordinator_->NewRequestId(), r, a.Callback());
  }
  void Open(int num_tasks, int attempt = 0) {
    ASSERT_TRUE(coordinator_->OpenGang(0, attempt, num_tasks).ok());
  }
  GangSnapshot Snap(int attempt = 0) {
    auto s = coordinator_->Snapshot(0, attempt);
    EXPECT_TRUE(s.has_value());
    return s.value_or(GangSnapshot{});
  }

  FakeEnv env_;
  std::unique_ptr<BarrierCoordinator> coordinator_ =
      std::make_unique<BarrierCoordinator>(&env_, absl::Seconds(5));
};

// Spark #14: one task, epoch 0 -> epoch 1, clean state.
TEST_F(BarrierCoordinatorTest, OneTaskAdvancesEpoch) {
  Open(1);
  Answer a;
  Send(Req(1, 0, 0), a);
  ASSERT_TRUE(a.ready());
  EXPECT_TRUE(a.Wait().ok());
  GangSnapshot s = Snap();
  EXPECT_EQ(s.epoch, 1);
  EXPECT_TRUE(s.waiting.empty());
  EXPECT_TRUE(s.failure.ok());
}

// Spark #15: three tasks; the epoch advances only when all three arrive.
TEST_F(BarrierCoordinatorTest, ThreeTasksAdvanceTogether) {
  Open(3);
  Answer a0, a1, a2;
  Send(Req(3, 0, 0), a0);
  Send(Req(3, 2, 0), a2);
  EXPECT_FALSE(a0.ready());
  EXPECT_FALSE(a2.ready());
  EXPECT_EQ(Snap().epoch, 0);
  EXPECT_THAT(Snap().waiting, ElementsAre(0, 2));
  Send(Req(3, 1, 0), a1);
  EXPECT_TRUE(a0.Wait().ok());
  EXPECT_TRUE(a1.Wait().ok());
  EXPECT_TRUE(a2.Wait().ok());
  EXPECT_EQ(Snap().epoch, 1);
  EXPECT_TRUE(Snap().waiting.empty());
}

// Spark #16: a request with epoch -1 fails with "already finished".
TEST_F(BarrierCoordinatorTest, EpochMinusOneFails) {
  Open(1);
  Answer a;
  Send(Req(1, 0, -1), a);
  absl::StatusOr<SyncResult> r = a.Wait();
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(r.status().message(),
              HasSubstr("with barrier epoch -1 has already finished. Maybe "
                        "task 0 is not properly killed."));
}

// Spark #17: after a completed sync, epoch 0 is stale; only that requester
// fails and the gang keeps working.
TEST_F(BarrierCoordinatorTest, StaleEpochFailsOnlyThatRequester) {
  Open(2);
  Answer first0, first1;
  Send(Req(2, 0, 0), first0);
  Send(Req(2, 1, 0), first1);
  ASSERT_TRUE(first0.Wait().ok());
  Answer waiting, stale;
  Send(Req(2, 0, 1), waiting);
  Send(Req(2, 1, 0), stale);
  EXPECT_EQ(stale.Wait().status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(stale.Wait().status().message(),
              HasSubstr("Stage 0 (Attempt 0) with barrier epoch 0 has already "
                        "finished. Maybe task 1 is not properly killed."));
  EXPECT_FALSE(waiting.ready());
  Answer good;
  Send(Req(2, 1, 1), good);
  EXPECT_TRUE(waiting.Wait().ok());
  EXPECT_TRUE(good.Wait().ok());
  EXPECT_EQ(Snap().epoch, 2);
}

// Spark #2: allGather results are ordered by partition id, not arrival.
TEST_F(BarrierCoordinatorTest, AllGatherOrderedByPartition) {
  Open(4);
  Answer a[4];
  for (int p : {3, 1, 0, 2}) {
    Send(Req(4, p, 0, SyncMethod::kAllGather, std::to_string(p)), a[p]);
  }
  for (int p = 0; p < 4; ++p) {
    absl::StatusOr<SyncResult> r = a[p].Wait();
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_THAT(*r, ElementsAre("0", "1", "2", "3"));
  }
}

// Spark #12 (SPARK-40932): a later barrier does not change an earlier
// allGather's result, and the barrier's own result has no stale messages.
TEST_F(BarrierCoordinatorTest, AllGatherResultIsACopy) {
  Open(2);
  Answer g0, g1;
  Send(Req(2, 0, 0, SyncMethod::kAllGather, "0"), g0);
  Send(Req(2, 1, 0, SyncMethod::kAllGather, "1"), g1);
  absl::StatusOr<SyncResult> gathered = g0.Wait();
  ASSERT_TRUE(gathered.ok());
  Answer b0, b1;
  Send(Req(2, 0, 1), b0);
  Send(Req(2, 1, 1), b1);
  absl::StatusOr<SyncResult> barrier = b0.Wait();
  ASSERT_TRUE(barrier.ok());
  EXPECT_THAT(*barrier, ElementsAre("", ""));
  EXPECT_THAT(*gathered, ElementsAre("0", "1"));
  EXPECT_THAT(*g1.Wait(), ElementsAre("0", "1"));
}

// Spark #3: mixing BARRIER and ALL_GATHER in one sync fails every pending
// requester and clears the state, so late requests fail too.
TEST_F(BarrierCoordinatorTest, MixedMethodsFailEveryone) {
  Open(3);
  Answer a0, a1, late;
  Send(Req(3, 0, 0, SyncMethod::kBarrier), a0);
  Send(Req(3, 1, 0, SyncMethod::kAllGather, "x"), a1);
  for (Answer* a : {&a0, &a1}) {
    absl::StatusOr<SyncResult> r = a->Wait();
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(r.status().message(),
                HasSubstr("Different barrier sync types found"));
  }
  Send(Req(3, 2, 0, SyncMethod::kAllGather, "y"), late);
  EXPECT_EQ(late.Wait().status().code(), absl::StatusCode::kAborted);
  EXPECT_THAT(late.Wait().status().message(),
              HasSubstr("Different barrier sync types found"));
  EXPECT_EQ(Snap().epoch, -1);
}

TEST_F(BarrierCoordinatorTest, NumTasksMustMatch) {
  Open(2);
  Answer a0, a1;
  Send(Req(2, 0, 0), a0);
  Send(Req(3, 1, 0), a1);
  EXPECT_EQ(a1.Wait().status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(a1.Wait().status().message(), HasSubstr("Number of tasks"));
  EXPECT_FALSE(a0.ready());  // only the mismatching requester fails
  coordinator_.reset();      // answers a0 before it goes out of scope
}

TEST_F(BarrierCoordinatorTest, PartitionOutOfRangeFails) {
  Open(2);
  Answer a;
  Send(Req(2, 2, 0), a);
  EXPECT_EQ(a.Wait().status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(a.Wait().status().message(), HasSubstr("partition id 2"));
}

// Spark #6/#7/#18: the first request starts the timer; on expiry every
// pending requester fails with Spark's message plus the missing partitions,
// and the state is cleared so a late request fails.
TEST_F(BarrierCoordinatorTest, TimeoutFailsPendingAndNamesMissingPartitions) {
  coordinator_ = std::make_unique<BarrierCoordinator>(&env_, absl::Seconds(2));
  Open(3);
  Answer a0, a2;
  const absl::Time deadline = env_.Now() + absl::Seconds(2);
  Send(Req(3, 0, 0), a0);
  env_.AdvanceTime(absl::Milliseconds(1500));
  Send(Req(3, 2, 0), a2);
  env_.AdvanceTime(absl::Milliseconds(400));  // 1.9 s after the first
  // The timer thread is parked on the first request's deadline, which has
  // not passed: nobody may have been failed yet.
  env_.BlockUntilAwaiting(deadline);
  EXPECT_FALSE(a0.ready());
  env_.AdvanceTime(absl::Milliseconds(200));
  for (Answer* a : {&a0, &a2}) {
    absl::StatusOr<SyncResult> r = a->Wait();
    EXPECT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded);
    EXPECT_THAT(r.status().message(),
                HasSubstr("The coordinator didn't get all barrier sync "
                          "requests for barrier epoch 0 from Stage 0 "
                          "(Attempt 0) within 2 second(s)."));
    EXPECT_THAT(r.status().message(),
                HasSubstr("Partitions that did not arrive: [1] of 3"));
  }
  Answer late;
  Send(Req(3, 1, 0), late);
  EXPECT_EQ(late.Wait().status().code(), absl::StatusCode::kAborted);
  EXPECT_THAT(late.Wait().status().message(),
              HasSubstr("didn't get all barrier sync requests"));
}

// The timer covers each sync from its first request, not the whole job.
TEST_F(BarrierCoordinatorTest, TimerRestartsForEachSync) {
  coordinator_ = std::make_unique<BarrierCoordinator>(&env_, absl::Seconds(2));
  Open(2);
  for (int epoch = 0; epoch < 3; ++epoch) {
    Answer a0, a1;
    Send(Req(2, 0, epoch), a0);
    env_.AdvanceTime(absl::Milliseconds(1500));
    Send(Req(2, 1, epoch), a1);
    ASSERT_TRUE(a0.Wait().ok()) << "epoch " << epoch;
    env_.AdvanceTime(absl::Milliseconds(1500));
  }
  EXPECT_EQ(Snap().epoch, 3);
}

// A sync that starts while the timer still waits for an earlier sync's
// deadline times out at its own deadline: the earlier entry fails nothing
// and the timer then waits for exactly the new deadline.
TEST_F(BarrierCoordinatorTest, ALaterSyncTimesOutAtItsOwnDeadline) {
  coordinator_ = std::make_unique<BarrierCoordinator>(&env_, absl::Seconds(2));
  Open(2);
  const absl::Time start = env_.Now();
  Answer a0, a1;
  Send(Req(2, 0, 0), a0);
  env_.BlockUntilAwaiting(start + absl::Seconds(2));
  Send(Req(2, 1, 0), a1);
  ASSERT_TRUE(a0.Wait().ok());
  env_.AdvanceTime(absl::Milliseconds(1500));
  Answer b0;
  Send(Req(2, 0, 1), b0);  // deadline start + 3.5 s
  const absl::Time deadline = start + absl::Milliseconds(3500);
  // Past the first sync's deadline: its entry fires and re-arms.
  env_.AdvanceTime(absl::Seconds(1));
  env_.BlockUntilAwaiting(deadline);
  EXPECT_FALSE(b0.ready());
  EXPECT_EQ(Snap().epoch, 1);
  env_.AdvanceTime(deadline - env_.Now());
  EXPECT_EQ(b0.Wait().status().code(), absl::StatusCode::kDeadlineExceeded);
}

// A withdrawn request (its task was killed) no longer counts as arrived.
TEST_F(BarrierCoordinatorTest, CancelWithdrawsRequest) {
  Open(2);
  Answer a0, a1, a0again;
  const uint64_t id0 = coordinator_->NewRequestId();
  coordinator_->Sync(id0, Req(2, 0, 0), a0.Callback());
  coordinator_->Cancel(id0);
  EXPECT_EQ(a0.Wait().status().code(), absl::StatusCode::kCancelled);
  coordinator_->Cancel(id0);  // no-op the second time
  Send(Req(2, 1, 0), a1);
  EXPECT_FALSE(a1.ready());
  EXPECT_THAT(Snap().waiting, ElementsAre(1));
  Send(Req(2, 0, 0), a0again);
  EXPECT_TRUE(a1.Wait().ok());
  EXPECT_TRUE(a0again.Wait().ok());
}

TEST_F(BarrierCoordinatorTest, ClearStageAbortsPendingAndLaterRequests) {
  Open(2);
  Answer a0, late;
  Send(Req(2, 0, 0), a0);
  coordinator_->ClearStage(0, 0, "task worker:1 exited with code 3");
  EXPECT_EQ(a0.Wait().status().code(), absl::StatusCode::kAborted);
  EXPECT_THAT(a0.Wait().status().message(),
              HasSubstr("task worker:1 exited with code 3"));
  Send(Req(2, 1, 0), late);
  EXPECT_EQ(late.Wait().status().code(), absl::StatusCode::kAborted);
}

// Attempts are separate gangs: a new attempt starts at epoch 0 even after the
// old one failed.
TEST_F(BarrierCoordinatorTest, AttemptsAreIndependent) {
  Open(2);
  Open(2, /*attempt=*/1);
  coordinator_->ClearStage(0, 0, "retrying");
  Answer a0, a1;
  Send(Req(2, 0, 0, SyncMethod::kBarrier, "", /*attempt=*/1), a0);
  Send(Req(2, 1, 0, SyncMethod::kBarrier, "", /*attempt=*/1), a1);
  EXPECT_TRUE(a0.Wait().ok());
  EXPECT_EQ(Snap(1).epoch, 1);
  EXPECT_EQ(Snap(0).epoch, -1);
}

TEST_F(BarrierCoordinatorTest, SecondRequestFromSamePartitionFails) {
  Open(2);
  Answer a, b;
  Send(Req(2, 0, 0), a);
  Send(Req(2, 0, 0), b);
  EXPECT_EQ(b.Wait().status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_FALSE(a.ready());
  coordinator_.reset();  // answers `a` before it goes out of scope
}

TEST_F(BarrierCoordinatorTest, ShutdownFailsPending) {
  Open(2);
  Answer a;
  Send(Req(2, 0, 0), a);
  coordinator_.reset();
  EXPECT_EQ(a.Wait().status().code(), absl::StatusCode::kUnavailable);
}

// Nothing a peer sends creates state: a request for a gang nobody opened
// (here announcing 2^31-1 tasks, the launcher-killing frame of issue 9) is
// refused without allocating anything for it.
TEST_F(BarrierCoordinatorTest, RequestForAnUnopenedGangIsNotFound) {
  Open(2);
  Answer a;
  SyncRequest hostile = Req(2147483647, 0, 0);
  hostile.stage_attempt = 7;
  Send(hostile, a);
  EXPECT_EQ(a.Wait().status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(a.Wait().status().message(), HasSubstr("Stage 0 (Attempt 7)"));
  EXPECT_FALSE(coordinator_->Snapshot(0, 7).has_value());
  // The announced size is checked against the open gang's, not believed.
  Answer b;
  Send(Req(2147483647, 0, 0), b);
  EXPECT_EQ(b.Wait().status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Snap().num_tasks, 2);
}

TEST_F(BarrierCoordinatorTest, OpenGangRefusesBadSizesAndDuplicates) {
  EXPECT_TRUE(absl::IsInvalidArgument(coordinator_->OpenGang(0, 0, 0)));
  EXPECT_TRUE(absl::IsInvalidArgument(coordinator_->OpenGang(0, 0, -3)));
  Open(2);
  EXPECT_TRUE(absl::IsAlreadyExists(coordinator_->OpenGang(0, 0, 2)));
}

TEST_F(BarrierCoordinatorTest, CloseGangAbortsPendingAndForgetsTheGang) {
  Open(2);
  Answer a0, late;
  Send(Req(2, 0, 0), a0);
  coordinator_->CloseGang(0, 0, "attempt 0 ended");
  EXPECT_EQ(a0.Wait().status().code(), absl::StatusCode::kAborted);
  EXPECT_THAT(a0.Wait().status().message(), HasSubstr("attempt 0 ended"));
  EXPECT_FALSE(coordinator_->Snapshot(0, 0).has_value());
  Send(Req(2, 1, 0), late);
  EXPECT_EQ(late.Wait().status().code(), absl::StatusCode::kNotFound);
  coordinator_->CloseGang(0, 0, "again");  // no-op
  // The same attempt can be opened afresh.
  Open(2);
  EXPECT_EQ(Snap().epoch, 0);
}

TEST_F(BarrierCoordinatorTest, MessagesOfOneSyncAreCapped) {
  coordinator_ = std::make_unique<BarrierCoordinator>(&env_, absl::Seconds(5),
                                                      /*max_sync_bytes=*/10);
  Open(3);
  Answer a0, a1, a1again, a2;
  Send(Req(3, 0, 0, SyncMethod::kAllGather, "123456"), a0);
  Send(Req(3, 1, 0, SyncMethod::kAllGather, "12345"), a1);
  EXPECT_EQ(a1.Wait().status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(a1.Wait().status().message(),
              HasSubstr("would exceed its cap of 10 bytes"));
  EXPECT_FALSE(a0.ready()) << "only the requester over the cap fails";
  Send(Req(3, 1, 0, SyncMethod::kAllGather, "1234"), a1again);
  Send(Req(3, 2, 0, SyncMethod::kAllGather, ""), a2);
  ASSERT_TRUE(a0.Wait().ok());
  EXPECT_THAT(*a0.Wait(), ElementsAre("123456", "1234", ""));
}

TEST_F(BarrierCoordinatorTest, CancelReturnsTheWithdrawnMessageBytes) {
  coordinator_ = std::make_unique<BarrierCoordinator>(&env_, absl::Seconds(5),
                                                      /*max_sync_bytes=*/10);
  Open(2);
  Answer a0, a0again, a1;
  const uint64_t id0 = coordinator_->NewRequestId();
  coordinator_->Sync(id0, Req(2, 0, 0, SyncMethod::kAllGather, "12345678"),
                     a0.Callback());
  coordinator_->Cancel(id0);
  EXPECT_EQ(a0.Wait().status().code(), absl::StatusCode::kCancelled);
  Send(Req(2, 0, 0, SyncMethod::kAllGather, "12345"), a0again);
  Send(Req(2, 1, 0, SyncMethod::kAllGather, "12345"), a1);
  EXPECT_TRUE(a1.Wait().ok()) << a1.Wait().status();
}

}  // namespace
}  // namespace cohort::barrier
