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
#include "cohort/coord/coordination_service.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort::coord {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

const TaskId kW0{"worker", 0};
const TaskId kW1{"worker", 1};

// A callback's result; Wait() blocks (bounded, real time) until it came.
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

}  // namespace
}  // namespace cohort::coord
