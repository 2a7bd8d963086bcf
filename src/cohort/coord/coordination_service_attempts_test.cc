// CoordinationService across attempts of one job (ResetForNextAttempt) and
// its task-state listeners: what a launcher that keeps one service for the
// whole job relies on.
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "cohort/base/fake_env.h"
#include "cohort/coord/callback_slot_testing.h"
#include "cohort/coord/coordination_service.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort::coord {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

const TaskId kW0{"worker", 0};
const TaskId kW1{"worker", 1};

// What a listener saw: (task, state, incarnation) in delivery order.
using Seen = std::tuple<std::string, TaskState, uint64_t>;

class AttemptsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    CoordinationServiceOptions options;
    options.jobs = {{"worker", 2}};
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

  TaskStateSnapshot StateOf(const TaskId& task) {
    auto states = service_->GetTaskState({task});
    EXPECT_TRUE(states.ok()) << states.status();
    return states.ok() ? (*states)[0] : TaskStateSnapshot{};
  }

  FakeEnv env_;
  std::unique_ptr<CoordinationService> service_;
};

TEST_F(AttemptsTest, ResetEndsEverythingOfTheAttemptButTheKeptKeys) {
  ASSERT_TRUE(Register(kW0, 11).ok());
  ASSERT_TRUE(Register(kW1, 21).ok());
  Slot<absl::Status> poll;
  service_->PollForErrorAsync(kW0, 11, poll.Callback());
  Slot<absl::StatusOr<int64_t>> barrier;
  service_->BarrierAsync("step", 0, absl::Hours(1), kW1, {},
                         barrier.Callback());
  ASSERT_TRUE(
      service_->InsertKeyValue("cohort/launch/1/failed", "w0", false).ok());
  ASSERT_TRUE(service_->InsertKeyValue("app/config", "x", false).ok());
  const int64_t version = service_->GetJobStatus().version;

  ASSERT_TRUE(
      service_->ResetForNextAttempt({"cohort/launch/"}, "attempt 1 failed")
          .ok());

  // Parked calls of the attempt ended, naming why.
  absl::Status polled = poll.Wait();
  EXPECT_TRUE(absl::IsAborted(polled)) << polled;
  EXPECT_THAT(polled.message(), HasSubstr("attempt 1 failed"));
  absl::StatusOr<int64_t> passed = barrier.Wait();
  EXPECT_TRUE(absl::IsAborted(passed.status())) << passed.status();
  EXPECT_THAT(passed.status().message(), HasSubstr("attempt 1 failed"));
  // Every task is disconnected and forgotten; the state moved on.
  for (const TaskId& t : {kW0, kW1}) {
    const TaskStateSnapshot s = StateOf(t);
    EXPECT_EQ(s.state, TaskState::kDisconnected) << t.ToString();
    EXPECT_EQ(s.incarnation, 0u) << t.ToString();
    EXPECT_TRUE(s.error.ok()) << t.ToString();
  }
  EXPECT_GT(service_->GetJobStatus().version, version);
  // Only the launcher's keys stay.
  EXPECT_EQ(*service_->TryGetKeyValue("cohort/launch/1/failed"), "w0");
  EXPECT_TRUE(
      absl::IsNotFound(service_->TryGetKeyValue("app/config").status()));

  // The next attempt's processes register; the last attempt's are refused.
  absl::StatusOr<uint64_t> stale = Register(kW0, 11);
  EXPECT_TRUE(absl::IsFailedPrecondition(stale.status())) << stale.status();
  EXPECT_THAT(stale.status().message(), HasSubstr("attempt"));
  ASSERT_TRUE(Register(kW0, 12).ok());
  ASSERT_TRUE(Register(kW1, 22).ok());
  EXPECT_EQ(StateOf(kW0).state, TaskState::kConnected);
  // Barrier counters start again at 0.
  Slot<absl::StatusOr<int64_t>> b0, b1;
  service_->BarrierAsync("step", 0, absl::Hours(1), kW0, {}, b0.Callback());
  service_->BarrierAsync("step", 0, absl::Hours(1), kW1, {}, b1.Callback());
  ASSERT_TRUE(b0.Wait().ok()) << b0.Wait().status();
  ASSERT_TRUE(b1.Wait().ok());
  EXPECT_EQ(*b0.Wait(), 0);
}

TEST_F(AttemptsTest, TheLastAttemptsErrorDoesNotReachTheNext) {
  ASSERT_TRUE(Register(kW0, 11).ok());
  ASSERT_TRUE(Register(kW1, 21).ok());
  ASSERT_TRUE(
      service_->ReportErrorToService(kW0, absl::InternalError("first")).ok());
  EXPECT_EQ(service_->GetJobStatus().job_state, "failed");
  ASSERT_TRUE(service_->ResetForNextAttempt({}, "restart").ok());
  ASSERT_TRUE(Register(kW0, 12).ok());
  ASSERT_TRUE(Register(kW1, 22).ok());
  EXPECT_EQ(service_->GetJobStatus().job_state, "running");
  // A poll of the new attempt parks (a known error would answer it inside
  // PollForErrorAsync, before it returns)...
  Slot<absl::Status> poll;
  service_->PollForErrorAsync(kW1, 22, poll.Callback());
  EXPECT_FALSE(poll.Ready());
  // ...and gets the new attempt's error.
  ASSERT_TRUE(
      service_->ReportErrorToService(kW0, absl::InternalError("second")).ok());
  absl::Status error = poll.Wait();
  EXPECT_THAT(error.message(), HasSubstr("second"));
  EXPECT_THAT(error.message(), ::testing::Not(HasSubstr("first")));
}

TEST_F(AttemptsTest, ResetAfterStopIsRefused) {
  service_->Stop();
  EXPECT_TRUE(
      absl::IsFailedPrecondition(service_->ResetForNextAttempt({}, "restart")));
}

TEST_F(AttemptsTest, ListenersSeeEveryTransitionInOrderOnTheCallersThread) {
  absl::Mutex mu;
  std::vector<Seen> seen;
  std::vector<std::thread::id> threads;
  const uint64_t id =
      service_->AddTaskStateListener([&](const TaskStateSnapshot& s) {
        absl::MutexLock lock(&mu);
        seen.emplace_back(s.task.ToString(), s.state, s.incarnation);
        threads.push_back(std::this_thread::get_id());
      });
  EXPECT_NE(id, 0u);
  ASSERT_TRUE(Register(kW0, 11).ok());
  ASSERT_TRUE(Register(kW1, 21).ok());
  ASSERT_TRUE(
      service_->ReportErrorToService(kW0, absl::InternalError("oom")).ok());
  Slot<absl::Status> shut;
  service_->ShutdownTaskAsync(kW1, shut.Callback());
  ASSERT_TRUE(shut.Wait().ok());
  ASSERT_TRUE(service_->ResetForNextAttempt({}, "restart").ok());
  {
    absl::MutexLock lock(&mu);
    // Each call delivered its transitions before it returned.
    EXPECT_THAT(seen,
                ElementsAre(Seen{"worker:0", TaskState::kConnected, 11},
                            Seen{"worker:1", TaskState::kConnected, 21},
                            Seen{"worker:0", TaskState::kError, 11},
                            Seen{"worker:1", TaskState::kDisconnected, 21},
                            Seen{"worker:0", TaskState::kDisconnected, 0},
                            Seen{"worker:1", TaskState::kDisconnected, 0}));
    for (std::thread::id t : threads) {
      EXPECT_EQ(t, std::this_thread::get_id());
    }
  }
  service_->RemoveTaskStateListener(id);
  ASSERT_TRUE(Register(kW0, 12).ok());
  absl::MutexLock lock(&mu);
  EXPECT_EQ(seen.size(), 6u) << "a removed listener was called";
}

TEST_F(AttemptsTest, AListenerMayChangeStateAndRemoveItself) {
  std::vector<Seen> seen;  // only the delivering thread touches it
  uint64_t id = 0;
  id = service_->AddTaskStateListener([&](const TaskStateSnapshot& s) {
    seen.emplace_back(s.task.ToString(), s.state, s.incarnation);
    if (s.state == TaskState::kError) {
      // The supervisor's reaction, from inside the listener: its own
      // transition is delivered after this call returns, in order.
      EXPECT_TRUE(service_->ResetTask(s.task).ok());
    }
    if (s.state == TaskState::kDisconnected) {
      service_->RemoveTaskStateListener(id);  // returns at once
    }
  });
  ASSERT_TRUE(Register(kW0, 11).ok());
  ASSERT_TRUE(
      service_->ReportErrorToService(kW0, absl::InternalError("oom")).ok());
  EXPECT_EQ(StateOf(kW0).state, TaskState::kDisconnected);
  ASSERT_TRUE(Register(kW0, 12).ok());  // after removal: not seen
  EXPECT_THAT(seen,
              ElementsAre(Seen{"worker:0", TaskState::kConnected, 11},
                          Seen{"worker:0", TaskState::kError, 11},
                          Seen{"worker:0", TaskState::kDisconnected, 11}));
}

TEST_F(AttemptsTest, AHeartbeatTimeoutIsToldFromTheTimersThread) {
  absl::Notification told;
  std::optional<TaskStateSnapshot> error;
  std::thread::id on;
  service_->AddTaskStateListener([&](const TaskStateSnapshot& s) {
    if (s.state != TaskState::kError) return;
    error = s;
    on = std::this_thread::get_id();
    told.Notify();
  });
  const absl::Time registered = env_.Now();
  ASSERT_TRUE(Register(kW0, 11).ok());
  // The heartbeat check waits for the timeout (10 s by default); no
  // heartbeat comes.
  env_.BlockUntilAwaiting(registered + absl::Seconds(10));
  env_.AdvanceTime(absl::Seconds(10));
  ASSERT_TRUE(told.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_EQ(error->task.ToString(), "worker:0");
  EXPECT_TRUE(absl::IsUnavailable(error->error)) << error->error;
  EXPECT_NE(on, std::this_thread::get_id());
}

// A process the launcher failed to stop still holds its old incarnation;
// what it says with it must not reach the task of the same name in the next
// attempt. (Calls without an incarnation, 0, stay unchecked: every test
// above makes them.)
TEST_F(AttemptsTest, AProcessOfAnEndedAttemptCannotActOnTheNext) {
  ASSERT_TRUE(Register(kW0, 11).ok());
  ASSERT_TRUE(Register(kW1, 21).ok());
  ASSERT_TRUE(service_->ResetForNextAttempt({}, "attempt 1 failed").ok());
  ASSERT_TRUE(Register(kW0, 12).ok());
  ASSERT_TRUE(Register(kW1, 22).ok());

  auto expect_refused = [](const absl::Status& s, const char* call) {
    EXPECT_TRUE(absl::IsFailedPrecondition(s)) << call << ": " << s;
    EXPECT_THAT(s.message(), HasSubstr("worker:0")) << call;
    EXPECT_THAT(s.message(), HasSubstr("incarnation 11")) << call;
    EXPECT_THAT(s.message(), HasSubstr("current incarnation is 12")) << call;
    EXPECT_THAT(s.message(), HasSubstr("a process of an ended attempt?"))
        << call;
  };
  expect_refused(
      service_->ReportErrorToService(kW0, absl::InternalError("stale"), 11),
      "ReportError");
  Slot<absl::Status> shut;
  service_->ShutdownTaskAsync(kW0, shut.Callback(), 11);
  expect_refused(shut.Wait(), "Shutdown");
  Slot<absl::StatusOr<int64_t>> stale_barrier;
  service_->BarrierAsync("step", 0, absl::Hours(1), kW0, {},
                         stale_barrier.Callback(), 11);
  expect_refused(stale_barrier.Wait().status(), "Barrier");
  // w0's present process is untouched.
  const TaskStateSnapshot w0 = StateOf(kW0);
  EXPECT_EQ(w0.state, TaskState::kConnected);
  EXPECT_EQ(w0.incarnation, 12u);
  EXPECT_TRUE(w0.error.ok()) << w0.error;
  EXPECT_FALSE(w0.shut_down);
  EXPECT_EQ(service_->GetJobStatus().job_state, "running");

  // The next attempt's barrier: w1 arrives; the stale w0 neither joined it
  // (above, before it existed) nor joins or cancels it now.
  Slot<absl::StatusOr<int64_t>> b1;
  service_->BarrierAsync("step", 0, absl::Hours(1), kW1, {}, b1.Callback(), 22);
  Slot<absl::StatusOr<int64_t>> stale_again;
  service_->BarrierAsync("step", 0, absl::Hours(1), kW0, {},
                         stale_again.Callback(), 11);
  expect_refused(stale_again.Wait().status(), "Barrier (open)");
  expect_refused(service_->CancelBarrier("step", 0, kW0, 11), "CancelBarrier");
  const JobStatus status = service_->GetJobStatus();
  ASSERT_EQ(status.barriers.size(), 1u);
  EXPECT_THAT(status.barriers[0].arrived, ElementsAre(kW1));
  EXPECT_FALSE(b1.Ready());
  // The present w0 (its own incarnation, or none given) passes it.
  Slot<absl::StatusOr<int64_t>> b0;
  service_->BarrierAsync("step", 0, absl::Hours(1), kW0, {}, b0.Callback(), 12);
  ASSERT_TRUE(b0.Wait().ok()) << b0.Wait().status();
  ASSERT_TRUE(b1.Wait().ok()) << b1.Wait().status();
}

// Before the next attempt registers, the task has no incarnation: a stale
// caller is refused as well, and says so.
TEST_F(AttemptsTest, AStaleCallBeforeTheNextAttemptRegistersIsRefused) {
  ASSERT_TRUE(Register(kW0, 11).ok());
  ASSERT_TRUE(service_->ResetForNextAttempt({}, "restart").ok());
  Slot<absl::Status> shut;
  service_->ShutdownTaskAsync(kW0, shut.Callback(), 11);
  absl::Status s = shut.Wait();
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("not registered"));
  EXPECT_THAT(s.message(), HasSubstr("attempt of the job that has ended"));
  EXPECT_FALSE(StateOf(kW0).shut_down);
  // The new process registers as if nothing happened.
  ASSERT_TRUE(Register(kW0, 12).ok());
}

// A get of a missing key with no deadline, and a watch of a missing key,
// are woken by no deletion; the reset answers them, naming why, instead of
// leaving them parked to answer with the next attempt's value.
TEST_F(AttemptsTest, ResetEndsParkedKeyValueWaits) {
  Slot<absl::StatusOr<std::string>> get;
  service_->GetKeyValueAsync("never", absl::InfiniteFuture(), get.Callback());
  Slot<absl::StatusOr<KeyValueWatchResult>> watch;
  service_->WatchKeyValueAsync("also/never", 0, absl::InfiniteFuture(),
                               watch.Callback());
  EXPECT_FALSE(get.Ready());
  EXPECT_FALSE(watch.Ready());

  ASSERT_TRUE(service_->ResetForNextAttempt({}, "attempt 1 failed").ok());

  const bool answered = get.Ready() && watch.Ready();
  if (!answered) service_->Stop();  // ends them while the slots live
  ASSERT_TRUE(answered) << "not answered before the reset returned";
  EXPECT_TRUE(absl::IsAborted(get.Wait().status())) << get.Wait().status();
  EXPECT_THAT(get.Wait().status().message(), HasSubstr("attempt 1 failed"));
  ASSERT_TRUE(watch.Ready());
  EXPECT_TRUE(absl::IsAborted(watch.Wait().status())) << watch.Wait().status();
  EXPECT_THAT(watch.Wait().status().message(), HasSubstr("attempt 1 failed"));
  // The next attempt's get sees the next attempt's value.
  Slot<absl::StatusOr<std::string>> next;
  service_->GetKeyValueAsync("never", absl::InfiniteFuture(), next.Callback());
  ASSERT_TRUE(service_->InsertKeyValue("never", "2", false).ok());
  EXPECT_EQ(*next.Wait(), "2");
}

// In the next attempt a key the last one had set is as on a fresh service:
// a watch from version 0 parks until the key is set (the reset's deletion
// is not an event of the next attempt).
TEST_F(AttemptsTest, AWatchInTheNextAttemptParksOnAKeyTheLastOneSet) {
  ASSERT_TRUE(service_->InsertKeyValue("app/step", "1", false).ok());
  ASSERT_TRUE(service_->ResetForNextAttempt({}, "restart").ok());
  Slot<absl::StatusOr<KeyValueWatchResult>> watch;
  service_->WatchKeyValueAsync("app/step", 0, absl::InfiniteFuture(),
                               watch.Callback());
  EXPECT_FALSE(watch.Ready()) << "answered at once: the last attempt's "
                                 "deletion was remembered";
  ASSERT_TRUE(service_->InsertKeyValue("app/step", "2", false).ok());
  absl::StatusOr<KeyValueWatchResult> seen = watch.Wait();
  ASSERT_TRUE(seen.ok()) << seen.status();
  EXPECT_TRUE(seen->present);
  EXPECT_EQ(seen->value, "2");
}

// A barrier deadline the timer has already taken when the attempt ends
// (here: it is due in the same timer round as a heartbeat timeout whose
// listener holds the timer's thread) runs after the next attempt opened
// the same barrier id at counter 0; it must not time that one out.
TEST_F(AttemptsTest, ADeadlineOfAnEndedAttemptsBarrierSparesTheNextOnes) {
  absl::Notification entered, release;
  bool first = true;  // only the timer's thread reads it before `entered`
  const uint64_t listener =
      service_->AddTaskStateListener([&](const TaskStateSnapshot& s) {
        if (s.state != TaskState::kError || !first) return;
        first = false;
        entered.Notify();
        release.WaitForNotification();
      });
  const absl::Time start = env_.Now();
  ASSERT_TRUE(Register(kW0, 11).ok());
  ASSERT_TRUE(Register(kW1, 21).ok());
  Slot<absl::StatusOr<int64_t>> old_barrier;
  service_->BarrierAsync("step", 0, absl::Seconds(20), kW1, {},
                         old_barrier.Callback(), 21);
  // Heartbeat checks due at +10 s, the barrier's deadline at +20 s: one
  // round. w0's timeout comes first and its listener blocks the round.
  env_.BlockUntilAwaiting(start + absl::Seconds(10));
  env_.AdvanceTime(absl::Seconds(30));
  ASSERT_TRUE(entered.WaitForNotificationWithTimeout(absl::Seconds(10)));

  ASSERT_TRUE(service_->ResetForNextAttempt({}, "attempt 1 failed").ok());
  ASSERT_TRUE(Register(kW0, 12).ok());
  ASSERT_TRUE(Register(kW1, 22).ok());
  Slot<absl::StatusOr<int64_t>> next_barrier;
  service_->BarrierAsync("step", 0, absl::Hours(1), kW0, {},
                         next_barrier.Callback(), 12);
  // A probe due after the taken round: once the timer waits for it, the
  // round (with the old deadline) has run.
  const absl::Time probe_at = env_.Now() + absl::Seconds(1);
  Slot<absl::StatusOr<std::string>> probe;
  service_->GetKeyValueAsync("probe", probe_at, probe.Callback());
  release.Notify();
  env_.BlockUntilAwaiting(probe_at);

  const bool timed_out = next_barrier.Ready();
  const JobStatus status = service_->GetJobStatus();
  service_->RemoveTaskStateListener(listener);
  // End what is still parked (the barrier, the probe) while the slots live.
  service_->Stop();
  probe.Wait();
  EXPECT_FALSE(timed_out)
      << "the ended attempt's deadline timed out the next attempt's barrier: "
      << next_barrier.Wait().status();
  EXPECT_TRUE(absl::IsAborted(next_barrier.Wait().status()))
      << next_barrier.Wait().status();
  ASSERT_EQ(status.barriers.size(), 1u);
  EXPECT_EQ(status.barriers[0].id, "step");
  EXPECT_THAT(status.barriers[0].arrived, ElementsAre(kW0));
}

}  // namespace
}  // namespace cohort::coord
