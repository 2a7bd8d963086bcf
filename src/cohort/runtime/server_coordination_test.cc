// ServerCoordination on a fake clock: a task that goes silent is reported
// lost to the server (on_task_lost, which ends the steps waiting on it) at
// the coordination service's heartbeat timeout, not a moment before. The
// multi-process test (tests/runtime, a SIGSTOPped ps) shows the same path
// between real processes; here the clock is injected, so the bound is
// exact and the test takes no real heartbeat time.
#include "cohort/runtime/server_coordination.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "cohort/base/fake_env.h"
#include "cohort/coord/coordination_service.h"
#include "cohort/coord/in_process_cluster.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort::runtime {
namespace {

using ::testing::HasSubstr;

constexpr char kToken[] = "server-coordination-test-token";
constexpr absl::Duration kHeartbeatTimeout = absl::Seconds(2);
const coord::TaskId kPs{"ps", 0};

// What on_task_lost reported.
struct Lost {
  std::string task;
  absl::Status status;
  bool failed = false;
};

class ServerCoordinationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    coord::CoordinationServiceOptions service;
    service.jobs = {{"ps", 1}, {"worker", 1}};
    service.recoverable_jobs = {"ps", "worker"};
    service.heartbeat_timeout = kHeartbeatTimeout;
    service.env = &env_;
    coord::InProcessClusterOptions wire;
    wire.grpc = true;
    wire.security.job_token = kToken;
    auto cluster = coord::InProcessCluster::Create(service, wire);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = std::move(*cluster);
  }

  // worker:0's coordination, under the "launcher" service above.
  std::unique_ptr<ServerCoordination> StartWorker() {
    ServerCoordinationOptions options;
    JobDef* ps = options.server_def.mutable_cluster()->add_job();
    ps->set_name("ps");
    (*ps->mutable_tasks())[0] = "127.0.0.1:1";
    JobDef* worker = options.server_def.mutable_cluster()->add_job();
    worker->set_name("worker");
    (*worker->mutable_tasks())[0] = "127.0.0.1:2";
    options.server_def.mutable_default_session_config()
        ->mutable_experimental()
        ->mutable_coordination_config()
        ->set_heartbeat_timeout_in_ms(
            absl::ToInt64Milliseconds(kHeartbeatTimeout));
    options.job = "worker";
    options.task_index = 0;
    options.security.job_token = kToken;
    options.env = &env_;
    options.launcher_service_address = cluster_->target();
    options.on_task_lost = [this](const std::string& task,
                                  const absl::Status& status, bool failed) {
      absl::MutexLock lock(&mu_);
      lost_.push_back(Lost{task, status, failed});
      if (!reported_.HasBeenNotified()) reported_.Notify();
    };
    auto c = ServerCoordination::Create(std::move(options));
    EXPECT_TRUE(c.ok()) << c.status();
    if (!c.ok() || *c == nullptr) return nullptr;
    (*c)->Start(/*bound_port=*/0);
    return std::move(*c);
  }

  coord::TaskState PsState() {
    auto states = cluster_->service()->GetTaskState({kPs});
    EXPECT_TRUE(states.ok()) << states.status();
    return states.ok() ? (*states)[0].state : coord::TaskState::kDisconnected;
  }

  // Moves the fake clock forward by `d` in steps, each once the service's
  // timer thread and worker:0's heartbeat thread wait on it again (they
  // have reacted to the previous step: worker:0 keeps heartbeating).
  void AdvanceWhenParked(absl::Duration d) {
    const absl::Duration step = absl::Milliseconds(250);
    while (d > absl::ZeroDuration()) {
      ASSERT_TRUE(env_.BlockUntilParked(2))
          << "the service's timer and worker:0's heartbeat thread did not "
             "both wait on the clock";
      const absl::Duration now = std::min(step, d);
      env_.AdvanceTime(now);
      d -= now;
    }
    ASSERT_TRUE(env_.BlockUntilParked(2));
  }

  FakeEnv env_;
  std::unique_ptr<coord::InProcessCluster> cluster_;
  absl::Mutex mu_;
  std::vector<Lost> lost_ ABSL_GUARDED_BY(mu_);
  absl::Notification reported_;
};

// DISABLED: racy as written. The server reports only a task its job-state
// watch has seen connected (a task never seen is "still starting"), and the
// test can move the fake clock past ps:0's deadline before the watch's first
// answer arrives (1 run in ~30 under TSan: ps:0 never reported). It needs a
// hook that says the server's watch has seen the cluster before the clock
// moves; until then tests/runtime's SIGSTOP test covers the path.
TEST_F(ServerCoordinationTest,
       DISABLED_SilentTaskIsReportedLostAtTheHeartbeatTimeout) {
  // ps:0 registers and then never heartbeats (a hung process). It is
  // connected before worker:0 starts watching, so the watch's first answer
  // already shows it up.
  absl::Notification registered;
  absl::StatusOr<uint64_t> reg = absl::UnknownError("not answered");
  cluster_->service()->RegisterTaskAsync(kPs, /*incarnation=*/7,
                                         [&](absl::StatusOr<uint64_t> r) {
                                           reg = r;
                                           registered.Notify();
                                         });
  ASSERT_TRUE(registered.WaitForNotificationWithTimeout(absl::Seconds(10)));
  ASSERT_TRUE(reg.ok()) << reg.status();
  const absl::Time silent_since = env_.Now();

  std::unique_ptr<ServerCoordination> worker = StartWorker();
  ASSERT_NE(worker, nullptr);
  auto agent = worker->WaitForAgent(env_.Now() + absl::Hours(1));
  ASSERT_TRUE(agent.ok()) << agent.status();

  // 1 ms short of ps:0's deadline: still connected, nothing reported.
  AdvanceWhenParked(silent_since + kHeartbeatTimeout - absl::Milliseconds(1) -
                    env_.Now());
  EXPECT_EQ(PsState(), coord::TaskState::kConnected);
  {
    absl::MutexLock lock(&mu_);
    EXPECT_TRUE(lost_.empty()) << lost_[0].status;
  }

  // At the deadline the service declares ps:0 in error, and the server's
  // watch reports it lost, naming it and the service.
  AdvanceWhenParked(absl::Milliseconds(1));
  EXPECT_EQ(PsState(), coord::TaskState::kError);
  // The server learns it through its job-state watch, which may be between
  // two calls, waiting on the (fake) clock: keep the clock moving, with the
  // other threads parked at each step, until the report comes (at most one
  // heartbeat timeout more).
  for (absl::Duration waited;
       waited < kHeartbeatTimeout &&
       !reported_.WaitForNotificationWithTimeout(absl::Milliseconds(200));
       waited += absl::Milliseconds(250)) {
    AdvanceWhenParked(absl::Milliseconds(250));
  }
  ASSERT_TRUE(reported_.HasBeenNotified()) << "ps:0 was never reported lost";
  absl::MutexLock lock(&mu_);
  ASSERT_EQ(lost_.size(), 1u);
  EXPECT_EQ(lost_[0].task, "/job:ps/replica:0/task:0");
  EXPECT_TRUE(lost_[0].failed);
  EXPECT_EQ(lost_[0].status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(lost_[0].status.message(), HasSubstr("/job:ps/replica:0/task:0"));
  EXPECT_THAT(lost_[0].status.message(), HasSubstr("in error"));
  EXPECT_THAT(lost_[0].status.message(), HasSubstr(cluster_->target()));
}

}  // namespace
}  // namespace cohort::runtime
