#include "cohort/training/session_creator.h"

#include "cohort/base/fake_env.h"
#include "cohort/graph/kernels/array_ops.h"
#include "cohort/training/session_manager.h"
#include "cohort/training/training_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort::training {
namespace {

using ::testing::HasSubstr;
using testing::LogCapture;
using testing::SharedLocalCluster;

float W(Session* s) {
  std::vector<Tensor> out;
  EXPECT_TRUE(s->Run({}, {"w/read:0"}, {}, &out).ok());
  return out[0].scalar<float>();
}

TEST(SessionCreatorTest, ChiefInitialisesThenRestoresTheLatestCheckpoint) {
  std::string dir = testing::TempDir("chief");
  Scope root = Scope::NewRootScope();
  testing::BuildCounterModel(root);
  auto scaffold = std::make_shared<Scaffold>();
  ChiefSessionCreator chief(scaffold, SessionCreatorOptions(), dir);
  auto first = chief.CreateSession(root);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(W(first->get()), 0.f);
  ASSERT_TRUE((*first)->Run({}, {}, {"train"}, nullptr).ok());
  ASSERT_TRUE((*first)->Run({}, {}, {"train"}, nullptr).ok());
  ASSERT_TRUE(scaffold->saver->Save(first->get(), dir, 2).ok());

  LogCapture logs;
  auto second = chief.CreateSession(root);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(W(second->get()), 2.f);
  EXPECT_EQ(logs.Count("Restoring parameters from " + dir + "/model.ckpt-2"),
            1);
}

TEST(SessionCreatorTest, ChiefReportsAModelInitDidNotMakeReady) {
  Scope root = Scope::NewRootScope();
  testing::BuildCounterModel(root);
  ops::NoOp(root.WithOpName("noop"));
  auto scaffold = std::make_shared<Scaffold>();
  scaffold->init_op = "noop";
  ChiefSessionCreator chief(scaffold, SessionCreatorOptions());
  auto s = chief.CreateSession(root);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.status().message(),
            "Init operations did not make model ready.  Init op: noop, init "
            "fn: None, local_init_op: None, error: Variables not "
            "initialized: global_step, w");
}

TEST(SessionCreatorTest, ManagerWithoutAnyInitFails) {
  Scope root = Scope::NewRootScope();
  testing::BuildCounterModel(root);
  GraphDef def;
  ASSERT_TRUE(root.ToGraphDef(&def).ok());
  SessionManager manager(def, SessionManagerOptions());
  auto s = manager.PrepareSession("", ConfigProto(), PrepareSessionOptions());
  EXPECT_EQ(s.status().message(),
            "Model is not initialized and no init_op or init_fn or "
            "local_init_op was given");
}

TEST(SessionCreatorTest, WorkerWaitsForTheChief) {
  LogCapture logs;
  FakeEnv env;
  SharedLocalCluster cluster;
  Scope root = Scope::NewRootScope();
  testing::BuildCounterModel(root);
  SessionCreatorOptions o;
  o.env = &env;
  o.factory = cluster.factory();
  o.recovery_wait = absl::Seconds(1);
  WorkerSessionCreator worker(nullptr, o, absl::Seconds(60));
  absl::StatusOr<std::unique_ptr<Session>> session;
  std::thread t([&] { session = worker.CreateSession(root); });
  ASSERT_TRUE(env.BlockUntilParked(1));
  EXPECT_EQ(logs.Count("Waiting for model to be ready.  "
                       "Ready_for_local_init_op:  None, ready: Variables not "
                       "initialized: global_step, w"),
            1);
  // The "chief" initialises the shared variables; the worker's next check
  // passes.
  ASSERT_TRUE(cluster.local->Run({}, {}, {"scaffold/init"}, nullptr).ok());
  env.AdvanceTime(absl::Seconds(1));
  t.join();
  ASSERT_TRUE(session.ok()) << session.status();
  EXPECT_EQ(*cluster.created, 2);
}

TEST(SessionCreatorTest, WorkerGivesUpAfterMaxWait) {
  FakeEnv env;
  SharedLocalCluster cluster;
  Scope root = Scope::NewRootScope();
  testing::BuildCounterModel(root);
  SessionCreatorOptions o;
  o.env = &env;
  o.factory = cluster.factory();
  o.recovery_wait = absl::Seconds(1);
  WorkerSessionCreator worker(nullptr, o, absl::Seconds(2));
  absl::StatusOr<std::unique_ptr<Session>> session;
  absl::Duration waited = testing::DriveClock(
      &env, absl::Seconds(1), [&] { session = worker.CreateSession(root); });
  EXPECT_EQ(session.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(session.status().message(),
            "Session was not ready after waiting 2 secs.");
  EXPECT_EQ(waited, absl::Seconds(2));
  EXPECT_EQ(*cluster.created, 3);
}

TEST(SessionFactoryTest, TargetsPickTheSession) {
  Scope root = Scope::NewRootScope();
  testing::BuildCounterModel(root);
  GraphDef def;
  ASSERT_TRUE(root.ToGraphDef(&def).ok());
  SessionFactory f = DefaultSessionFactory();
  EXPECT_TRUE(f("", def, ConfigProto()).ok());
  EXPECT_TRUE(f("local", def, ConfigProto()).ok());
  auto bad = f("tcp://x:1", def, ConfigProto());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("tcp://x:1"));
}

}  // namespace
}  // namespace cohort::training
