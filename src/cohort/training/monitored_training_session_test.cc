#include "cohort/training/monitored_training_session.h"

#include <cmath>

#include "cohort/base/fake_env.h"
#include "cohort/graph/checkpoint.h"
#include "cohort/graph/kernels/array_ops.h"
#include "cohort/training/basic_session_run_hooks.h"
#include "cohort/training/training_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort::training {
namespace {

using testing::FileExists;
using testing::LogCapture;

int64_t Step(MonitoredSession* s) {
  std::vector<Tensor> out;
  EXPECT_TRUE(s->raw_session()->Run({}, {"global_step/read:0"}, {}, &out).ok());
  return out[0].scalar<int64_t>();
}

TEST(MonitoredTrainingSessionTest, TrainsStopsSavesAndResumes) {
  std::string dir = testing::TempDir("mts");
  LogCapture logs;
  {
    Scope root = Scope::NewRootScope();
    testing::BuildCounterModel(root);
    MonitoredTrainingSessionOptions o;
    o.checkpoint_dir = dir;
    o.save_checkpoint_steps = 3;
    o.hooks = {*StopAtStepHook::Create(std::nullopt, 10)};
    auto sess = MonitoredTrainingSession(root, o);
    ASSERT_TRUE(sess.ok()) << sess.status();
    // The job dies after 7 steps (Close still saves, as End does).
    for (int i = 0; i < 7 && !(*sess)->ShouldStop(); ++i) {
      ASSERT_TRUE((*sess)->Run({}, {"train"}, nullptr).ok());
    }
    ASSERT_TRUE((*sess)->Close().ok());
  }
  EXPECT_TRUE(FileExists(dir + "/model.ckpt-0"));
  EXPECT_TRUE(FileExists(dir + "/model.ckpt-3"));
  EXPECT_TRUE(FileExists(dir + "/model.ckpt-6"));
  EXPECT_TRUE(FileExists(dir + "/model.ckpt-7"));
  EXPECT_EQ(logs.Count("Saving checkpoints for 3 into " + dir + "/model.ckpt."),
            1);
  {
    Scope root = Scope::NewRootScope();
    testing::BuildCounterModel(root);
    MonitoredTrainingSessionOptions o;
    o.checkpoint_dir = dir;
    o.save_checkpoint_steps = 3;
    o.hooks = {*StopAtStepHook::Create(std::nullopt, 10)};
    auto sess = MonitoredTrainingSession(root, o);
    ASSERT_TRUE(sess.ok()) << sess.status();
    EXPECT_EQ(logs.Count("Restoring parameters from " + dir + "/model.ckpt-7"),
              1);
    int steps = 0;
    while (!(*sess)->ShouldStop()) {
      ASSERT_TRUE((*sess)->Run({}, {"train"}, nullptr).ok());
      ++steps;
    }
    EXPECT_EQ(steps, 3);
    EXPECT_EQ(Step(sess->get()), 10);
    std::vector<Tensor> out;
    ASSERT_TRUE((*sess)->raw_session()->Run({}, {"w/read:0"}, {}, &out).ok());
    EXPECT_EQ(out[0].scalar<float>(), 10.f);  // restored, not re-initialised
    ASSERT_TRUE((*sess)->Close().ok());
  }
  EXPECT_EQ(*cohort::Saver::LatestCheckpoint(dir), dir + "/model.ckpt-10");
}

TEST(MonitoredTrainingSessionTest, WorkerJoinsTheChiefsModel) {
  testing::SharedLocalCluster cluster;
  Scope chief_root = Scope::NewRootScope();
  testing::BuildCounterModel(chief_root);
  MonitoredTrainingSessionOptions c;
  c.session_factory = cluster.factory();
  auto chief = MonitoredTrainingSession(chief_root, c);
  ASSERT_TRUE(chief.ok()) << chief.status();
  ASSERT_TRUE((*chief)->Run({}, {"train"}, nullptr).ok());

  Scope worker_root = Scope::NewRootScope();
  testing::BuildCounterModel(worker_root);
  MonitoredTrainingSessionOptions w;
  w.is_chief = false;
  w.session_factory = cluster.factory();
  w.hooks = {*StopAtStepHook::Create(2, std::nullopt)};
  auto worker = MonitoredTrainingSession(worker_root, w);
  ASSERT_TRUE(worker.ok()) << worker.status();
  while (!(*worker)->ShouldStop()) {
    ASSERT_TRUE((*worker)->Run({}, {"train"}, nullptr).ok());
  }
  EXPECT_EQ(Step(worker->get()), 3);  // 1 by the chief + num_steps 2
  ASSERT_TRUE((*worker)->Close().ok());
  ASSERT_TRUE((*chief)->Close().ok());
}

TEST(BasicHooksTest, ArgumentErrorsAndMissingGlobalStep) {
  EXPECT_EQ(
      SecondOrStepTimer::Create(std::nullopt, std::nullopt).status().message(),
      "Either every_secs or every_steps should be provided.");
  EXPECT_EQ(SecondOrStepTimer::Create(absl::Seconds(1), 1).status().message(),
            "Can not provide both every_secs and every_steps.");
  EXPECT_EQ(StopAtStepHook::Create(1, 1).status().message(),
            "Only one of num_steps or last_step can be specified.");
  EXPECT_EQ(
      StopAtStepHook::Create(std::nullopt, std::nullopt).status().message(),
      "One of num_steps or last_step must be specified.");
  EXPECT_EQ(
      StepCounterHook::Create(std::nullopt, std::nullopt).status().message(),
      "exactly one of every_n_steps and every_n_secs should be "
      "provided.");
  EXPECT_EQ(LoggingTensorHook::Create({}, std::nullopt).status().message(),
            "either at_end and/or exactly one of every_n_iter and "
            "every_n_secs must be provided.");
  EXPECT_EQ(LoggingTensorHook::Create({}, 0).status().message(),
            "invalid every_n_iter=0.");
  CheckpointSaverHookOptions both;
  both.save_steps = 1;
  both.scaffold = std::make_shared<Scaffold>();
  both.saver = *Saver::Build(Scope::NewRootScope());
  EXPECT_EQ(CheckpointSaverHook::Create(both).status().message(),
            "You cannot provide both saver and scaffold.");

  Scope bare = Scope::NewRootScope();
  EXPECT_EQ((*StopAtStepHook::Create(1, std::nullopt))->Begin(&bare).message(),
            "Global step should be created to use StopAtStepHook.");
  EXPECT_EQ((*StepCounterHook::Create())->Begin(&bare).message(),
            "Global step should be created to use StepCounterHook.");
  CheckpointSaverHookOptions c;
  c.save_steps = 1;
  EXPECT_EQ((*CheckpointSaverHook::Create(c))->Begin(&bare).message(),
            "Global step should be created to use CheckpointSaverHook.");
}

TEST(BasicHooksTest, SecondOrStepTimerTriggers) {
  FakeEnv env;
  auto steps = *SecondOrStepTimer::Create(std::nullopt, 3, &env);
  EXPECT_TRUE(steps.ShouldTriggerForStep(0));
  EXPECT_FALSE(steps.UpdateLastTriggeredStep(0).has_value());
  EXPECT_FALSE(steps.ShouldTriggerForStep(0));
  EXPECT_FALSE(steps.ShouldTriggerForStep(2));
  EXPECT_TRUE(steps.ShouldTriggerForStep(3));
  env.AdvanceTime(absl::Seconds(2));
  auto e = steps.UpdateLastTriggeredStep(3);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->first, absl::Seconds(2));
  EXPECT_EQ(e->second, 3);
  auto secs = *SecondOrStepTimer::Create(absl::Seconds(10), std::nullopt, &env);
  secs.UpdateLastTriggeredStep(1);
  EXPECT_FALSE(secs.ShouldTriggerForStep(100));
  env.AdvanceTime(absl::Seconds(10));
  EXPECT_TRUE(secs.ShouldTriggerForStep(2));
}

class HookLoopTest : public ::testing::Test {
 protected:
  HookLoopTest() { testing::BuildCounterModel(root_); }
  std::unique_ptr<MonitoredSession> Make(HookList hooks) {
    cluster_.local.reset();  // each creator finalizes its own scaffold
    SessionCreatorOptions c;
    c.factory = cluster_.factory();
    MonitoredSessionOptions o;
    o.env = &env_;
    auto s = MonitoredSession::Create(
        root_, std::make_unique<ChiefSessionCreator>(nullptr, c), hooks, o);
    EXPECT_TRUE(s.ok()) << s.status();
    return *std::move(s);
  }
  FakeEnv env_;
  Scope root_ = Scope::NewRootScope();
  testing::SharedLocalCluster cluster_;
};

class StopListener : public CheckpointSaverListener {
 public:
  std::string name() const override { return "StopListener"; }
  absl::StatusOr<bool> AfterSave(Session*, int64_t step) override {
    saves.push_back(step);
    return step >= 4;
  }
  absl::Status End(Session*, int64_t step) override {
    end_step = step;
    return absl::OkStatus();
  }
  std::vector<int64_t> saves;
  int64_t end_step = -1;
};

TEST_F(HookLoopTest, CheckpointSaverHookSavesOnCreateEveryNAndAtEnd) {
  LogCapture logs;
  std::string dir = testing::TempDir("saver_hook");
  auto listener = std::make_shared<StopListener>();
  CheckpointSaverHookOptions c;
  c.checkpoint_dir = dir;
  c.save_steps = 2;
  c.listeners = {listener};
  c.env = &env_;
  auto sess = Make({*CheckpointSaverHook::Create(c)});
  int steps = 0;
  while (!sess->ShouldStop()) {
    ASSERT_TRUE(sess->Run({}, {"train"}, nullptr).ok());
    ++steps;
  }
  EXPECT_EQ(steps, 4);  // the listener stopped after the save at 4
  ASSERT_TRUE(sess->Close().ok());
  EXPECT_EQ(listener->saves, (std::vector<int64_t>{0, 2, 4}));
  EXPECT_EQ(listener->end_step, 4);
  EXPECT_EQ(logs.Count("A CheckpointSaverListener requested that training be "
                       "stopped. listener: StopListener"),
            1);
  EXPECT_EQ(logs.Count("Create CheckpointSaverHook."), 1);
  EXPECT_TRUE(FileExists(dir + "/model.ckpt-2"));
}

TEST_F(HookLoopTest, StepCounterLogsRateAndStuckStepWarning) {
  LogCapture logs;
  auto sess = Make({*StepCounterHook::Create(2, std::nullopt, &env_)});
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(sess->Run({}, {"train"}, nullptr).ok());
    env_.AdvanceTime(absl::Milliseconds(500));
  }
  EXPECT_GE(logs.Count("global_step/sec: 2"), 1);
  for (int i = 0; i < 21; ++i) {
    ASSERT_TRUE(sess->Run({}, {"w/read"}, nullptr).ok());
  }
  EXPECT_EQ(logs.Count("It seems that global step (tf.train.get_global_step) "
                       "has not been increased. Current value (could be "
                       "stable): 4 vs previous value: 4."),
            1);
}

TEST_F(HookLoopTest, LoggingTensorHookEveryNIter) {
  LogCapture logs;
  auto sess = Make({*LoggingTensorHook::Create(
      {{"w", "w/read:0"}, {"step", "global_step/read:0"}}, 2, std::nullopt,
      /*at_end=*/true, &env_)});
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(sess->Run({}, {"train"}, nullptr).ok());
    env_.AdvanceTime(absl::Seconds(1));
  }
  ASSERT_TRUE(sess->Close().ok());
  // Values depend on whether the reads ran before the step's updates; the
  // shape of the lines does not.
  std::vector<std::string> logged;
  for (const auto& l : logs.Lines()) {
    if (l.find("w = ") != std::string::npos) logged.push_back(l);
  }
  ASSERT_EQ(logged.size(), 3u);  // iterations 0 and 2, and at end
  EXPECT_THAT(logged[0], ::testing::HasSubstr(", step = "));
  EXPECT_THAT(logged[0], ::testing::Not(::testing::HasSubstr("sec)")));
  EXPECT_THAT(logged[1], ::testing::HasSubstr(" (2.000 sec)"));
  EXPECT_THAT(logged[2], ::testing::HasSubstr("w = 3, step = 3 (1.000 sec)"));
}

TEST_F(HookLoopTest, NanTensorHookFailsOrStops) {
  LogCapture logs;
  auto sess = Make({std::make_shared<NanTensorHook>("x_out:0")});
  absl::Status s = sess->Run(RunOptions(), {{"x", Tensor(std::nanf(""))}}, {},
                             {"train"}, nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(), "NaN loss during training.");
  EXPECT_EQ(logs.Count("Model diverged with loss = NaN."), 1);
  auto lenient = Make({std::make_shared<NanTensorHook>("x_out:0", false)});
  ASSERT_TRUE(
      lenient->Run(RunOptions(), {{"x", Tensor(1.f)}}, {}, {"train"}, nullptr)
          .ok());
  EXPECT_FALSE(lenient->ShouldStop());
  ASSERT_TRUE(lenient
                  ->Run(RunOptions(), {{"x", Tensor(std::nanf(""))}}, {},
                        {"train"}, nullptr)
                  .ok());
  EXPECT_TRUE(lenient->ShouldStop());
}

TEST_F(HookLoopTest, FinalOpsHookKeepsValues) {
  auto final_ops =
      std::make_shared<FinalOpsHook>(std::vector<std::string>{"w/read:0"});
  auto sess = Make({final_ops});
  ASSERT_TRUE(sess->Run({}, {"train"}, nullptr).ok());
  ASSERT_TRUE(sess->Close().ok());
  ASSERT_EQ(final_ops->final_ops_values().size(), 1u);
  EXPECT_EQ(final_ops->final_ops_values()[0].scalar<float>(), 1.f);
}

}  // namespace
}  // namespace cohort::training
