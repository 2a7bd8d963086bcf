#include "cohort/training/monitored_session.h"

#include <memory>
#include <string>
#include <vector>

#include "cohort/base/fake_env.h"
#include "cohort/base/status.h"
#include "cohort/training/training_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort::training {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::LogCapture;
using testing::SharedLocalCluster;

// Records its calls into a shared log; optionally fetches, feeds, stops or
// fails.
class RecordingHook : public SessionRunHook {
 public:
  RecordingHook(std::string name, std::vector<std::string>* events)
      : name_(std::move(name)), events_(events) {}
  absl::Status Begin(Scope*) override { return Record("Begin"); }
  absl::Status AfterCreateSession(Session*, Coordinator* coord) override {
    coord_ = coord;
    return Record("AfterCreateSession");
  }
  absl::StatusOr<std::optional<SessionRunArgs>> BeforeRun(
      SessionRunContext* ctx) override {
    COHORT_RETURN_IF_ERROR(Record("BeforeRun"));
    if (!before_run_error.ok()) {
      absl::Status e = before_run_error;
      before_run_error = absl::OkStatus();
      return e;
    }
    if (args.fetches.empty() && args.feeds.empty() && args.targets.empty()) {
      return std::optional<SessionRunArgs>();
    }
    return std::optional<SessionRunArgs>(args);
  }
  absl::Status AfterRun(SessionRunContext* ctx,
                        const SessionRunValues& v) override {
    results = v.results;
    if (++runs == stop_after_runs) ctx->RequestStop();
    return Record("AfterRun");
  }
  absl::Status End(Session*) override { return Record("End"); }

  SessionRunArgs args;
  absl::Status before_run_error;
  int stop_after_runs = -1;
  int runs = 0;
  std::vector<Tensor> results;
  Coordinator* coord_ = nullptr;

 private:
  absl::Status Record(const std::string& what) {
    events_->push_back(name_ + ":" + what);
    return absl::OkStatus();
  }
  std::string name_;
  std::vector<std::string>* events_;
};

class MonitoredSessionTest : public ::testing::Test {
 protected:
  MonitoredSessionTest() { testing::BuildCounterModel(root_); }

  absl::StatusOr<std::unique_ptr<MonitoredSession>> Make(HookList hooks,
                                                         bool recover = true) {
    SessionCreatorOptions c;
    c.factory = cluster_.factory();
    c.env = &env_;
    MonitoredSessionOptions o;
    o.env = &env_;
    o.should_recover = recover;
    o.max_recovery = absl::Seconds(5);
    return MonitoredSession::Create(
        root_, std::make_unique<ChiefSessionCreator>(nullptr, c), hooks, o);
  }
  float W() {
    std::vector<Tensor> out;
    EXPECT_TRUE(cluster_.local->Run({}, {"w/read:0"}, {}, &out).ok());
    return out[0].scalar<float>();
  }

  FakeEnv env_;
  Scope root_ = Scope::NewRootScope();
  SharedLocalCluster cluster_;
  std::vector<std::string> events_;
};

TEST_F(MonitoredSessionTest, LifecycleOrder) {
  auto a = std::make_shared<RecordingHook>("a", &events_);
  auto b = std::make_shared<RecordingHook>("b", &events_);
  auto sess = Make({a, b});
  ASSERT_TRUE(sess.ok()) << sess.status();
  ASSERT_TRUE((*sess)->Run({}, {"train"}, nullptr).ok());
  ASSERT_TRUE((*sess)->Close().ok());
  EXPECT_THAT(events_,
              ElementsAre("a:Begin", "b:Begin", "a:AfterCreateSession",
                          "b:AfterCreateSession", "a:BeforeRun", "b:BeforeRun",
                          "a:AfterRun", "b:AfterRun", "a:End", "b:End"));
  EXPECT_EQ(W(), 1.f);
}

TEST_F(MonitoredSessionTest, EachHookGetsItsOwnFetches) {
  auto a = std::make_shared<RecordingHook>("a", &events_);
  auto b = std::make_shared<RecordingHook>("b", &events_);
  a->args.fetches = {"global_step/read:0"};
  b->args.feeds = {{"x", Tensor(2.f)}};
  b->args.fetches = {"x_out:0", "w/read:0"};
  auto sess = Make({a, b});
  ASSERT_TRUE(sess.ok()) << sess.status();
  std::vector<Tensor> out;
  ASSERT_TRUE((*sess)->Run({"w/read:0"}, {"train"}, &out).ok());
  ASSERT_EQ(out.size(), 1u);
  ASSERT_EQ(a->results.size(), 1u);
  EXPECT_EQ(a->results[0].dtype(), DT_INT64);
  ASSERT_EQ(b->results.size(), 2u);
  EXPECT_EQ(b->results[0].scalar<float>(), 2.f);
}

TEST_F(MonitoredSessionTest, FeedConflicts) {
  auto a = std::make_shared<RecordingHook>("a", &events_);
  auto b = std::make_shared<RecordingHook>("b", &events_);
  a->args.feeds = {{"x", Tensor(1.f)}};
  b->args.feeds = {{"x:0", Tensor(2.f)}};
  {
    auto sess = Make({a, b});
    ASSERT_TRUE(sess.ok());
    absl::Status s = (*sess)->Run({}, {"x_out:0"}, nullptr);
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ(s.message(),
              "Same tensor is fed by two hooks. Conflict(s): ['x:0']");
  }
  b->args.feeds.clear();
  cluster_.local.reset();  // the new creator finalizes a new scaffold
  auto sess = Make({a, b});
  ASSERT_TRUE(sess.ok());
  absl::Status s = (*sess)->Run(RunOptions(), {{"x:0", Tensor(3.f)}},
                                {"x_out:0"}, {}, nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(),
            "Same tensor is fed by a SessionRunHook and user. Conflict(s): "
            "['x:0']");
}

TEST_F(MonitoredSessionTest, RequestStopEndsTheLoopAfterTheRun) {
  auto a = std::make_shared<RecordingHook>("a", &events_);
  a->stop_after_runs = 2;
  auto sess = Make({a});
  ASSERT_TRUE(sess.ok());
  int steps = 0;
  while (!(*sess)->ShouldStop()) {
    ASSERT_TRUE((*sess)->Run({}, {"train"}, nullptr).ok());
    ++steps;
  }
  EXPECT_EQ(steps, 2);
  absl::Status s = (*sess)->Run({}, {"train"}, nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(), "Run called even after should_stop requested.");
}

TEST_F(MonitoredSessionTest, OutOfRangeSkipsAfterRunButEndRuns) {
  auto a = std::make_shared<RecordingHook>("a", &events_);
  auto sess = Make({a});
  ASSERT_TRUE(sess.ok());
  cluster_.plan->FailNextRuns({absl::OutOfRangeError("input exhausted")});
  absl::Status s = (*sess)->Run({}, {"train"}, nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kOutOfRange);
  ASSERT_TRUE((*sess)->Close(s).ok());
  EXPECT_THAT(events_, ElementsAre("a:Begin", "a:AfterCreateSession",
                                   "a:BeforeRun", "a:End"));
}

TEST_F(MonitoredSessionTest, OtherErrorsPropagateWithoutEnd) {
  auto a = std::make_shared<RecordingHook>("a", &events_);
  auto sess = Make({a});
  ASSERT_TRUE(sess.ok());
  cluster_.plan->FailNextRuns({absl::InternalError("kernel failed")});
  absl::Status s = (*sess)->Run({}, {"train"}, nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_EQ(*cluster_.created, 1);  // no recovery
  ASSERT_TRUE((*sess)->Close(s).ok());
  EXPECT_THAT(events_,
              ElementsAre("a:Begin", "a:AfterCreateSession", "a:BeforeRun"));
}

TEST_F(MonitoredSessionTest, SecondCloseFailsWithoutSecondEnd) {
  auto a = std::make_shared<RecordingHook>("a", &events_);
  auto sess = Make({a});
  ASSERT_TRUE(sess.ok());
  ASSERT_TRUE((*sess)->Close().ok());
  absl::Status s = (*sess)->Close();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(), "Session is already closed.");
  EXPECT_EQ(std::count(events_.begin(), events_.end(), "a:End"), 1);
  EXPECT_TRUE((*sess)->ShouldStop());
  EXPECT_EQ((*sess)->Run({}, {"train"}, nullptr).message(),
            "Session is already closed.");
}

TEST_F(MonitoredSessionTest, RecoversFromUnavailableAndRetriesTheRun) {
  LogCapture logs;
  auto a = std::make_shared<RecordingHook>("a", &events_);
  auto sess = Make({a});
  ASSERT_TRUE(sess.ok());
  cluster_.plan->FailNextRuns({absl::UnavailableError("ps:0 lost")});
  absl::Status s;
  absl::Duration waited = testing::DriveClock(&env_, absl::Seconds(1), [&] {
    s = (*sess)->Run({}, {"train"}, nullptr);
  });
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(waited, absl::Seconds(1));  // the first backoff
  EXPECT_EQ(*cluster_.created, 2);
  EXPECT_EQ(W(), 1.f);  // the step ran once, on the new session
  EXPECT_EQ(std::count(events_.begin(), events_.end(), "a:AfterCreateSession"),
            2);
  EXPECT_EQ(logs.Count("An error was raised. This may be due to a preemption "
                       "in a connected worker or parameter server. The "
                       "current session will be closed and a new session "
                       "will be created."),
            1);
  EXPECT_EQ(logs.Count("Error: UNAVAILABLE: ps:0 lost"), 1);
}

TEST_F(MonitoredSessionTest, RecoversFromAbortedInHookPoll) {
  auto a = std::make_shared<RecordingHook>("a", &events_);
  a->before_run_error = absl::AbortedError("session invalidated");
  auto sess = Make({a});
  ASSERT_TRUE(sess.ok());
  absl::Status s;
  testing::DriveClock(&env_, absl::Seconds(1),
                      [&] { s = (*sess)->Run({}, {"train"}, nullptr); });
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(*cluster_.created, 2);
  EXPECT_EQ(W(), 1.f);
}

TEST_F(MonitoredSessionTest, RecoversFromCreationErrors) {
  LogCapture logs;
  cluster_.create_plan->FailNextRuns({absl::UnavailableError("no master")});
  absl::StatusOr<std::unique_ptr<MonitoredSession>> sess;
  testing::DriveClock(&env_, absl::Seconds(1), [&] { sess = Make({}); });
  ASSERT_TRUE(sess.ok()) << sess.status();
  EXPECT_EQ(logs.Count("An error was raised while a session was being "
                       "created. This may be due to a preemption of a "
                       "connected worker or parameter server. A new session "
                       "will be created."),
            1);
}

TEST_F(MonitoredSessionTest, GivesUpAfterMaxRecovery) {
  auto sess = Make({});
  ASSERT_TRUE(sess.ok());
  // Every later session creation fails: backoffs of 1 s and 2 s fit in
  // max_recovery = 5 s, the next (4 s) would not.
  cluster_.plan->FailNextRuns({absl::UnavailableError("ps:0 lost")});
  cluster_.create_plan->FailNextRuns(
      std::vector<absl::Status>(10, absl::UnavailableError("still lost")));
  absl::Status s;
  absl::Time start = env_.Now();
  testing::DriveClock(&env_, absl::Seconds(1),
                      [&] { s = (*sess)->Run({}, {"train"}, nullptr); });
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(s.message(), "still lost");
  EXPECT_EQ(env_.Now() - start, absl::Seconds(3));
}

TEST_F(MonitoredSessionTest, SingularSessionDoesNotRecover) {
  auto sess = Make({}, /*recover=*/false);
  ASSERT_TRUE(sess.ok());
  cluster_.plan->FailNextRuns({absl::UnavailableError("ps:0 lost")});
  EXPECT_EQ((*sess)->Run({}, {"train"}, nullptr).code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(*cluster_.created, 1);
}

TEST_F(MonitoredSessionTest, StopCheckRecoversFromCoordinatorPreemption) {
  auto a = std::make_shared<RecordingHook>("a", &events_);
  auto sess = Make({a});
  ASSERT_TRUE(sess.ok());
  a->coord_->RequestStop(absl::AbortedError("worker restarted"));
  EXPECT_FALSE((*sess)->ShouldStop());
  EXPECT_EQ(*cluster_.created, 2);
  a->coord_->RequestStop(absl::InternalError("bug"));
  EXPECT_TRUE((*sess)->ShouldStop());
}

TEST_F(MonitoredSessionTest, RunStepFnRunsHooksAndStops) {
  auto a = std::make_shared<RecordingHook>("a", &events_);
  auto sess = Make({a});
  ASSERT_TRUE(sess.ok());
  int calls = 0;
  while (!(*sess)->ShouldStop()) {
    ASSERT_TRUE((*sess)
                    ->RunStepFn([&](StepContext* ctx) {
                      COHORT_RETURN_IF_ERROR(
                          ctx->RunWithHooks({}, {}, {"train"}, nullptr));
                      if (++calls == 3) ctx->RequestStop();
                      return absl::OkStatus();
                    })
                    .ok());
  }
  EXPECT_EQ(calls, 3);
  EXPECT_EQ(a->runs, 3);
  EXPECT_EQ(W(), 3.f);
}

TEST_F(MonitoredSessionTest, CoordinatorJoinsItsThreads) {
  Coordinator coord(&env_);
  std::atomic<int> loops{0};
  coord.StartThread([&] {
    while (!coord.ShouldStop()) loops = loops + 1;
  });
  coord.RequestStop(absl::UnavailableError("x"));
  EXPECT_EQ(coord.Join(absl::Seconds(10)).code(),
            absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace cohort::training
