#include "cohort/coord/coordination_service.h"

#include <atomic>
#include <optional>
#include <string>
#include <vector>

#include "absl/synchronization/notification.h"
#include "cohort/base/fake_env.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort::coord {
namespace {

using ::testing::HasSubstr;

const TaskId kW0{"worker", 0};
const TaskId kW1{"worker", 1};
const TaskId kW2{"worker", 2};

// A result slot filled by a service callback; Wait() blocks (real time,
// bounded) until it is.
template <typename T>
struct Slot {
  absl::Notification done;
  std::optional<T> value;
  std::function<void(T)> Callback() {
    return [this](T v) {
      value = std::move(v);
      done.Notify();
    };
  }
  bool Ready() { return done.HasBeenNotified(); }
  T Wait() {
    EXPECT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(10)))
        << "callback never ran";
    return *value;
  }
};

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

  FakeEnv env_;
  std::unique_ptr<CoordinationService> service_;
};

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

TEST_F(CoordinationServiceTest, RestartWithNewIncarnationIsAbortedAndPropagated) {
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
  ASSERT_TRUE(service_->ReportErrorToService(kW0, absl::InternalError("oom")).ok());
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
  // worker:1 is 1 ms short of its deadline: still connected.
  absl::SleepFor(absl::Milliseconds(20));
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
  EXPECT_EQ(service_->Heartbeat(kW0, 11, service_->incarnation() + 1)
                .status()
                .code(),
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
  EXPECT_EQ(service_->TryGetKeyValue("nope").status().code(), absl::StatusCode::kNotFound);
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
  ASSERT_TRUE(service_->ReportErrorToService(kW1, absl::InternalError("x")).ok());
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
  ASSERT_TRUE(service_->ReportErrorToService(kW1, absl::InternalError("oom")).ok());
  auto r = a.Wait();
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(r.status().message(), HasSubstr("worker:1"));
  EXPECT_THAT(r.status().message(), HasSubstr("oom"));
}

TEST_F(BarrierTest, DeadTaskInTimeoutMessage) {
  ASSERT_TRUE(Register(kW2, 12).ok());
  ASSERT_TRUE(service_->ReportErrorToService(kW2, absl::InternalError("gone")).ok());
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
  ASSERT_TRUE(service_->ReportErrorToService(kW1, absl::InternalError("x")).ok());
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
  absl::SleepFor(absl::Milliseconds(20));
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

}  // namespace
}  // namespace cohort::coord
