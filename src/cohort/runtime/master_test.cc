// The master, GrpcSession and Server together: a cluster of real gRPC
// servers in this process (ps:0, worker:0, worker:1 on 127.0.0.1), driven
// through GrpcSession as a client would.
#include "cohort/runtime/master.h"

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "cohort/base/fake_env.h"
#include "cohort/base/logging.h"
#include "cohort/graph/builder.h"
#include "cohort/graph/kernels/array_ops.h"
#include "cohort/graph/kernels/elementwise_ops.h"
#include "cohort/graph/kernels/math_ops.h"
#include "cohort/graph/kernels/sendrecv_ops.h"
#include "cohort/graph/kernels/state_ops.h"
#include "cohort/graph/local_session.h"
#include "cohort/rpc/socket.h"
#include "cohort/runtime/grpc_session.h"
#include "cohort/runtime/server.h"
#include "cohort/runtime/tensor_data_service.h"
#include "cohort/runtime/test_cluster.h"
#include "cohort/runtime/worker.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort::runtime {
namespace {

using ::testing::HasSubstr;

constexpr char kPs[] = "/job:ps/replica:0/task:0";
constexpr char kWorker0[] = "/job:worker/replica:0/task:0";
constexpr char kWorker1[] = "/job:worker/replica:0/task:1";
constexpr char kToken[] = "master-test-token";

// For ASSERT_TRUE / EXPECT_TRUE on a Status: a failure prints the status,
// so that a failure seen only in CI's log still says why.
::testing::AssertionResult IsOk(const absl::Status& status) {
  if (status.ok()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << status;
}

// ps:0, worker:0, worker:1, each a Server on its own port; sessions go to
// worker:0's master.
class Cluster {
 public:
  static std::unique_ptr<Cluster> Start() {
    auto c = TestCluster::Start({{"ps", 1}, {"worker", 2}}, kToken);
    if (c == nullptr) return nullptr;
    return std::unique_ptr<Cluster>(new Cluster(std::move(c)));
  }
  Server* server(const std::string& task) { return cluster_->server(task); }
  std::unique_ptr<GrpcSession> Session(const GraphDef& graph,
                                       ConfigProto config = {}) {
    return cluster_->Session(kWorker0, graph, std::move(config));
  }
  std::vector<std::unique_ptr<Server>>& servers() { return cluster_->servers; }

 private:
  explicit Cluster(std::unique_ptr<TestCluster> c) : cluster_(std::move(c)) {}
  std::unique_ptr<TestCluster> cluster_;
};

// w (on ps:0) = [1, 2]; y = (w + x) * 2 with the add on worker:1 and the
// multiply on worker:0; "update" adds x to w.
GraphDef ParameterServerGraph() {
  Scope root = Scope::NewRootScope();
  Scope ps = root.WithDevice(kPs);
  auto w =
      ops::MakeVariable(ps, "w", ops::Const(ps, Tensor::Vec<float>({1, 2})));
  ops::GlobalVariablesInitializer(ps.WithOpName("init"));
  auto x = ops::Placeholder(root.WithOpName("x").WithDevice(kWorker0), DT_FLOAT,
                            PartialTensorShape({2}));
  auto sum = ops::Add(root.WithOpName("sum").WithDevice(kWorker1), w.value, x);
  ops::Mul(root.WithOpName("y").WithDevice(kWorker0), sum,
           ops::Const(root.WithDevice(kWorker0), 2.0f));
  ops::AssignAddVariableOp(ps.WithOpName("update"), w.handle, x);
  GraphDef g;
  EXPECT_TRUE(IsOk(root.ToGraphDef(&g)));
  return g;
}

std::vector<float> Values(const Tensor& t) {
  auto flat = t.flat<float>();
  return std::vector<float>(flat.data(), flat.data() + flat.size());
}

TEST(MasterTest, StepAcrossThreeTasksMatchesLocalSession) {
  auto cluster = Cluster::Start();
  ASSERT_NE(cluster, nullptr);
  GraphDef graph = ParameterServerGraph();
  auto session = cluster->Session(graph);
  ASSERT_NE(session, nullptr);
  ASSERT_TRUE(IsOk(session->Run({}, {}, {"init"}, nullptr)));
  std::vector<Tensor> out;
  Tensor x = Tensor::Vec<float>({10, 20});
  ASSERT_TRUE(IsOk(session->Run({{"x", x}}, {"y:0", "sum:0"}, {}, &out)));
  ASSERT_EQ(out.size(), 2u);

  // The same graph in one process gives the same values.
  auto local = LocalSession::Create(graph);
  ASSERT_TRUE(local.ok()) << local.status();
  ASSERT_TRUE(IsOk((*local)->Run({}, {}, {"init"}, nullptr)));
  std::vector<Tensor> expected;
  ASSERT_TRUE(IsOk((*local)->Run({{"x", x}}, {"y:0", "sum:0"}, {}, &expected)));
  EXPECT_EQ(Values(out[0]), Values(expected[0]));
  EXPECT_EQ(Values(out[1]), Values(expected[1]));
  EXPECT_EQ(Values(out[0]), (std::vector<float>{22, 44}));
}

// Tensors between the servers take the tensor data plane (the producers'
// TensorDataService answers them), with the results LocalSession gives.
TEST(MasterTest, TensorsCrossTasksOverTheTensorDataPlane) {
  auto cluster = Cluster::Start();
  ASSERT_NE(cluster, nullptr);
  const GraphDef graph = ParameterServerGraph();
  auto session = cluster->Session(graph);
  ASSERT_NE(session, nullptr);
  ASSERT_TRUE(IsOk(session->Run({}, {}, {"init"}, nullptr)));
  const Tensor x = Tensor::Vec<float>({10, 20});
  std::vector<Tensor> out;
  for (int step = 0; step < 3; ++step) {
    out.clear();
    ASSERT_TRUE(IsOk(session->Run({{"x", x}}, {"y:0", "sum:0"}, {}, &out)));
  }
  EXPECT_EQ(Values(out[0]), std::vector<float>({22, 44}));
  EXPECT_EQ(Values(out[1]), std::vector<float>({11, 22}));
  uint64_t sent = 0;
  for (auto& server : cluster->servers()) {
    ASSERT_NE(server->tensor_data(), nullptr);
    sent += server->tensor_data()->num_tensors_sent();
  }
  // Each step moves w (ps:0 -> worker:1) and sum (worker:1 -> worker:0);
  // the first step of each peer pair may still probe over gRPC.
  EXPECT_GE(sent, 4u);
  // The master's RunGraph calls go over the data plane too, once each
  // peer's tensor port is known (the steps above found them): three more
  // steps are three RunGraphs on ps:0 and on worker:1 each; worker:0 hosts
  // the master and runs its partition in process.
  auto run_graphs = [&](const char* task) {
    return cluster->server(task)->tensor_data()->num_run_graphs();
  };
  const uint64_t ps_before = run_graphs(kPs);
  const uint64_t worker1_before = run_graphs(kWorker1);
  for (int step = 0; step < 3; ++step) {
    ASSERT_TRUE(IsOk(session->Run({{"x", x}}, {"y:0", "sum:0"}, {}, &out)));
  }
  EXPECT_EQ(run_graphs(kPs) - ps_before, 3u);
  EXPECT_EQ(run_graphs(kWorker1) - worker1_before, 3u);
  EXPECT_EQ(run_graphs(kWorker0), 0u);
}

TEST(MasterTest, VariablesOnPsOutliveTheSessionUntilReset) {
  auto cluster = Cluster::Start();
  ASSERT_NE(cluster, nullptr);
  GraphDef graph = ParameterServerGraph();
  {
    auto first = cluster->Session(graph);
    ASSERT_NE(first, nullptr);
    ASSERT_TRUE(IsOk(first->Run({}, {}, {"init"}, nullptr)));
    Tensor x = Tensor::Vec<float>({1, 1});
    ASSERT_TRUE(IsOk(first->Run({{"x", x}}, {}, {"update"}, nullptr)));
    ASSERT_TRUE(IsOk(first->Close()));
  }
  // A second session (no init) reads the value the first one left.
  auto second = cluster->Session(graph);
  ASSERT_NE(second, nullptr);
  std::vector<Tensor> out;
  absl::Status read = second->Run({}, {"w/read:0"}, {}, &out);
  ASSERT_TRUE(read.ok()) << read;
  EXPECT_EQ(Values(out[0]), (std::vector<float>{2, 3}));

  // Reset drops them: reading is an error again.
  ASSERT_TRUE(IsOk(second->Reset({})));
  auto third = cluster->Session(graph);
  ASSERT_NE(third, nullptr);
  absl::Status s = third->Run({}, {"w/read:0"}, {}, &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
}

TEST(MasterTest, ManyStepsReuseTheRegisteredPartitions) {
  auto cluster = Cluster::Start();
  ASSERT_NE(cluster, nullptr);
  auto session = cluster->Session(ParameterServerGraph());
  ASSERT_NE(session, nullptr);
  ASSERT_TRUE(IsOk(session->Run({}, {}, {"init"}, nullptr)));
  for (int i = 0; i < 50; ++i) {
    std::vector<Tensor> out;
    Tensor x = Tensor::Vec<float>({static_cast<float>(i), 0});
    ASSERT_TRUE(IsOk(session->Run({{"x", x}}, {"y:0"}, {}, &out)));
    EXPECT_EQ(Values(out[0]), (std::vector<float>{2.0f * (1 + i), 4}));
  }
  // No step leaves state behind on any worker, and none needed a
  // CleanupGraph for it: a worker forgets a step that succeeded before it
  // answers the RunGraph or RecvTensor that ends the step's part there.
  for (auto& server : cluster->servers()) {
    EXPECT_EQ(server->worker()->NumRunningSteps(), 0u) << server->task_name();
    EXPECT_EQ(server->worker()->NumStepRendezvous(), 0u) << server->task_name();
  }
}

TEST(MasterTest, CallablesRunAndReleasedHandlesAreNamed) {
  auto cluster = Cluster::Start();
  ASSERT_NE(cluster, nullptr);
  auto session = cluster->Session(ParameterServerGraph());
  ASSERT_NE(session, nullptr);
  ASSERT_TRUE(IsOk(session->Run({}, {}, {"init"}, nullptr)));
  CallableOptions options;
  options.feeds = {"x"};
  options.fetches = {"y:0"};
  auto handle = session->MakeCallable(options);
  ASSERT_TRUE(handle.ok()) << handle.status();
  std::vector<Tensor> out;
  ASSERT_TRUE(
      IsOk(session->RunCallable(*handle, {Tensor::Vec<float>({1, 1})}, &out)));
  EXPECT_EQ(Values(out[0]), (std::vector<float>{4, 6}));
  ASSERT_TRUE(IsOk(session->ReleaseCallable(*handle)));
  absl::Status s =
      session->RunCallable(*handle, {Tensor::Vec<float>({1, 1})}, &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(
      s.message(),
      HasSubstr(absl::StrCat(
          "Attempted to run callable after handle was released: ", *handle)));
  s = session->RunCallable(*handle + 7, {}, &out);
  EXPECT_THAT(s.message(), HasSubstr(absl::StrCat("No such callable handle: ",
                                                  *handle + 7)));
}

TEST(MasterTest, UnknownDeviceNamesTheNodeAndTheDevice) {
  auto cluster = Cluster::Start();
  ASSERT_NE(cluster, nullptr);
  Scope root = Scope::NewRootScope();
  ops::Const(root.WithOpName("c").WithDevice("/job:worker/task:9"), 1.0f);
  GraphDef g;
  ASSERT_TRUE(IsOk(root.ToGraphDef(&g)));
  auto session = cluster->Session(g);
  ASSERT_NE(session, nullptr);
  absl::Status s = session->Run({}, {"c:0"}, {}, nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), HasSubstr("c"));
  EXPECT_THAT(s.message(), HasSubstr("task:9"));
  // The session stays usable.
  EXPECT_TRUE(IsOk(session->Run({}, {}, {}, nullptr)));
}

TEST(MasterTest, DuplicatedFeedsAndUnknownSessionsAreRefused) {
  auto cluster = Cluster::Start();
  ASSERT_NE(cluster, nullptr);
  auto session = cluster->Session(ParameterServerGraph());
  ASSERT_NE(session, nullptr);
  Tensor x = Tensor::Vec<float>({1, 1});
  absl::Status s = session->Run({{"x", x}, {"x:0", x}}, {"y:0"}, {}, nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), HasSubstr("Duplicated feeds: x:0"));

  // A session unknown to the master (as after a master restart): Aborted,
  // which a MonitoredSession recovers from.
  Master* master = cluster->server(kWorker0)->master();
  RunStepRequest request;
  request.set_session_handle("00000000deadbeef");
  RunStepResponse response;
  s = master->RunStep(nullptr, request, &response);
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted) << s;
  EXPECT_THAT(s.message(), HasSubstr("Session 00000000deadbeef is not found."));
  CloseSessionRequest close;
  close.set_session_handle("00000000deadbeef");
  CloseSessionResponse closed;
  s = master->CloseSession(close, &closed);
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted) << s;
  EXPECT_THAT(s.message(), HasSubstr("Possibly, this master has restarted."));
}

TEST(MasterTest, RepeatedRequestIdIsRefusedNotRunTwice) {
  auto cluster = Cluster::Start();
  ASSERT_NE(cluster, nullptr);
  auto session = cluster->Session(ParameterServerGraph());
  ASSERT_NE(session, nullptr);
  ASSERT_TRUE(IsOk(session->Run({}, {}, {"init"}, nullptr)));
  Master* master = cluster->server(kWorker0)->master();
  RunStepRequest request;
  request.set_session_handle(session->handle());
  NamedTensorProto* feed = request.add_feed();
  feed->set_name("x");
  Tensor::Vec<float>({1, 1}).AsProto(feed->mutable_tensor());
  request.add_target("update");
  request.set_request_id(4242);
  RunStepResponse response;
  ASSERT_TRUE(IsOk(master->RunStep(nullptr, request, &response)));
  absl::Status s = master->RunStep(nullptr, request, &response);
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted) << s;
  EXPECT_THAT(
      s.message(),
      HasSubstr("The same RunStep (Master) request was received twice"));
  // The update ran once: w = [1, 2] + [1, 1].
  std::vector<Tensor> out;
  ASSERT_TRUE(IsOk(session->Run({}, {"w/read:0"}, {}, &out)));
  EXPECT_EQ(Values(out[0]), (std::vector<float>{2, 3}));
}

// A Recv on worker:1 whose Send never comes (a local one: the rendezvous
// of worker:1 waits for it): the step can only end by its deadline or by
// cancellation.
GraphDef StuckGraph() {
  Scope root = Scope::NewRootScope();
  ops::Recv(root.WithOpName("never").WithDevice(kWorker1), DT_FLOAT,
            "nobody_sends_this", absl::StrCat(kWorker1, "/device:CPU:0"),
            absl::StrCat(kWorker1, "/device:CPU:0"));
  GraphDef g;
  EXPECT_TRUE(IsOk(root.ToGraphDef(&g)));
  return g;
}

TEST(MasterTest, StepDeadlineNamesTheTaskStillRunning) {
  auto cluster = Cluster::Start();
  ASSERT_NE(cluster, nullptr);
  auto session = cluster->Session(StuckGraph());
  ASSERT_NE(session, nullptr);
  RunOptions options;
  options.timeout = absl::Milliseconds(300);
  absl::Status s = session->Run(options, {}, {"never:0"}, {}, nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_THAT(s.message(), HasSubstr(kWorker1));
  // The servers take new steps.
  EXPECT_TRUE(IsOk(session->Run({}, {}, {}, nullptr)));
}

TEST(MasterTest, CloseCancelsARunningStep) {
  auto cluster = Cluster::Start();
  ASSERT_NE(cluster, nullptr);
  auto session = cluster->Session(StuckGraph());
  ASSERT_NE(session, nullptr);
  absl::Status step_status;
  std::thread step(
      [&] { step_status = session->Run({}, {"never:0"}, {}, nullptr); });
  // Wait until the step runs on worker:1, then close the session.
  Worker* worker1 = cluster->server(kWorker1)->worker();
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (worker1->NumRunningSteps() == 0 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  ASSERT_EQ(worker1->NumRunningSteps(), 1u);
  ASSERT_TRUE(IsOk(session->Close()));
  step.join();
  EXPECT_EQ(step_status.code(), absl::StatusCode::kCancelled) << step_status;
  EXPECT_THAT(step_status.message(),
              HasSubstr("explicit call to `Session::Close()`"));
  EXPECT_EQ(session->Run({}, {}, {}, nullptr).code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(MasterTest, ServerStopEndsARunningStepWithUnavailable) {
  // Unavailable, not Cancelled: a client (MonitoredSession) recovers from
  // it once the task is back.
  auto cluster = Cluster::Start();
  ASSERT_NE(cluster, nullptr);
  auto session = cluster->Session(StuckGraph());
  ASSERT_NE(session, nullptr);
  Master* master = cluster->server(kWorker0)->master();
  RunStepRequest request;
  request.set_session_handle(session->handle());
  request.add_fetch("never:0");
  RunStepResponse response;
  absl::Status step_status;
  std::thread step(
      [&] { step_status = master->RunStep(nullptr, request, &response); });
  Worker* worker1 = cluster->server(kWorker1)->worker();
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (worker1->NumRunningSteps() == 0 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  const bool running = worker1->NumRunningSteps() == 1;
  const absl::Time stop_start = absl::Now();
  ASSERT_TRUE(IsOk(cluster->server(kWorker0)->Stop()));
  step.join();
  ASSERT_TRUE(running);
  EXPECT_LT(absl::Now() - stop_start, absl::Seconds(10));
  EXPECT_EQ(step_status.code(), absl::StatusCode::kUnavailable) << step_status;
  EXPECT_THAT(step_status.message(),
              HasSubstr(absl::StrCat("server ", kWorker0, " is stopping")));
}

TEST(MasterTest, WrongTokenIsUnauthenticated) {
  auto cluster = Cluster::Start();
  ASSERT_NE(cluster, nullptr);
  GrpcSessionOptions options;
  options.security.job_token = "wrong";
  auto s = GrpcSession::Create(cluster->server(kWorker0)->target(),
                               ParameterServerGraph(), options);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kUnauthenticated)
      << s.status();
}

TEST(MasterTest, DeviceFiltersLimitDiscovery) {
  auto cluster = Cluster::Start();
  ASSERT_NE(cluster, nullptr);
  ConfigProto config;
  config.add_device_filters("/job:worker");
  auto session = cluster->Session(ParameterServerGraph(), config);
  ASSERT_NE(session, nullptr);
  auto devices = session->ListDevices();
  ASSERT_TRUE(devices.ok()) << devices.status();
  std::vector<std::string> names;
  for (const auto& d : *devices) names.push_back(d.name());
  EXPECT_THAT(names, ::testing::UnorderedElementsAre(
                         absl::StrCat(kWorker0, "/device:CPU:0"),
                         absl::StrCat(kWorker1, "/device:CPU:0")));
  // The ps is not in the session, so a graph placed there is refused.
  absl::Status s = session->Run({}, {}, {"init"}, nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), HasSubstr("/job:ps"));
}

TEST(MasterTest, IdleSessionsAreGarbageCollected) {
  // One task on a fake clock; sessions idle over 30 s are collected.
  FakeEnv env;
  ServerDef def;
  JobDef* job = def.mutable_cluster()->add_job();
  job->set_name("worker");
  (*job->mutable_tasks())[0] = "127.0.0.1:0";
  def.set_job_name("worker");
  def.mutable_default_session_config()->set_session_gc_seconds(30);
  ServerOptions options;
  options.env = &env;
  auto server = Server::Create(def, options);
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_TRUE(IsOk((*server)->Start()));
  Scope root = Scope::NewRootScope();
  ops::Const(root.WithOpName("c"), 3.0f);
  GraphDef g;
  ASSERT_TRUE(IsOk(root.ToGraphDef(&g)));
  auto idle = GrpcSession::Create((*server)->target(), g);
  auto busy = GrpcSession::Create((*server)->target(), g);
  ASSERT_TRUE(idle.ok()) << idle.status();
  ASSERT_TRUE(busy.ok()) << busy.status();
  std::vector<Tensor> out;

  env.AdvanceTime(absl::Seconds(29));
  (*server)->master()->GcSessionsNow();
  // Idle for 29 s of 30: both are kept.
  ASSERT_TRUE(IsOk((*idle)->Run({}, {"c:0"}, {}, &out)));
  ASSERT_TRUE(IsOk((*busy)->Run({}, {"c:0"}, {}, &out)));

  env.AdvanceTime(absl::Seconds(29));
  ASSERT_TRUE(IsOk((*busy)->Run({}, {"c:0"}, {}, &out)));
  env.AdvanceTime(absl::Seconds(2));  // idle: 31 s, busy: 2 s.
  (*server)->master()->GcSessionsNow();
  absl::Status s = (*idle)->Run({}, {"c:0"}, {}, &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted) << s;
  EXPECT_THAT(s.message(), HasSubstr(absl::StrCat("Session ", (*idle)->handle(),
                                                  " is not found.")));
  EXPECT_TRUE(IsOk((*busy)->Run({}, {"c:0"}, {}, &out)));
}

}  // namespace
}  // namespace cohort::runtime
