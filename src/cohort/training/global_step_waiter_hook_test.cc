#include "cohort/training/global_step_waiter_hook.h"

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "cohort/base/fake_env.h"
#include "cohort/graph/kernels/state_ops.h"
#include "cohort/graph/local_session.h"
#include "cohort/training/training_test_util.h"
#include "cohort/training/training_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort::training {
namespace {

using testing::LogCapture;

constexpr char kWaiting[] = "Waiting for global step";
constexpr char kProgress[] = "before starting training. Current step is";

// Answers reads of the global step from a script; an error in the script
// is returned for that read.
class StepScriptSession : public Session {
 public:
  explicit StepScriptSession(std::vector<absl::StatusOr<int64_t>> script)
      : script_(std::move(script)) {}
  absl::Status Run(const RunOptions&,
                   const std::vector<std::pair<std::string, Tensor>>&,
                   const std::vector<std::string>& fetches,
                   const std::vector<std::string>&,
                   std::vector<Tensor>* out) override {
    EXPECT_EQ(fetches, std::vector<std::string>{"global_step/read:0"});
    int i = reads_++;
    if (i >= static_cast<int>(script_.size())) {
      return absl::OutOfRangeError("script exhausted");
    }
    if (!script_[i].ok()) return script_[i].status();
    out->assign(1, Tensor(*script_[i]));
    return absl::OkStatus();
  }
  absl::Status Extend(const GraphDef&) override { return absl::OkStatus(); }
  absl::StatusOr<CallableHandle> MakeCallable(const CallableOptions&) override {
    return absl::UnimplementedError("");
  }
  absl::Status RunCallable(CallableHandle, const std::vector<Tensor>&,
                           std::vector<Tensor>*, const RunOptions*) override {
    return absl::UnimplementedError("");
  }
  absl::Status ReleaseCallable(CallableHandle) override {
    return absl::OkStatus();
  }
  absl::Status Close() override { return absl::OkStatus(); }
  absl::Status Reset(const std::vector<std::string>&) override {
    return absl::OkStatus();
  }
  int reads() const { return reads_; }

 private:
  std::vector<absl::StatusOr<int64_t>> script_;
  std::atomic<int> reads_{0};
};

struct Outcome {
  absl::Status status;
  int reads = 0;
  int sleeps = 0;
  int waiting_logs = 0;  // every "Waiting for global step" line
  int progress_logs = 0;
  std::vector<std::string> lines;
};

class GlobalStepWaiterHookTest : public ::testing::Test {
 protected:
  GlobalStepWaiterHookTest() { ops::GetOrCreateGlobalStep(root_); }

  // Runs one BeforeRun with `script`; advances the fake clock 499 ms, checks
  // the hook still sleeps, then 1 ms more, each time the hook parks.
  Outcome BeforeRun(GlobalStepWaiterHook* hook,
                    std::vector<absl::StatusOr<int64_t>> script) {
    LogCapture logs;
    StepScriptSession session(std::move(script));
    SessionRunContext ctx(SessionRunArgs(), &session);
    Outcome o;
    std::atomic<bool> done{false};
    std::thread t([&] {
      auto r = hook->BeforeRun(&ctx);
      o.status = r.status();
      if (r.ok()) {
        EXPECT_FALSE(r->has_value());  // never adds fetches
      }
      done = true;
    });
    while (!done) {
      if (!env_.BlockUntilParked(1, absl::Milliseconds(20))) continue;
      int reads = session.reads();
      env_.AdvanceTime(absl::Milliseconds(499));
      // Still parked: no read happens before the full 500 ms.
      EXPECT_TRUE(env_.BlockUntilParked(1, absl::Milliseconds(100)));
      EXPECT_EQ(session.reads(), reads);
      env_.AdvanceTime(absl::Milliseconds(1));
      ++o.sleeps;
    }
    t.join();
    EXPECT_FALSE(ctx.stop_requested());
    o.reads = session.reads();
    o.waiting_logs = logs.Count(kWaiting);
    o.progress_logs = logs.Count(kProgress);
    o.lines = logs.Lines();
    return o;
  }

  FakeEnv env_;
  Scope root_ = Scope::NewRootScope();
};

TEST_F(GlobalStepWaiterHookTest, NoGlobalStepFailsBegin) {
  Scope bare = Scope::NewRootScope();
  GlobalStepWaiterHook hook(10, &env_);
  absl::Status s = hook.Begin(&bare);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(),
            "Global step should be created to use _GlobalStepWaiterHook.");
}

TEST_F(GlobalStepWaiterHookTest, ZeroOrNegativeStartsWithoutReadOrLog) {
  for (int64_t n : {0, -5}) {
    GlobalStepWaiterHook hook(n, &env_);
    ASSERT_TRUE(hook.Begin(&root_).ok());
    Outcome o = BeforeRun(&hook, {});
    EXPECT_TRUE(o.status.ok()) << o.status;
    EXPECT_EQ(o.reads, 0);
    EXPECT_EQ(o.waiting_logs, 0);
    EXPECT_TRUE(hook.worker_is_started());
  }
}

TEST_F(GlobalStepWaiterHookTest, StepAlreadyReachedReadsAndLogsOnce) {
  GlobalStepWaiterHook hook(20, &env_);
  ASSERT_TRUE(hook.Begin(&root_).ok());
  Outcome o = BeforeRun(&hook, {25});
  EXPECT_TRUE(o.status.ok()) << o.status;
  EXPECT_EQ(o.reads, 1);
  EXPECT_EQ(o.sleeps, 0);
  EXPECT_EQ(o.waiting_logs, 1);
  EXPECT_EQ(o.progress_logs, 0);
  EXPECT_THAT(o.lines, ::testing::ElementsAre(::testing::HasSubstr(
                           "Waiting for global step 20 before starting "
                           "training.")));
}

TEST_F(GlobalStepWaiterHookTest, PollsEveryHalfSecondUntilReached) {
  GlobalStepWaiterHook hook(20, &env_);
  ASSERT_TRUE(hook.Begin(&root_).ok());
  absl::Time start = env_.Now();
  Outcome o = BeforeRun(&hook, {0, 10, 20});
  EXPECT_TRUE(o.status.ok()) << o.status;
  EXPECT_EQ(o.reads, 3);
  EXPECT_EQ(o.sleeps, 2);
  EXPECT_EQ(env_.Now() - start, absl::Seconds(1));
  EXPECT_EQ(o.waiting_logs, 1);
  EXPECT_TRUE(hook.worker_is_started());

  // Started: a second BeforeRun reads nothing and logs nothing.
  Outcome again = BeforeRun(&hook, {});
  EXPECT_EQ(again.reads, 0);
  EXPECT_EQ(again.waiting_logs, 0);
}

TEST_F(GlobalStepWaiterHookTest, ProgressLogsWhenMoreThan1000PastLastLogged) {
  GlobalStepWaiterHook hook(3000, &env_);
  ASSERT_TRUE(hook.Begin(&root_).ok());
  Outcome o = BeforeRun(&hook, {0, 500, 1001, 1500, 2002, 3000});
  EXPECT_TRUE(o.status.ok()) << o.status;
  EXPECT_EQ(o.reads, 6);
  EXPECT_EQ(o.sleeps, 5);
  EXPECT_EQ(o.progress_logs, 2);
  EXPECT_EQ(o.waiting_logs, 3);  // the first line and two progress lines
  auto has = [&](const std::string& text) {
    int n = 0;
    for (const auto& l : o.lines) n += l.find(text) != std::string::npos;
    return n;
  };
  EXPECT_EQ(has("Waiting for global step 3000 before starting training. "
                "Current step is 1001."),
            1);
  EXPECT_EQ(has("Current step is 2002."), 1);
}

TEST_F(GlobalStepWaiterHookTest, BoundaryExactly1000DoesNotLog) {
  GlobalStepWaiterHook hook(2000, &env_);
  ASSERT_TRUE(hook.Begin(&root_).ok());
  Outcome o = BeforeRun(&hook, {1000, 2000});
  EXPECT_TRUE(o.status.ok());
  EXPECT_EQ(o.progress_logs, 0);
  EXPECT_EQ(o.sleeps, 1);
}

TEST_F(GlobalStepWaiterHookTest, Boundary1001Logs) {
  GlobalStepWaiterHook hook(2002, &env_);
  ASSERT_TRUE(hook.Begin(&root_).ok());
  Outcome o = BeforeRun(&hook, {1001, 2001, 2002});
  EXPECT_TRUE(o.status.ok());
  // 1001 - 0 > 1000 logs; 2001 - 1001 = 1000 does not.
  EXPECT_EQ(o.progress_logs, 1);
  EXPECT_THAT(o.lines, ::testing::Contains(
                           ::testing::HasSubstr("Current step is 1001.")));
}

TEST_F(GlobalStepWaiterHookTest, CountsFromZeroNotFromFirstRead) {
  GlobalStepWaiterHook hook(9000, &env_);
  ASSERT_TRUE(hook.Begin(&root_).ok());
  Outcome o = BeforeRun(&hook, {5000, 9000});
  EXPECT_EQ(o.progress_logs, 1);
  EXPECT_THAT(o.lines, ::testing::Contains(
                           ::testing::HasSubstr("Current step is 5000.")));
}

TEST_F(GlobalStepWaiterHookTest, ReadErrorIsReturnedAndHookNotStarted) {
  GlobalStepWaiterHook hook(20, &env_);
  ASSERT_TRUE(hook.Begin(&root_).ok());
  Outcome o = BeforeRun(&hook, {0, absl::UnavailableError("ps:0 is down")});
  EXPECT_EQ(o.status.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(o.reads, 2);
  EXPECT_EQ(o.sleeps, 1);
  EXPECT_FALSE(hook.worker_is_started());
  // The next BeforeRun (after a recovery) waits and logs again.
  Outcome again = BeforeRun(&hook, {20});
  EXPECT_TRUE(again.status.ok());
  EXPECT_EQ(again.waiting_logs, 1);
  EXPECT_TRUE(hook.worker_is_started());
}

TEST_F(GlobalStepWaiterHookTest, BeginAgainWaitsAgain) {
  GlobalStepWaiterHook hook(5, &env_);
  ASSERT_TRUE(hook.Begin(&root_).ok());
  EXPECT_TRUE(BeforeRun(&hook, {5}).status.ok());
  ASSERT_TRUE(hook.worker_is_started());
  ASSERT_TRUE(hook.Begin(&root_).ok());
  EXPECT_FALSE(hook.worker_is_started());
  EXPECT_EQ(BeforeRun(&hook, {7}).reads, 1);
}

std::unique_ptr<LocalSession> MakeLocalSession(const Scope& root) {
  GraphDef def;
  EXPECT_TRUE(root.ToGraphDef(&def).ok()) << root.status();
  SessionOptions options;
  options.num_threads = 1;
  auto s = LocalSession::Create(def, options);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *std::move(s) : nullptr;
}

// A worker that starts before the chief initialized the variables reads
// the global step as 0 and keeps waiting (TF's global step read), instead
// of failing: parked in its sleep, it then sees the initialized and
// incremented step on its next read.
TEST_F(GlobalStepWaiterHookTest, UninitializedStepReadsZeroAndKeepsWaiting) {
  ops::Variable step = ops::GetOrCreateGlobalStep(root_);
  Operation increment = ops::IncrementGlobalStep(root_, step);
  GlobalStepWaiterHook hook(1, &env_);
  ASSERT_TRUE(hook.Begin(&root_).ok());
  auto session = MakeLocalSession(root_);
  ASSERT_NE(session, nullptr);
  LogCapture logs;
  SessionRunContext ctx(SessionRunArgs(), session.get());
  absl::Status status = absl::UnknownError("BeforeRun did not return");
  std::atomic<bool> done{false};
  std::thread t([&] {
    status = hook.BeforeRun(&ctx).status();
    done = true;
  });
  // Parked in its 0.5 s sleep: the uninitialized read gave no error.
  ASSERT_TRUE(env_.BlockUntilParked(1, absl::Seconds(30)));
  EXPECT_FALSE(done);
  EXPECT_FALSE(hook.worker_is_started());
  std::vector<Tensor> out;
  ASSERT_TRUE(session->Run({}, {}, {step.initializer.name()}, &out).ok());
  ASSERT_TRUE(session->Run({}, {}, {increment.name()}, &out).ok());
  env_.AdvanceTime(GlobalStepWaiterHook::kPollInterval);
  t.join();
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_TRUE(hook.worker_is_started());
  EXPECT_EQ(logs.Count(kWaiting), 1);
}

// An int32 global step that is only in the GLOBAL_STEP collection (not
// named "global_step") is the one the hook waits on.
TEST_F(GlobalStepWaiterHookTest, Int32StepFromTheCollection) {
  Scope root = Scope::NewRootScope();
  Output handle = ops::VarHandleOp(root.WithOpName("my_step"), DT_INT32,
                                   PartialTensorShape::Scalar());
  root.AddToCollection(kGlobalStepCollection, handle.op());
  Operation set =
      ops::AssignVariableOp(root.WithOpName("set"), handle, Tensor(int32_t{7}));
  GlobalStepWaiterHook hook(5, &env_);
  ASSERT_TRUE(hook.Begin(&root).ok());
  auto session = MakeLocalSession(root);
  ASSERT_NE(session, nullptr);
  std::vector<Tensor> out;
  ASSERT_TRUE(session->Run({}, {}, {set.name()}, &out).ok());
  SessionRunContext ctx(SessionRunArgs(), session.get());
  // 7 >= 5 on the first read: no sleep, so no thread is needed.
  auto r = hook.BeforeRun(&ctx);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(hook.worker_is_started());
}

// A global step that is not an integer fails Begin as TensorFlow's
// assert_global_step does.
TEST_F(GlobalStepWaiterHookTest, FloatGlobalStepFailsBegin) {
  Scope root = Scope::NewRootScope();
  ops::VarHandleOp(root.WithOpName("global_step"), DT_FLOAT,
                   PartialTensorShape::Scalar());
  GlobalStepWaiterHook hook(5, &env_);
  absl::Status s = hook.Begin(&root);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()),
              ::testing::HasSubstr("does not have integer type"));
}

}  // namespace
}  // namespace cohort::training
