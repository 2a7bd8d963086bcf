#include "cohort/coord/coordination_service.h"

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "cohort/base/fake_env.h"
#include "cohort/coord/callback_slot_testing.h"
#include "cohort/coord/coordination_service_util.h"
#include "cohort/coordination.pb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort::coord {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

const TaskId kW0{"worker", 0};
const TaskId kW1{"worker", 1};
const TaskId kW2{"worker", 2};

class CoordinationServiceTest : public ::testing::Test {
 protected:
  void Start(int workers = 3, std::set<std::string> recoverable = {},
             absl::Duration shutdown_barrier = absl::ZeroDuration()) {
    CoordinationServiceOptions options;
    options.jobs = {{"worker", workers}};
    options.heartbeat_timeout = absl::Seconds(10);
    options.recoverable_jobs = recoverable;
    options.shutdown_barrier_timeout = shutdown_barrier;
    options.env = &env_;
    auto service = CoordinationService::Create(options);
    ASSERT_TRUE(service.ok()) << service.status();
    service_ = std::move(*service);
  }

  absl::StatusOr<uint64_t> Register(const TaskId& task, uint64_t inc) {
    Slot<absl::StatusOr<uint64_t>> slot;
    service_->RegisterTaskAsync(task, inc, slot.Callback());
    return slot.Wait();
  }

  TaskState StateOf(const TaskId& task) {
    auto states = service_->GetTaskState({task});
    EXPECT_TRUE(states.ok());
    return (*states)[0].state;
  }

  void StartWith(CoordinationServiceOptions options) {
    options.env = &env_;
    auto service = CoordinationService::Create(std::move(options));
    ASSERT_TRUE(service.ok()) << service.status();
    service_ = std::move(*service);
  }

  TaskStateSnapshot Snapshot(const TaskId& task) {
    auto states = service_->GetTaskState({task});
    EXPECT_TRUE(states.ok()) << states.status();
    return states.ok() ? (*states)[0] : TaskStateSnapshot{};
  }

  // Moves the fake clock to `deadline` once the service's timer thread is
  // parked on it (it must be the earliest pending timer), then waits until
  // that thread parks again on a later time. On return every timer due at
  // `deadline` has fired and every callback it answered has run, so a test
  // can assert both what happened and what did not; no real sleep decides.
  // If nothing waits for `deadline` (a regression), the test fails after a
  // real-time limit instead of hanging in FakeEnv::BlockUntilAwaiting.
  void FireTimersAt(absl::Time deadline) {
    absl::Notification parked;
    std::thread waiter([&] {
      env_.BlockUntilAwaiting(deadline);
      parked.Notify();
    });
    std::thread stand_in;
    absl::Mutex mu;
    bool never = false;
    if (!parked.WaitForNotificationWithTimeout(absl::Seconds(5))) {
      ADD_FAILURE() << "no service timer waits for "
                    << absl::FormatTime(deadline);
      // Release `waiter`: park a thread on `deadline` until the clock gets
      // there.
      stand_in = std::thread([&] {
        absl::MutexLock lock(&mu);
        env_.AwaitWithDeadline(&mu, absl::Condition(&never), deadline);
      });
    }
    waiter.join();
    env_.SetTime(deadline);
    if (stand_in.joinable()) stand_in.join();
    EXPECT_TRUE(env_.BlockUntilParked(1))
        << "the timer thread did not go back to waiting";
  }

  FakeEnv env_;
  std::unique_ptr<CoordinationService> service_;
};

TEST(TaskIdTest, ParseIsTheInverseOfToString) {
  absl::StatusOr<TaskId> task = TaskId::Parse("worker:12");
  ASSERT_TRUE(task.ok()) << task.status();
  EXPECT_EQ(task->job, "worker");
  EXPECT_EQ(task->index, 12);
  EXPECT_EQ(task->ToString(), "worker:12");
  // The last colon splits: a job name may hold one.
  task = TaskId::Parse("a:b:3");
  ASSERT_TRUE(task.ok()) << task.status();
  EXPECT_EQ(task->job, "a:b");
  for (const char* bad : {"worker", ":1", "worker:", "worker:-1", "worker:x"}) {
    absl::StatusOr<TaskId> parsed = TaskId::Parse(bad);
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument)
        << bad;
    EXPECT_THAT(parsed.status().message(), HasSubstr(bad));
  }
}

TEST_F(CoordinationServiceTest, RejectsEmptyJobList) {
  CoordinationServiceOptions options;
  EXPECT_EQ(CoordinationService::Create(options).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(CoordinationServiceTest, FirstConnectReturnsServiceIncarnation) {
  Start();
  auto inc = Register(kW0, 11);
  ASSERT_TRUE(inc.ok()) << inc.status();
  EXPECT_EQ(*inc, service_->incarnation());
  EXPECT_EQ(StateOf(kW0), TaskState::kConnected);
}

TEST_F(CoordinationServiceTest, SameIncarnationRetryIsOk) {
  Start();
  ASSERT_TRUE(Register(kW0, 11).ok());
  EXPECT_TRUE(Register(kW0, 11).ok());
  EXPECT_EQ(StateOf(kW0), TaskState::kConnected);
}

TEST_F(CoordinationServiceTest,
       RestartWithNewIncarnationIsAbortedAndPropagated) {
  Start();
  ASSERT_TRUE(Register(kW0, 11).ok());
  ASSERT_TRUE(Register(kW1, 21).ok());
  Slot<absl::Status> poll;
  service_->PollForErrorAsync(kW1, 21, poll.Callback());
  auto again = Register(kW0, 12);
  EXPECT_EQ(again.status().code(), absl::StatusCode::kAborted);
  EXPECT_THAT(again.status().message(), HasSubstr("worker:0 restarted"));
  EXPECT_EQ(StateOf(kW0), TaskState::kError);
  absl::Status error = poll.Wait();
  EXPECT_EQ(error.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(ErrorSourceTask(error)->ToString(), "worker:0");
  EXPECT_TRUE(IsServiceError(error));
}

TEST_F(CoordinationServiceTest, TaskInErrorIsAbortedUntilReset) {
  Start();
  ASSERT_TRUE(Register(kW0, 11).ok());
  ASSERT_TRUE(
      service_->ReportErrorToService(kW0, absl::InternalError("oom")).ok());
  auto again = Register(kW0, 12);
  EXPECT_EQ(again.status().code(), absl::StatusCode::kAborted);
  EXPECT_THAT(again.status().message(), HasSubstr("ResetTask"));
  ASSERT_TRUE(service_->ResetTask(kW0).ok());
  EXPECT_TRUE(Register(kW0, 12).ok());
}

TEST_F(CoordinationServiceTest, UnknownTaskIsInvalidArgument) {
  Start();
  auto r = Register(TaskId{"ps", 0}, 1);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("ps:0"));
  EXPECT_EQ(service_->Heartbeat(TaskId{"worker", 7}, 1, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(CoordinationServiceTest, RecoverableTaskMayRestart) {
  Start(3, {"worker"});
  ASSERT_TRUE(Register(kW0, 11).ok());
  EXPECT_TRUE(Register(kW0, 12).ok());
  auto states = service_->GetTaskState({kW0});
  EXPECT_EQ((*states)[0].incarnation, 12u);
  // The old incarnation's heartbeats are refused without failing the task.
  EXPECT_EQ(service_->Heartbeat(kW0, 11, 0).status().code(),
            absl::StatusCode::kAborted);
  EXPECT_EQ(StateOf(kW0), TaskState::kConnected);
}

TEST_F(CoordinationServiceTest, HeartbeatTimeoutDetectedAtDeadline) {
  Start();
  ASSERT_TRUE(Register(kW0, 11).ok());
  ASSERT_TRUE(Register(kW1, 21).ok());
  Slot<absl::Status> poll;
  service_->PollForErrorAsync(kW0, 11, poll.Callback());
  env_.AdvanceTime(absl::Seconds(6));
  ASSERT_TRUE(service_->Heartbeat(kW0, 11, service_->incarnation()).ok());
  env_.AdvanceTime(absl::Seconds(4) - absl::Milliseconds(1));
  // worker:1 is 1 ms short of its deadline: still connected. The timer
  // thread parked on a time still ahead has run every check due by now.
  ASSERT_TRUE(env_.BlockUntilParked(1))
      << "the service's timer thread did not go back to waiting";
  EXPECT_EQ(StateOf(kW1), TaskState::kConnected);
  EXPECT_FALSE(poll.Ready());
  env_.AdvanceTime(absl::Milliseconds(2));
  absl::Status error = poll.Wait();
  EXPECT_EQ(error.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(error.message(), HasSubstr("worker:1"));
  EXPECT_EQ(StateOf(kW1), TaskState::kError);
  EXPECT_EQ(StateOf(kW0), TaskState::kConnected);
}

TEST_F(CoordinationServiceTest, HeartbeatDecisions) {
  Start();
  EXPECT_EQ(service_->Heartbeat(kW0, 11, 0).status().code(),
            absl::StatusCode::kInvalidArgument);  // not registered
  ASSERT_TRUE(Register(kW0, 11).ok());
  EXPECT_EQ(
      service_->Heartbeat(kW0, 11, service_->incarnation() + 1).status().code(),
      absl::StatusCode::kAborted);  // service restarted
  EXPECT_EQ(service_->Heartbeat(kW0, 99, 0).status().code(),
            absl::StatusCode::kAborted);  // stale incarnation
  EXPECT_EQ(StateOf(kW0), TaskState::kError);
}

TEST_F(CoordinationServiceTest, ReconnectAfterHeartbeatTimeoutWhenAllowed) {
  CoordinationServiceOptions options;
  options.jobs = {{"worker", 2}};
  options.allow_new_incarnation_to_reconnect = true;
  options.heartbeat_timeout = absl::Seconds(1);
  options.env = &env_;
  service_ = *CoordinationService::Create(options);
  ASSERT_TRUE(Register(kW0, 1).ok());
  env_.AdvanceTime(absl::Seconds(2));
  for (int i = 0; i < 1000 && StateOf(kW0) != TaskState::kError; ++i) {
    absl::SleepFor(absl::Milliseconds(2));
  }
  ASSERT_EQ(StateOf(kW0), TaskState::kError);
  EXPECT_TRUE(Register(kW0, 2).ok());
}

TEST_F(CoordinationServiceTest, PollAfterErrorGetsItAtOnce) {
  Start();
  ASSERT_TRUE(Register(kW0, 11).ok());
  ASSERT_TRUE(Register(kW1, 21).ok());
  ASSERT_TRUE(
      service_->ReportErrorToService(kW0, absl::DataLossError("disk")).ok());
  Slot<absl::Status> poll;
  service_->PollForErrorAsync(kW1, 21, poll.Callback());
  absl::Status error = poll.Wait();
  EXPECT_EQ(error.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(error.message(), HasSubstr("worker:0 reported an error: disk"));
}

TEST_F(CoordinationServiceTest, StopCancelsPolls) {
  Start();
  ASSERT_TRUE(Register(kW0, 11).ok());
  Slot<absl::Status> poll;
  service_->PollForErrorAsync(kW0, 11, poll.Callback());
  service_->Stop();
  EXPECT_EQ(poll.Wait().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(Register(kW1, 1).status().code(), absl::StatusCode::kInternal);
}

// ------------------------------------------------------------------ KV

TEST_F(CoordinationServiceTest, KeyValueBasics) {
  Start();
  ASSERT_TRUE(service_->InsertKeyValue("/a//b/", "1", false).ok());
  EXPECT_EQ(*service_->TryGetKeyValue("a/b"), "1");
  EXPECT_EQ(service_->InsertKeyValue("a/b", "2", false).code(),
            absl::StatusCode::kAlreadyExists);
  ASSERT_TRUE(service_->InsertKeyValue("a/b", "2", true).ok());
  EXPECT_EQ(*service_->TryGetKeyValue("a/b"), "2");
  EXPECT_EQ(service_->TryGetKeyValue("nope").status().code(),
            absl::StatusCode::kNotFound);
  ASSERT_TRUE(service_->InsertKeyValue("a/c", "3", false).ok());
  ASSERT_TRUE(service_->InsertKeyValue("ab", "x", false).ok());
  auto dir = service_->ListKeyValueDir("a");
  ASSERT_TRUE(dir.ok());
  ASSERT_EQ(dir->size(), 2u);
  EXPECT_EQ((*dir)[0].first, "a/b");
  EXPECT_EQ((*dir)[1].first, "a/c");
  ASSERT_TRUE(service_->DeleteKeyValue("a", /*is_directory=*/true).ok());
  EXPECT_TRUE(service_->ListKeyValueDir("a")->empty());
  EXPECT_TRUE(service_->TryGetKeyValue("ab").ok());
}

TEST_F(CoordinationServiceTest, IncrementAndCompareAndSwap) {
  Start();
  EXPECT_EQ(*service_->IncrementKeyValue("n", 5), 5);
  EXPECT_EQ(*service_->IncrementKeyValue("n", -2), 3);
  ASSERT_TRUE(service_->InsertKeyValue("s", "abc", false).ok());
  EXPECT_EQ(service_->IncrementKeyValue("s", 1).status().code(),
            absl::StatusCode::kFailedPrecondition);
  auto cas = service_->CompareAndSwapKeyValue("leader", std::nullopt, "w0");
  ASSERT_TRUE(cas.ok());
  EXPECT_TRUE(cas->swapped);
  cas = service_->CompareAndSwapKeyValue("leader", std::nullopt, "w1");
  EXPECT_FALSE(cas->swapped);
  EXPECT_EQ(*cas->stored, "w0");
  cas = service_->CompareAndSwapKeyValue("leader", std::string("w0"), "w1");
  EXPECT_TRUE(cas->swapped);
  EXPECT_EQ(*cas->stored, "w1");
}

TEST_F(CoordinationServiceTest, BlockingGetWakesOnInsertOrTimesOut) {
  Start();
  Slot<absl::StatusOr<std::string>> get;
  service_->GetKeyValueAsync("k", env_.Now() + absl::Seconds(5),
                             get.Callback());
  EXPECT_FALSE(get.Ready());
  ASSERT_TRUE(service_->InsertKeyValue("k", "v", false).ok());
  EXPECT_EQ(*get.Wait(), "v");

  Slot<absl::StatusOr<std::string>> late;
  service_->GetKeyValueAsync("missing", env_.Now() + absl::Seconds(5),
                             late.Callback());
  env_.AdvanceTime(absl::Seconds(6));
  auto r = late.Wait();
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(r.status().message(), HasSubstr("missing"));
}

TEST_F(CoordinationServiceTest, WatchWakesOnChangeAndDelete) {
  Start();
  Slot<absl::StatusOr<KeyValueWatchResult>> w1;
  service_->WatchKeyValueAsync("k", 0, absl::InfiniteFuture(), w1.Callback());
  EXPECT_FALSE(w1.Ready());
  ASSERT_TRUE(service_->InsertKeyValue("k", "v1", false).ok());
  auto r1 = w1.Wait();
  ASSERT_TRUE(r1.ok());
  EXPECT_TRUE(r1->present);
  EXPECT_EQ(r1->value, "v1");
  Slot<absl::StatusOr<KeyValueWatchResult>> w2;
  service_->WatchKeyValueAsync("k", r1->version, absl::InfiniteFuture(),
                               w2.Callback());
  EXPECT_FALSE(w2.Ready());
  ASSERT_TRUE(service_->DeleteKeyValue("k", false).ok());
  auto r2 = w2.Wait();
  ASSERT_TRUE(r2.ok());
  EXPECT_FALSE(r2->present);
  EXPECT_GT(r2->version, r1->version);
}

// The style review's finding: a write after Stop() got in, and a blocking get
// could stay parked. Both now end at Stop().
TEST_F(CoordinationServiceTest, KeyValueCallsEndAtStop) {
  Start();
  Slot<absl::StatusOr<std::string>> parked;
  service_->GetKeyValueAsync("never-set", absl::InfiniteFuture(),
                             parked.Callback());
  EXPECT_FALSE(parked.Ready());
  service_->Stop();
  EXPECT_FALSE(parked.Wait().ok());
  EXPECT_FALSE(service_->InsertKeyValue("intruder", "yes", false).ok());
  EXPECT_FALSE(service_->IncrementKeyValue("n", 1).ok());
  EXPECT_FALSE(service_->DeleteKeyValue("intruder", false).ok());
  Slot<absl::StatusOr<std::string>> late;
  service_->GetKeyValueAsync("never-set", absl::InfiniteFuture(),
                             late.Callback());
  EXPECT_TRUE(late.Ready()) << "a get after Stop() is answered at once";
  EXPECT_FALSE(late.Wait().ok());
  EXPECT_THAT(late.Wait().status().message(), HasSubstr("stopped"));
}

// ------------------------------------------------------------------ barriers

TEST_F(CoordinationServiceTest, NewBarrierIdsBeyondTheCapAreRefused) {
  CoordinationServiceOptions options;
  options.jobs = {{"worker", 1}};
  options.max_barrier_ids = 2;
  options.env = &env_;
  auto service = CoordinationService::Create(options);
  ASSERT_TRUE(service.ok());
  service_ = std::move(*service);
  ASSERT_TRUE(Register(kW0, 7).ok());
  for (const char* id : {"a", "b", "c"}) {
    Slot<absl::StatusOr<int64_t>> slot;
    service_->BarrierAsync(id, 0, absl::Seconds(5), kW0, {}, slot.Callback());
    auto r = slot.Wait();
    if (std::string(id) == "c") {
      EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
      EXPECT_THAT(r.status().message(), HasSubstr("'c'"));
    } else {
      EXPECT_TRUE(r.ok()) << id << ": " << r.status();
    }
  }
  // A known id keeps working with its next counter.
  Slot<absl::StatusOr<int64_t>> again;
  service_->BarrierAsync("a", 1, absl::Seconds(5), kW0, {}, again.Callback());
  EXPECT_TRUE(again.Wait().ok());
}

class BarrierTest : public CoordinationServiceTest {
 protected:
  void SetUp() override {
    Start(3);
    ASSERT_TRUE(Register(kW0, 10).ok());
    ASSERT_TRUE(Register(kW1, 11).ok());
  }
  void Arrive(const TaskId& t, Slot<absl::StatusOr<int64_t>>& slot,
              int64_t counter = 0, std::vector<TaskId> tasks = {},
              absl::Duration timeout = absl::Seconds(30)) {
    service_->BarrierAsync("b", counter, timeout, t, tasks, slot.Callback());
  }
};

TEST_F(BarrierTest, PassesWhenAllArriveAndIsReusable) {
  ASSERT_TRUE(Register(kW2, 12).ok());
  for (int64_t round = 0; round < 3; ++round) {
    Slot<absl::StatusOr<int64_t>> a, b, c;
    Arrive(kW0, a, round);
    Arrive(kW1, b, round);
    EXPECT_FALSE(a.Ready());
    Arrive(kW2, c, round);
    EXPECT_EQ(*a.Wait(), round);
    EXPECT_EQ(*b.Wait(), round);
    EXPECT_EQ(*c.Wait(), round);
  }
  // A retry of a finished instance gets the cached answer.
  Slot<absl::StatusOr<int64_t>> retry;
  Arrive(kW0, retry, 2);
  EXPECT_EQ(*retry.Wait(), 2);
}

TEST_F(BarrierTest, TimeoutListsEveryMissingTaskAndWhy) {
  ASSERT_TRUE(
      service_->ReportErrorToService(kW1, absl::InternalError("x")).ok());
  ASSERT_TRUE(service_->ResetTask(kW1).ok());
  ASSERT_TRUE(Register(kW1, 13).ok());
  // worker:0 arrives; worker:1 is connected but does not; worker:2 never
  // registered.
  Slot<absl::StatusOr<int64_t>> a;
  Arrive(kW0, a, 0, {}, absl::Seconds(5));
  env_.AdvanceTime(absl::Seconds(5));
  auto r = a.Wait();
  ASSERT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(r.status().message(), HasSubstr("1/3 tasks arrived"));
  EXPECT_THAT(r.status().message(),
              HasSubstr("worker:1 (connected but did not arrive"));
  EXPECT_THAT(r.status().message(), HasSubstr("worker:2 (never registered"));
}

TEST_F(BarrierTest, TaskDyingWhileOthersWaitFailsAtOnce) {
  Slot<absl::StatusOr<int64_t>> a;
  Arrive(kW0, a, 0, {kW0, kW1});
  EXPECT_FALSE(a.Ready());
  ASSERT_TRUE(
      service_->ReportErrorToService(kW1, absl::InternalError("oom")).ok());
  auto r = a.Wait();
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(r.status().message(), HasSubstr("worker:1"));
  EXPECT_THAT(r.status().message(), HasSubstr("oom"));
}

TEST_F(BarrierTest, DeadTaskInTimeoutMessage) {
  ASSERT_TRUE(Register(kW2, 12).ok());
  ASSERT_TRUE(
      service_->ReportErrorToService(kW2, absl::InternalError("gone")).ok());
  Slot<absl::StatusOr<int64_t>> a;
  Arrive(kW0, a, 0);
  auto r = a.Wait();  // participant already dead: fails at creation
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(r.status().message(), HasSubstr("worker:2 is in error"));
}

TEST_F(BarrierTest, SubsetAndMismatchedParticipants) {
  Slot<absl::StatusOr<int64_t>> a, b;
  Arrive(kW0, a, 0, {kW0, kW1});
  Arrive(kW1, b, 0, {kW0, kW1});
  EXPECT_EQ(*a.Wait(), 0);
  EXPECT_EQ(*b.Wait(), 0);
  Slot<absl::StatusOr<int64_t>> c, d;
  Arrive(kW0, c, 1, {kW0, kW1});
  Arrive(kW1, d, 1, {});
  EXPECT_EQ(c.Wait().status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(d.Wait().status().code(), absl::StatusCode::kInvalidArgument);
  Slot<absl::StatusOr<int64_t>> e;
  Arrive(kW2, e, 2, {kW0, kW1});  // caller not a participant
  EXPECT_EQ(e.Wait().status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(TaskListTest, NamesAFewAndCountsTheRest) {
  std::set<TaskId> tasks;
  for (int i = 0; i < 40; ++i) tasks.insert(TaskId{"w", i});
  const std::string list = internal::TaskList(tasks);
  EXPECT_THAT(list, HasSubstr("w:0, w:1, "));
  EXPECT_THAT(list, HasSubstr(" and 8 more"));
  EXPECT_THAT(list, Not(HasSubstr("w:39")));
  EXPECT_EQ(internal::TaskList({TaskId{"w", 0}, TaskId{"w", 1}}), "w:0, w:1");
}

TEST(TaskListTest, FirstDifferenceNamesWhatTheCutListsHide) {
  std::set<TaskId> caller, opener;
  for (int i = 0; i < 40; ++i) {
    caller.insert(TaskId{"w", i});
    opener.insert(TaskId{"w", i});
  }
  EXPECT_EQ(internal::FirstDifference(caller, opener), "");
  opener.erase(TaskId{"w", 35});
  EXPECT_EQ(internal::FirstDifference(caller, opener),
            " (first difference: w:35 only in the caller's)");
  caller.erase(TaskId{"w", 35});
  opener.insert(TaskId{"w", 50});
  EXPECT_EQ(internal::FirstDifference(caller, opener),
            " (first difference: w:50 only in the opener's)");
  EXPECT_EQ(internal::FirstDifference({}, opener), "");
}

TEST_F(BarrierTest, CancelFailsCurrentAndFutureCallers) {
  Slot<absl::StatusOr<int64_t>> a;
  Arrive(kW0, a, 0, {kW0, kW1});
  ASSERT_TRUE(service_->CancelBarrier("b", 0, kW1).ok());
  EXPECT_EQ(a.Wait().status().code(), absl::StatusCode::kCancelled);
  Slot<absl::StatusOr<int64_t>> b;
  Arrive(kW1, b, 0, {kW0, kW1});
  EXPECT_EQ(b.Wait().status().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(service_->CancelBarrier("b", 0, kW1).code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(BarrierTest, CounterMismatchIsInternalWithPayload) {
  Slot<absl::StatusOr<int64_t>> a;
  Arrive(kW0, a, 5);
  auto r = a.Wait();
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInternal);
  EXPECT_TRUE(r.status().GetPayload(kBarrierErrorUrl).has_value());
}

TEST_F(BarrierTest, SecondCallFromSameTaskReplacesFirst) {
  Slot<absl::StatusOr<int64_t>> a1, a2, b;
  Arrive(kW0, a1, 0, {kW0, kW1});
  Arrive(kW0, a2, 0, {kW0, kW1});
  EXPECT_EQ(a1.Wait().status().code(), absl::StatusCode::kCancelled);
  Arrive(kW1, b, 0, {kW0, kW1});
  EXPECT_EQ(*a2.Wait(), 0);
}

TEST_F(BarrierTest, StatusShowsArrivedAndMissing) {
  Slot<absl::StatusOr<int64_t>> a;
  Arrive(kW0, a, 0);
  JobStatus status = service_->GetJobStatus();
  ASSERT_EQ(status.barriers.size(), 1u);
  EXPECT_EQ(status.barriers[0].arrived.size(), 1u);
  EXPECT_EQ(status.barriers[0].missing.size(), 2u);
  EXPECT_EQ(status.job_state, "running");
  service_->Stop();
  EXPECT_EQ(a.Wait().status().code(), absl::StatusCode::kAborted);
}

// ------------------------------------------------------------------ others

TEST_F(CoordinationServiceTest, GetAliveTasksAgreesOnConnectedTasks) {
  Start(3);
  ASSERT_TRUE(Register(kW0, 10).ok());
  ASSERT_TRUE(Register(kW1, 11).ok());  // worker:2 never connects
  Slot<absl::StatusOr<std::vector<AliveTask>>> a, b;
  service_->GetAliveTasksAsync(kW0, {}, absl::InfiniteFuture(), a.Callback());
  EXPECT_FALSE(a.Ready());
  service_->GetAliveTasksAsync(kW1, {}, absl::InfiniteFuture(), b.Callback());
  auto ra = a.Wait();
  auto rb = b.Wait();
  ASSERT_TRUE(ra.ok());
  ASSERT_EQ(ra->size(), 2u);
  EXPECT_EQ((*ra)[1].incarnation, 11u);
  EXPECT_EQ(rb->size(), 2u);
}

TEST_F(CoordinationServiceTest, GetAliveTasksCompletesWhenStragglerDies) {
  Start(2);
  ASSERT_TRUE(Register(kW0, 10).ok());
  ASSERT_TRUE(Register(kW1, 11).ok());
  Slot<absl::StatusOr<std::vector<AliveTask>>> a;
  service_->GetAliveTasksAsync(kW0, {}, absl::InfiniteFuture(), a.Callback());
  ASSERT_TRUE(
      service_->ReportErrorToService(kW1, absl::InternalError("x")).ok());
  auto r = a.Wait();
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->size(), 1u);
  EXPECT_EQ((*r)[0].task, kW0);
}

TEST_F(CoordinationServiceTest, WatchJobStateSeesVersions) {
  Start(2);
  Slot<absl::StatusOr<JobStatus>> now;
  service_->WatchJobStateAsync(-1, absl::InfiniteFuture(), now.Callback());
  const int64_t v0 = now.Wait()->version;
  Slot<absl::StatusOr<JobStatus>> next;
  service_->WatchJobStateAsync(v0, absl::InfiniteFuture(), next.Callback());
  EXPECT_FALSE(next.Ready());
  ASSERT_TRUE(Register(kW0, 10).ok());
  auto status = next.Wait();
  ASSERT_TRUE(status.ok());
  EXPECT_GT(status->version, v0);
  EXPECT_EQ(status->tasks[0].state, TaskState::kConnected);
}

TEST_F(CoordinationServiceTest, ShutdownBarrierWaitsAndToleratesExitedPeers) {
  Start(3, {}, absl::Seconds(30));
  ASSERT_TRUE(Register(kW0, 10).ok());
  ASSERT_TRUE(Register(kW1, 11).ok());
  ASSERT_TRUE(Register(kW2, 12).ok());
  Slot<absl::Status> s0, s1, s2;
  service_->ShutdownTaskAsync(kW0, s0.Callback());
  service_->ShutdownTaskAsync(kW1, s1.Callback());
  EXPECT_FALSE(s0.Ready());
  service_->ShutdownTaskAsync(kW2, s2.Callback());
  EXPECT_TRUE(s0.Wait().ok());
  EXPECT_TRUE(s1.Wait().ok());
  EXPECT_TRUE(s2.Wait().ok());
  EXPECT_EQ(service_->GetJobStatus().job_state, "finished");
  // A second shutdown is harmless.
  Slot<absl::Status> again;
  service_->ShutdownTaskAsync(kW0, again.Callback());
  EXPECT_TRUE(again.Wait().ok());
}

TEST_F(CoordinationServiceTest, ShutdownWithoutBarrierNeverLooksFailed) {
  Start(2);
  ASSERT_TRUE(Register(kW0, 10).ok());
  ASSERT_TRUE(Register(kW1, 11).ok());
  Slot<absl::Status> poll;
  service_->PollForErrorAsync(kW1, 11, poll.Callback());
  Slot<absl::Status> s0;
  service_->ShutdownTaskAsync(kW0, s0.Callback());
  EXPECT_TRUE(s0.Wait().ok());
  // Long after worker:0 stopped heartbeating, nothing has failed.
  env_.AdvanceTime(absl::Seconds(9));
  ASSERT_TRUE(service_->Heartbeat(kW1, 11, 0).ok());
  env_.AdvanceTime(absl::Seconds(9));
  // Every heartbeat check due by now has run once the timer thread waits
  // on a later time again.
  ASSERT_TRUE(env_.BlockUntilParked(1))
      << "the service's timer thread did not go back to waiting";
  EXPECT_FALSE(poll.Ready());
  Slot<absl::Status> s1;
  service_->ShutdownTaskAsync(kW1, s1.Callback());
  EXPECT_TRUE(s1.Wait().ok());
  EXPECT_EQ(poll.Wait().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(service_->GetJobStatus().job_state, "finished");
}

TEST_F(CoordinationServiceTest, ShutdownBarrierTimeoutNamesStragglers) {
  Start(2, {}, absl::Seconds(3));
  ASSERT_TRUE(Register(kW0, 10).ok());
  ASSERT_TRUE(Register(kW1, 11).ok());
  Slot<absl::Status> s0;
  service_->ShutdownTaskAsync(kW0, s0.Callback());
  env_.AdvanceTime(absl::Seconds(2));
  ASSERT_TRUE(service_->Heartbeat(kW1, 11, 0).ok());
  env_.AdvanceTime(absl::Seconds(2));
  absl::Status s = s0.Wait();
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(s.message(), HasSubstr("worker:1"));
}

TEST_F(CoordinationServiceTest, RegisterWithBarrierWaitsForEveryone) {
  CoordinationServiceOptions options;
  options.jobs = {{"worker", 2}};
  options.register_with_barrier = true;
  options.env = &env_;
  service_ = *CoordinationService::Create(options);
  Slot<absl::StatusOr<uint64_t>> a, b;
  service_->RegisterTaskAsync(kW0, 1, a.Callback());
  EXPECT_FALSE(a.Ready());
  service_->RegisterTaskAsync(kW1, 2, b.Callback());
  EXPECT_TRUE(a.Wait().ok());
  EXPECT_TRUE(b.Wait().ok());
}

// ------------------------------------------------- issue 9: helpers

// A service answer, for the tests below. Every answer they expect is
// delivered before the call that causes it returns (or, for deadlines,
// before FireTimersAt returns), so Get() does not wait: it fails the test if
// there is no answer yet. The callback owns the result, so a test that ends
// early (a failed ASSERT) leaves no dangling callback in the service.
template <typename T>
class Reply {
 public:
  std::function<void(T)> Callback() {
    return [state = state_](T value) {
      absl::MutexLock lock(&state->mu);
      state->value = std::move(value);
    };
  }
  bool Ready() {
    absl::MutexLock lock(&state_->mu);
    return state_->value.has_value();
  }
  T Get() {
    absl::MutexLock lock(&state_->mu);
    if (!state_->value.has_value()) {
      ADD_FAILURE() << "the service has not answered (yet)";
      return T();
    }
    return *state_->value;
  }

 private:
  struct State {
    absl::Mutex mu;
    std::optional<T> value ABSL_GUARDED_BY(mu);
  };
  std::shared_ptr<State> state_ = std::make_shared<State>();
};

using CounterSlot = Reply<absl::StatusOr<int64_t>>;
using AliveSlot = Reply<absl::StatusOr<std::vector<AliveTask>>>;

// The BarrierError payload of a barrier answer (id empty when absent).
BarrierError BarrierPayload(const absl::Status& status) {
  BarrierError error;
  if (auto payload = status.GetPayload(kBarrierErrorUrl)) {
    EXPECT_TRUE(error.ParseFromString(std::string(*payload)));
  }
  return error;
}

// "worker:0, worker:2": task lists compared as text read well on failure.
std::string Names(const std::vector<TaskId>& tasks) {
  std::vector<std::string> names;
  for (const TaskId& t : tasks) names.push_back(t.ToString());
  return absl::StrJoin(names, ", ");
}

// The barrier call answered (at once or earlier) with `counter`.
void ExpectPassed(CounterSlot& slot, int64_t counter) {
  absl::StatusOr<int64_t> r = slot.Get();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, counter);
}

// ------------------------------------ issue 9: registration-table rows

// Row "ERROR otherwise -> Aborted": allow_new_incarnation_to_reconnect only
// forgives a heartbeat timeout. A task that reported an error is refused
// whatever incarnation it comes back with, and the refusal leaves its state
// and recorded error as they were.
TEST_F(CoordinationServiceTest,
       ReportedErrorRefusesAnyIncarnationEvenWhenReconnectAllowed) {
  CoordinationServiceOptions options;
  options.jobs = {{"worker", 2}};
  options.allow_new_incarnation_to_reconnect = true;
  StartWith(options);
  ASSERT_TRUE(Register(kW0, 11).ok());
  ASSERT_TRUE(Register(kW1, 21).ok());
  Reply<absl::Status> poll;
  service_->PollForErrorAsync(kW1, 21, poll.Callback());
  ASSERT_TRUE(
      service_->ReportErrorToService(kW0, absl::InternalError("oom")).ok());
  ASSERT_TRUE(poll.Ready());  // propagated: worker:0 is not recoverable
  EXPECT_EQ(poll.Get().code(), absl::StatusCode::kInternal);

  for (uint64_t incarnation : {uint64_t{12}, uint64_t{11}}) {  // new, same
    SCOPED_TRACE(absl::StrCat("incarnation ", incarnation));
    absl::StatusOr<uint64_t> again = Register(kW0, incarnation);
    ASSERT_EQ(again.status().code(), absl::StatusCode::kAborted);
    EXPECT_TRUE(IsServiceError(again.status()));
    EXPECT_THAT(std::string(again.status().message()),
                HasSubstr("task worker:0 is in error since"));
    EXPECT_THAT(std::string(again.status().message()),
                HasSubstr("task worker:0 reported an error: oom"));
    EXPECT_THAT(std::string(again.status().message()), HasSubstr("ResetTask"));
    ASSERT_TRUE(ErrorSourceTask(again.status()).has_value());
    EXPECT_EQ(ErrorSourceTask(again.status())->ToString(), "worker:0");
    TaskStateSnapshot s = Snapshot(kW0);
    EXPECT_EQ(s.state, TaskState::kError);
    EXPECT_EQ(s.incarnation, 11u);
    EXPECT_EQ(s.error.code(), absl::StatusCode::kInternal);
    EXPECT_THAT(std::string(s.error.message()),
                HasSubstr("reported an error: oom"));
  }
  EXPECT_EQ(StateOf(kW1), TaskState::kConnected);
}

// Same row, error from a restart (new incarnation of a non-recoverable
// task): the third incarnation is refused too, naming the restart.
TEST_F(CoordinationServiceTest,
       RestartErrorRefusesLaterIncarnationsEvenWhenReconnectAllowed) {
  CoordinationServiceOptions options;
  options.jobs = {{"worker", 1}};
  options.allow_new_incarnation_to_reconnect = true;
  StartWith(options);
  ASSERT_TRUE(Register(kW0, 11).ok());
  absl::StatusOr<uint64_t> restart = Register(kW0, 12);
  ASSERT_EQ(restart.status().code(), absl::StatusCode::kAborted);
  EXPECT_THAT(std::string(restart.status().message()),
              HasSubstr("worker:0 restarted"));
  absl::StatusOr<uint64_t> third = Register(kW0, 13);
  ASSERT_EQ(third.status().code(), absl::StatusCode::kAborted);
  EXPECT_THAT(std::string(third.status().message()),
              HasSubstr("task worker:0 is in error since"));
  EXPECT_THAT(std::string(third.status().message()),
              HasSubstr("registered with incarnation 11 and now with 12"));
  TaskStateSnapshot s = Snapshot(kW0);
  EXPECT_EQ(s.state, TaskState::kError);
  EXPECT_EQ(s.incarnation, 11u);
  EXPECT_EQ(s.error.code(), absl::StatusCode::kAborted);
}

// The heartbeat-timeout permit belongs to that one error: once the task is
// back and fails in another way, a further incarnation is refused.
TEST_F(CoordinationServiceTest, HeartbeatTimeoutPermitEndsWithTheNextError) {
  CoordinationServiceOptions options;
  options.jobs = {{"worker", 1}};
  options.allow_new_incarnation_to_reconnect = true;
  options.heartbeat_timeout = absl::Seconds(10);
  StartWith(options);
  const absl::Time t0 = env_.Now();
  ASSERT_TRUE(Register(kW0, 1).ok());
  FireTimersAt(t0 + absl::Seconds(10));
  TaskStateSnapshot dead = Snapshot(kW0);
  ASSERT_EQ(dead.state, TaskState::kError);
  EXPECT_EQ(dead.error.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(dead.error.message()),
              HasSubstr("sent no heartbeat"));

  absl::StatusOr<uint64_t> back = Register(kW0, 2);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, service_->incarnation());
  TaskStateSnapshot alive = Snapshot(kW0);
  EXPECT_EQ(alive.state, TaskState::kConnected);
  EXPECT_EQ(alive.incarnation, 2u);
  EXPECT_TRUE(alive.error.ok());

  ASSERT_TRUE(
      service_->ReportErrorToService(kW0, absl::InternalError("oom")).ok());
  absl::StatusOr<uint64_t> refused = Register(kW0, 3);
  ASSERT_EQ(refused.status().code(), absl::StatusCode::kAborted);
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr("reported an error: oom"));
  EXPECT_EQ(Snapshot(kW0).state, TaskState::kError);
  EXPECT_EQ(Snapshot(kW0).incarnation, 2u);
}

// Row "DISCONNECTED after a clean shutdown -> OK": the same and a new
// incarnation both connect again, as a live task (heartbeats accepted, not
// "shut down" for barriers), and nothing is reported as a failure.
TEST_F(CoordinationServiceTest,
       ReRegisterAfterCleanShutdownSameOrNewIncarnation) {
  Start(2);
  ASSERT_TRUE(Register(kW0, 11).ok());
  ASSERT_TRUE(Register(kW1, 21).ok());
  Reply<absl::Status> poll;
  service_->PollForErrorAsync(kW1, 21, poll.Callback());
  uint64_t current = 11;
  for (uint64_t incarnation : {uint64_t{11}, uint64_t{12}}) {  // same, new
    SCOPED_TRACE(absl::StrCat("incarnation ", incarnation));
    Reply<absl::Status> down;
    service_->ShutdownTaskAsync(kW0, down.Callback());
    ASSERT_TRUE(down.Get().ok()) << down.Get();
    TaskStateSnapshot gone = Snapshot(kW0);
    EXPECT_EQ(gone.state, TaskState::kDisconnected);
    EXPECT_TRUE(gone.shut_down);
    absl::StatusOr<uint64_t> beat = service_->Heartbeat(kW0, current, 0);
    EXPECT_EQ(beat.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(beat.status().message()),
                HasSubstr("already shut down"));

    absl::StatusOr<uint64_t> back = Register(kW0, incarnation);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, service_->incarnation());
    current = incarnation;
    TaskStateSnapshot s = Snapshot(kW0);
    EXPECT_EQ(s.state, TaskState::kConnected);
    EXPECT_FALSE(s.shut_down);
    EXPECT_EQ(s.incarnation, incarnation);
    EXPECT_TRUE(s.error.ok());
    EXPECT_TRUE(
        service_->Heartbeat(kW0, incarnation, service_->incarnation()).ok());
  }
  EXPECT_FALSE(poll.Ready()) << poll.Get();
  EXPECT_EQ(service_->GetJobStatus().job_state, "running");
  // A barrier opened now does not fail at once with "already shut down".
  CounterSlot a, b;
  service_->BarrierAsync("after", 0, absl::Seconds(30), kW1, {kW0, kW1},
                         a.Callback());
  EXPECT_FALSE(a.Ready()) << a.Get().status();
  service_->BarrierAsync("after", 0, absl::Seconds(30), kW0, {kW0, kW1},
                         b.Callback());
  ExpectPassed(a, 0);
  ExpectPassed(b, 0);
  service_->Stop();
  EXPECT_EQ(poll.Get().code(), absl::StatusCode::kCancelled);
}

// Recoverable job at service level: a task that reports an error goes to
// ERROR and hears its own error, but nobody else does (parked or later
// polls, other jobs or its own), the job is not "failed", and the task may
// come back with a new incarnation.
TEST_F(CoordinationServiceTest,
       RecoverableTaskErrorIsNotPropagatedAndMayRejoin) {
  const TaskId ps0{"ps", 0};
  CoordinationServiceOptions options;
  options.jobs = {{"ps", 1}, {"worker", 2}};
  options.recoverable_jobs = {"worker"};
  StartWith(options);
  ASSERT_TRUE(Register(ps0, 1).ok());
  ASSERT_TRUE(Register(kW0, 10).ok());
  ASSERT_TRUE(Register(kW1, 11).ok());
  Reply<absl::Status> own, peer;
  service_->PollForErrorAsync(kW0, 10, own.Callback());
  service_->PollForErrorAsync(kW1, 11, peer.Callback());

  ASSERT_TRUE(
      service_->ReportErrorToService(kW0, absl::InternalError("oom")).ok());
  ASSERT_TRUE(own.Ready());
  EXPECT_EQ(own.Get().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(std::string(own.Get().message()),
              HasSubstr("task worker:0 reported an error: oom"));
  EXPECT_FALSE(peer.Ready()) << peer.Get();
  Reply<absl::Status> later;  // a poll after the failure is not told either
  service_->PollForErrorAsync(ps0, 1, later.Callback());
  EXPECT_FALSE(later.Ready()) << later.Get();
  TaskStateSnapshot failed = Snapshot(kW0);
  EXPECT_EQ(failed.state, TaskState::kError);
  EXPECT_TRUE(failed.recoverable);
  EXPECT_EQ(failed.error.code(), absl::StatusCode::kInternal);
  EXPECT_EQ(StateOf(ps0), TaskState::kConnected);
  EXPECT_EQ(StateOf(kW1), TaskState::kConnected);
  EXPECT_EQ(service_->GetJobStatus().job_state, "running");

  absl::StatusOr<uint64_t> back = Register(kW0, 12);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, service_->incarnation());
  TaskStateSnapshot s = Snapshot(kW0);
  EXPECT_EQ(s.state, TaskState::kConnected);
  EXPECT_EQ(s.incarnation, 12u);
  EXPECT_TRUE(s.error.ok());
  EXPECT_TRUE(service_->Heartbeat(kW0, 12, service_->incarnation()).ok());
  EXPECT_FALSE(peer.Ready());
  EXPECT_FALSE(later.Ready());
  service_->Stop();
  EXPECT_TRUE(IsServiceStopped(peer.Get()));
  EXPECT_TRUE(IsServiceStopped(later.Get()));
}

// The same for a heartbeat timeout of a recoverable task, on the fake clock.
TEST_F(CoordinationServiceTest, RecoverableHeartbeatTimeoutIsNotPropagated) {
  const TaskId ps0{"ps", 0};
  CoordinationServiceOptions options;
  options.jobs = {{"ps", 1}, {"worker", 2}};
  options.recoverable_jobs = {"worker"};
  options.heartbeat_timeout = absl::Seconds(10);
  StartWith(options);
  const absl::Time t0 = env_.Now();
  ASSERT_TRUE(Register(ps0, 1).ok());
  ASSERT_TRUE(Register(kW0, 10).ok());
  ASSERT_TRUE(Register(kW1, 11).ok());
  Reply<absl::Status> own, ps_poll, peer;
  service_->PollForErrorAsync(kW0, 10, own.Callback());
  service_->PollForErrorAsync(ps0, 1, ps_poll.Callback());
  service_->PollForErrorAsync(kW1, 11, peer.Callback());
  env_.SetTime(t0 + absl::Seconds(5));
  ASSERT_TRUE(service_->Heartbeat(ps0, 1, 0).ok());
  ASSERT_TRUE(service_->Heartbeat(kW1, 11, 0).ok());

  FireTimersAt(t0 + absl::Seconds(10));  // worker:0 is silent
  ASSERT_TRUE(own.Ready());
  EXPECT_EQ(own.Get().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(own.Get().message()),
              HasSubstr("task worker:0 (incarnation 10) sent no heartbeat"));
  EXPECT_FALSE(ps_poll.Ready()) << ps_poll.Get();
  EXPECT_FALSE(peer.Ready()) << peer.Get();
  EXPECT_EQ(StateOf(kW0), TaskState::kError);
  EXPECT_EQ(StateOf(ps0), TaskState::kConnected);
  EXPECT_EQ(StateOf(kW1), TaskState::kConnected);
  EXPECT_EQ(service_->GetJobStatus().job_state, "running");

  ASSERT_TRUE(Register(kW0, 12).ok());
  EXPECT_EQ(StateOf(kW0), TaskState::kConnected);
  service_->Stop();
  EXPECT_TRUE(IsServiceStopped(ps_poll.Get()));
  EXPECT_TRUE(IsServiceStopped(peer.Get()));
}

// ------------------------------------ issue 9: recoverable barrier rules

// A non-recoverable task calling with 0 after a later instance finished is a
// counter mismatch (contrast for the re-sync below); the finished instance
// keeps its answer.
TEST_F(BarrierTest,
       CounterZeroAfterLaterInstanceIsAMismatchWhenNotRecoverable) {
  for (int64_t round : {0, 1}) {
    CounterSlot a, b;
    service_->BarrierAsync("b", round, absl::Seconds(30), kW0, {kW0, kW1},
                           a.Callback());
    service_->BarrierAsync("b", round, absl::Seconds(30), kW1, {kW0, kW1},
                           b.Callback());
    ExpectPassed(a, round);
    ExpectPassed(b, round);
  }
  CounterSlot late;
  service_->BarrierAsync("b", 0, absl::Seconds(30), kW0, {kW0, kW1},
                         late.Callback());
  absl::Status s = late.Get().status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("asks for instance #0 but the service is at #1 "
                        "(finished)"));
  EXPECT_EQ(BarrierPayload(s).barrier_id(), "b");
  EXPECT_EQ(BarrierPayload(s).counter(), 1);
  CounterSlot retry;
  service_->BarrierAsync("b", 1, absl::Seconds(30), kW1, {kW0, kW1},
                         retry.Callback());
  ExpectPassed(retry, 1);
}

class RecoverableBarrierTest : public CoordinationServiceTest {
 protected:
  void SetUp() override {
    Start(3, {"worker"});
    ASSERT_TRUE(Register(kW0, 10).ok());
    ASSERT_TRUE(Register(kW1, 11).ok());
    ASSERT_TRUE(Register(kW2, 12).ok());
  }
  void Arrive(const TaskId& t, CounterSlot& slot, int64_t counter,
              const std::string& id = "b", std::vector<TaskId> tasks = {},
              absl::Duration timeout = absl::Seconds(30)) {
    service_->BarrierAsync(id, counter, timeout, t, tasks, slot.Callback());
  }
  // The open instance of barrier `id`, if any.
  std::optional<BarrierSnapshot> Open(const std::string& id) {
    for (BarrierSnapshot& b : service_->GetJobStatus().barriers) {
      if (b.id == id) return b;
    }
    return std::nullopt;
  }
};

// A restarted recoverable task numbers its calls from 0 again. After an
// instance finished, its 0 joins the next instance: not the cached answer of
// the finished one (#0), not a counter mismatch (#1).
TEST_F(RecoverableBarrierTest, CounterZeroAfterPassJoinsTheNextInstance) {
  {
    CounterSlot a, b, c;
    Arrive(kW0, a, 0);
    Arrive(kW1, b, 0);
    Arrive(kW2, c, 0);
    ExpectPassed(a, 0);
    ExpectPassed(b, 0);
    ExpectPassed(c, 0);
  }
  ASSERT_TRUE(Register(kW0, 20).ok());  // worker:0 restarts
  CounterSlot a, b, c;
  Arrive(kW0, a, 0);
  EXPECT_FALSE(a.Ready()) << "answered from the finished #0: "
                          << a.Get().status();
  std::optional<BarrierSnapshot> open = Open("b");
  ASSERT_TRUE(open.has_value());
  EXPECT_EQ(open->counter, 1);
  EXPECT_EQ(Names(open->arrived), "worker:0");
  Arrive(kW1, b, 1);
  Arrive(kW2, c, 1);
  ExpectPassed(a, 1);
  ExpectPassed(b, 1);
  ExpectPassed(c, 1);

  ASSERT_TRUE(Register(kW1, 21).ok());  // worker:1 restarts after #1
  CounterSlot d, e, f;
  Arrive(kW1, d, 0);
  EXPECT_FALSE(d.Ready()) << d.Get().status();
  open = Open("b");
  ASSERT_TRUE(open.has_value());
  EXPECT_EQ(open->counter, 2);
  Arrive(kW0, e, 2);
  Arrive(kW2, f, 2);
  ExpectPassed(d, 2);
  ExpectPassed(e, 2);
  ExpectPassed(f, 2);
}

// A recoverable task that restarts while a later instance (#1) is open joins
// that instance with its counter 0, instead of failing as a mismatch and
// leaving the others waiting for it until the deadline.
TEST_F(RecoverableBarrierTest, CounterZeroJoinsAnOpenLaterInstance) {
  {
    CounterSlot a, b, c;
    Arrive(kW0, a, 0);
    Arrive(kW1, b, 0);
    Arrive(kW2, c, 0);
    ExpectPassed(a, 0);
    ExpectPassed(b, 0);
    ExpectPassed(c, 0);
  }
  CounterSlot a, b, c;
  Arrive(kW1, b, 1);                    // #1 is open, worker:1 waits
  ASSERT_TRUE(Register(kW0, 20).ok());  // worker:0 restarts meanwhile
  Arrive(kW0, a, 0);
  EXPECT_FALSE(a.Ready()) << a.Get().status();
  std::optional<BarrierSnapshot> open = Open("b");
  ASSERT_TRUE(open.has_value());
  EXPECT_EQ(open->counter, 1);
  EXPECT_EQ(Names(open->arrived), "worker:0, worker:1");
  Arrive(kW2, c, 1);
  ExpectPassed(a, 1);
  ExpectPassed(b, 1);
  ExpectPassed(c, 1);
}

// "Finished" includes failed: after a cancelled #0, a recoverable task's 0
// opens #1 instead of getting #0's cached Cancelled.
TEST_F(RecoverableBarrierTest, CounterZeroAfterFailedInstanceJoinsTheNextOne) {
  CounterSlot first;
  Arrive(kW1, first, 0);
  ASSERT_TRUE(service_->CancelBarrier("b", 0, kW2).ok());
  EXPECT_EQ(first.Get().status().code(), absl::StatusCode::kCancelled);
  ASSERT_TRUE(Register(kW0, 20).ok());
  CounterSlot a, b, c;
  Arrive(kW0, a, 0);
  EXPECT_FALSE(a.Ready()) << "answered from the cancelled #0: "
                          << a.Get().status();
  std::optional<BarrierSnapshot> open = Open("b");
  ASSERT_TRUE(open.has_value());
  EXPECT_EQ(open->counter, 1);
  Arrive(kW1, b, 1);
  Arrive(kW2, c, 1);
  ExpectPassed(a, 1);
  ExpectPassed(b, 1);
  ExpectPassed(c, 1);
}

// The once-only barriers (registration, shutdown) are never re-synced: a
// recoverable task calling them with 0 again gets the cached answer at once.
TEST_F(RecoverableBarrierTest, OnceOnlyBarriersAnswerCounterZeroFromCache) {
  for (const std::string& id :
       {std::string(kInitBarrierId), std::string(kShutdownBarrierId)}) {
    SCOPED_TRACE(id);
    CounterSlot a, b;
    Arrive(kW0, a, 0, id, {kW0, kW1});
    Arrive(kW1, b, 0, id, {kW0, kW1});
    ExpectPassed(a, 0);
    ExpectPassed(b, 0);
    CounterSlot again;
    Arrive(kW0, again, 0, id, {kW0, kW1});
    ASSERT_TRUE(again.Ready()) << "a new instance was opened";
    ExpectPassed(again, 0);
    EXPECT_FALSE(Open(id).has_value());
  }
}

// What that exclusion is for: with register_with_barrier, a restarted
// recoverable task registers at once instead of waiting at a second
// registration barrier that no other task will ever join.
TEST_F(CoordinationServiceTest,
       RestartedRecoverableTaskRegistersAtOnceWithRegisterBarrier) {
  CoordinationServiceOptions options;
  options.jobs = {{"worker", 2}};
  options.recoverable_jobs = {"worker"};
  options.register_with_barrier = true;
  StartWith(options);
  Reply<absl::StatusOr<uint64_t>> a, b;
  service_->RegisterTaskAsync(kW0, 1, a.Callback());
  EXPECT_FALSE(a.Ready());
  service_->RegisterTaskAsync(kW1, 2, b.Callback());
  ASSERT_TRUE(a.Get().ok()) << a.Get().status();
  ASSERT_TRUE(b.Get().ok()) << b.Get().status();

  Reply<absl::StatusOr<uint64_t>> again;
  service_->RegisterTaskAsync(kW0, 3, again.Callback());
  ASSERT_TRUE(again.Ready())
      << "the restarted task waits at a new init barrier";
  ASSERT_TRUE(again.Get().ok()) << again.Get().status();
  EXPECT_EQ(*again.Get(), service_->incarnation());
  TaskStateSnapshot s = Snapshot(kW0);
  EXPECT_EQ(s.state, TaskState::kConnected);
  EXPECT_EQ(s.incarnation, 3u);
  EXPECT_TRUE(service_->GetJobStatus().barriers.empty());
}

// A recoverable task whose counter the service cannot place (it never saw
// the barrier, e.g. after a service restart) opens instance #0 instead of
// getting the Internal "never seen" error a non-recoverable task gets.
TEST_F(RecoverableBarrierTest, NeverSeenBarrierOpensInstanceZeroForAnyCounter) {
  CounterSlot a, b;
  Arrive(kW0, a, 7, "fresh", {kW0, kW1});
  EXPECT_FALSE(a.Ready()) << a.Get().status();
  std::optional<BarrierSnapshot> open = Open("fresh");
  ASSERT_TRUE(open.has_value());
  EXPECT_EQ(open->counter, 0);
  EXPECT_EQ(Names(open->arrived), "worker:0");
  Arrive(kW1, b, 0, "fresh", {kW0, kW1});
  ExpectPassed(a, 0);
  ExpectPassed(b, 0);
}

// A recoverable participant already in ERROR does not fail a new barrier at
// creation (a non-recoverable one does: DeadTaskInTimeoutMessage); the
// barrier waits for it to come back.
TEST_F(RecoverableBarrierTest, DeadRecoverableParticipantDoesNotFailCreation) {
  ASSERT_TRUE(
      service_->ReportErrorToService(kW2, absl::InternalError("oom")).ok());
  CounterSlot a, b, c;
  Arrive(kW0, a, 0);
  EXPECT_FALSE(a.Ready()) << a.Get().status();
  std::optional<BarrierSnapshot> open = Open("b");
  ASSERT_TRUE(open.has_value());
  EXPECT_EQ(open->counter, 0);
  EXPECT_EQ(Names(open->missing), "worker:1, worker:2");
  ASSERT_TRUE(Register(kW2, 22).ok());
  Arrive(kW2, c, 0);
  Arrive(kW1, b, 0);
  ExpectPassed(a, 0);
  ExpectPassed(b, 0);
  ExpectPassed(c, 0);
}

// Likewise a recoverable participant that shut down: the barrier is not
// failed at once; it waits until its deadline, which then names the task.
TEST_F(RecoverableBarrierTest, ShutDownRecoverableParticipantIsWaitedFor) {
  const absl::Time deadline = env_.Now() + absl::Seconds(5);
  Reply<absl::Status> down;
  service_->ShutdownTaskAsync(kW2, down.Callback());
  ASSERT_TRUE(down.Get().ok());
  CounterSlot a, b;
  Arrive(kW0, a, 0, "b", {}, absl::Seconds(5));
  Arrive(kW1, b, 0, "b", {}, absl::Seconds(5));
  EXPECT_FALSE(a.Ready()) << a.Get().status();
  FireTimersAt(deadline);
  for (CounterSlot* slot : {&a, &b}) {
    ASSERT_TRUE(slot->Ready());
    absl::Status s = slot->Get().status();
    EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
    EXPECT_THAT(std::string(s.message()), HasSubstr("2/3 tasks arrived"));
    EXPECT_THAT(std::string(s.message()), HasSubstr("worker:2 (shut down at"));
  }
}

// A recoverable participant that restarts while the barrier is open loses
// its arrival (its old call is Cancelled with the barrier payload), the
// others keep waiting, and the new incarnation joins the same instance.
TEST_F(RecoverableBarrierTest,
       RestartedParticipantLeavesAndRejoinsOpenInstance) {
  CounterSlot old_call, b;
  Arrive(kW0, old_call, 0);
  Arrive(kW1, b, 0);
  ASSERT_TRUE(Register(kW0, 20).ok());
  ASSERT_TRUE(old_call.Ready());
  absl::Status s = old_call.Get().status();
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("barrier 'b': task worker:0 restarted with a new "
                        "incarnation; its earlier arrival no longer counts"));
  EXPECT_EQ(BarrierPayload(s).barrier_id(), "b");
  EXPECT_EQ(BarrierPayload(s).counter(), 0);
  EXPECT_FALSE(b.Ready()) << b.Get().status();
  std::optional<BarrierSnapshot> open = Open("b");
  ASSERT_TRUE(open.has_value());
  EXPECT_EQ(Names(open->arrived), "worker:1");
  EXPECT_EQ(Names(open->missing), "worker:0, worker:2");

  CounterSlot a, c;
  Arrive(kW0, a, 0);
  EXPECT_FALSE(a.Ready()) << a.Get().status();
  Arrive(kW2, c, 0);
  ExpectPassed(a, 0);
  ExpectPassed(b, 0);
  ExpectPassed(c, 0);
}

// Every other way a recoverable participant leaves (reported error, clean
// shutdown, reset, heartbeat timeout) withdraws only its own arrival: its
// call is Cancelled saying why, the barrier stays open for the others.
TEST_F(RecoverableBarrierTest, LeavingParticipantWithdrawsOnlyItsOwnArrival) {
  const absl::Time t0 = env_.Now();
  struct Case {
    std::string name;
    std::function<void()> leave;
    std::string why;
  };
  const std::vector<Case> cases = {
      {"reported error",
       [&] {
         ASSERT_TRUE(
             service_->ReportErrorToService(kW1, absl::InternalError("oom"))
                 .ok());
       },
       "task worker:1 failed: task worker:1 reported an error: oom"},
      {"shutdown",
       [&] {
         Reply<absl::Status> down;
         service_->ShutdownTaskAsync(kW1, down.Callback());
         ASSERT_TRUE(down.Get().ok());
       },
       "task worker:1 shut down"},
      {"reset", [&] { ASSERT_TRUE(service_->ResetTask(kW1).ok()); },
       "task worker:1 was reset"},
      // Last: it moves the clock. Every task registered at t0; worker:0 and
      // worker:2 heartbeat at t0+5s, worker:1 stays silent.
      {"heartbeat timeout",
       [&] {
         env_.SetTime(t0 + absl::Seconds(5));
         ASSERT_TRUE(service_->Heartbeat(kW0, 10, 0).ok());
         ASSERT_TRUE(service_->Heartbeat(kW2, 12, 0).ok());
         FireTimersAt(t0 + absl::Seconds(10));
       },
       "task worker:1 failed: task worker:1 (incarnation 104) sent no "
       "heartbeat"},
  };
  uint64_t incarnation = 100;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string id = "b-" + c.name;
    ASSERT_TRUE(Register(kW1, ++incarnation).ok());
    CounterSlot a, b;
    Arrive(kW0, a, 0, id);
    Arrive(kW1, b, 0, id);
    c.leave();
    ASSERT_TRUE(b.Ready());
    absl::Status s = b.Get().status();
    EXPECT_EQ(s.code(), absl::StatusCode::kCancelled);
    EXPECT_THAT(std::string(s.message()),
                HasSubstr(absl::StrCat("barrier '", id, "': ", c.why)));
    EXPECT_THAT(std::string(s.message()),
                HasSubstr("its earlier arrival no longer counts"));
    EXPECT_EQ(BarrierPayload(s).barrier_id(), id);
    EXPECT_EQ(BarrierPayload(s).counter(), 0);
    EXPECT_FALSE(a.Ready()) << a.Get().status();
    std::optional<BarrierSnapshot> open = Open(id);
    ASSERT_TRUE(open.has_value());
    EXPECT_EQ(Names(open->arrived), "worker:0");
    EXPECT_EQ(Names(open->missing), "worker:1, worker:2");
    ASSERT_TRUE(service_->CancelBarrier(id, 0, kW2).ok());
    EXPECT_EQ(a.Get().status().code(), absl::StatusCode::kCancelled);
  }
}

// ------------------------------------ issue 9: GetAliveTasks timeout

// At its deadline GetAliveTasks fails every asker with DeadlineExceeded
// naming exactly the connected tasks that did not ask (not the askers, not
// tasks that never connected); the round is then over.
TEST_F(CoordinationServiceTest, GetAliveTasksTimeoutNamesTasksThatDidNotAsk) {
  Start(5);  // worker:4 never registers
  const absl::Time deadline = env_.Now() + absl::Seconds(5);
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(Register(TaskId{"worker", i}, 10 + i).ok());
  }
  AliveSlot a, b;
  service_->GetAliveTasksAsync(kW0, {}, deadline, a.Callback());
  service_->GetAliveTasksAsync(kW1, {}, deadline, b.Callback());
  EXPECT_FALSE(a.Ready());
  FireTimersAt(deadline);
  for (AliveSlot* slot : {&a, &b}) {
    ASSERT_TRUE(slot->Ready());
    absl::Status s = slot->Get().status();
    EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
    EXPECT_TRUE(IsServiceError(s));
    EXPECT_THAT(std::string(s.message()), HasSubstr("GetAliveTasks timed out"));
    EXPECT_THAT(std::string(s.message()),
                HasSubstr("did not ask: worker:2, worker:3"));
    EXPECT_THAT(std::string(s.message()), Not(HasSubstr("worker:4")));
  }
  // A new round starts from nobody: the timed-out askers do not count.
  AliveSlot c, d, e, f;
  service_->GetAliveTasksAsync(kW2, {}, absl::InfiniteFuture(), c.Callback());
  EXPECT_FALSE(c.Ready());
  service_->GetAliveTasksAsync(kW0, {}, absl::InfiniteFuture(), d.Callback());
  service_->GetAliveTasksAsync(kW1, {}, absl::InfiniteFuture(), e.Callback());
  EXPECT_FALSE(c.Ready());
  service_->GetAliveTasksAsync(TaskId{"worker", 3}, {}, absl::InfiniteFuture(),
                               f.Callback());
  for (AliveSlot* slot : {&c, &d, &e, &f}) {
    absl::StatusOr<std::vector<AliveTask>> r = slot->Get();
    ASSERT_TRUE(r.ok()) << r.status();
    std::vector<TaskId> tasks;
    for (const AliveTask& t : *r) tasks.push_back(t.task);
    EXPECT_EQ(Names(tasks), "worker:0, worker:1, worker:2, worker:3");
  }
}

}  // namespace
}  // namespace cohort::coord
