// Server: configuration errors (docs/runtime.md, in
// TensorFlow's order and words) and the lifecycle state machine.
#include "cohort/runtime/server.h"

#include <climits>
#include <thread>

#include "absl/strings/str_cat.h"
#include "cohort/base/json.h"
#include "cohort/cluster/cluster_spec.h"
#include "cohort/graph/builder.h"
#include "cohort/graph/kernels/array_ops.h"
#include "cohort/graph/kernels/elementwise_ops.h"
#include "cohort/graph/kernels/random_ops.h"
#include "cohort/graph/kernels/sendrecv_ops.h"
#include "cohort/graph/kernels/shape_ops.h"
#include "cohort/rpc/socket.h"
#include "cohort/runtime/grpc_session.h"
#include "cohort/runtime/local_master.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort::runtime {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

ServerDef OneTask(const std::string& address) {
  ServerDef def;
  JobDef* job = def.mutable_cluster()->add_job();
  job->set_name("worker");
  (*job->mutable_tasks())[0] = address;
  def.set_job_name("worker");
  def.set_task_index(0);
  return def;
}

TEST(ServerTest, UnknownProtocolIsNotFound) {
  ServerDef def = OneTask("127.0.0.1:0");
  def.set_protocol("grpc+verbs");
  auto s = Server::Create(def);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(s.status().message(),
              HasSubstr("No server factory registered for the given "
                        "ServerDef"));
  EXPECT_THAT(s.status().message(), HasSubstr("[ GRPC_SERVER ]"));
}

TEST(ServerTest, JobAndTaskMustBeInTheCluster) {
  ServerDef def = OneTask("127.0.0.1:0");
  def.set_job_name("ps");
  auto s = Server::Create(def);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.status().message(), "Job \"ps\" was not defined in cluster");
  def = OneTask("127.0.0.1:0");
  def.set_task_index(3);
  s = Server::Create(def);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.status().message(), "Task 3 was not defined in job \"worker\"");
}

TEST(ServerTest, AddressWithoutPortNamesIt) {
  auto s = Server::Create(OneTask("localhost"));
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.status().message(),
            "Could not parse port for local server from \"localhost\".");
  s = Server::Create(OneTask("localhost:http"));
  EXPECT_THAT(s.status().message(), HasSubstr("port"));
}

TEST(ServerTest, PortZeroOnlyInASingleTaskCluster) {
  ServerDef def = OneTask("127.0.0.1:0");
  (*def.mutable_cluster()->mutable_job(0)->mutable_tasks())[1] = "127.0.0.1:1";
  auto s = Server::Create(def);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.status().message(), HasSubstr("/job:worker/replica:0/task:0"));
  EXPECT_THAT(s.status().message(), HasSubstr("port 0"));
}

// TF's create_local_server / Server({"job": ["localhost:0"]}): a cluster of
// one task may ask for port 0; the server binds a port the OS picks and its
// target names that port, where a session then runs a step.
TEST(ServerTest, PortZeroInASingleTaskClusterServesOnTheBoundPort) {
  auto spec = ClusterSpec::FromJson(
      Json::parse(R"({"worker": ["localhost:0"]})"), "cluster");
  ASSERT_TRUE(spec.ok()) << spec.status();
  auto def = MakeServerDef(*spec, std::nullopt, std::nullopt);
  ASSERT_TRUE(def.ok()) << def.status();
  ServerOptions options;
  options.security.job_token = "server-test-token-0123";
  auto server = Server::Create(*def, options);
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->bound_port();
  EXPECT_GT(port, 0);
  EXPECT_EQ((*server)->target(), absl::StrCat("grpc://localhost:", port));
  ASSERT_TRUE((*server)->Start().ok());

  Scope root = Scope::NewRootScope().WithDevice("/job:worker/replica:0/task:0");
  auto x = ops::Placeholder(root.WithOpName("x"), DT_INT32);
  ops::Identity(root.WithOpName("y"), x);
  GraphDef graph;
  ASSERT_TRUE(root.ToGraphDef(&graph).ok());
  GrpcSessionOptions session_options;
  session_options.security = options.security;
  auto session =
      GrpcSession::Create((*server)->target(), graph, session_options);
  ASSERT_TRUE(session.ok()) << session.status();
  std::vector<Tensor> out;
  ASSERT_TRUE((*session)
                  ->Run({{"x", Tensor::Vec<int32_t>({41})}}, {"y:0"}, {}, &out)
                  .ok());
  EXPECT_TRUE(out[0].Equals(Tensor::Vec<int32_t>({41})));
}

// A session whose target is a server of its own process calls that master in
// process (LocalMaster), but only with the server's token; once the server
// stopped, its in-process calls are refused naming the target.
TEST(ServerTest, ASessionInTheServersProcessCallsItsMasterInProcess) {
  ServerOptions options;
  options.security.job_token = "server-test-token-local";
  auto server = Server::Create(OneTask("127.0.0.1:0"), options);
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_TRUE((*server)->Start().ok());
  const std::string target = (*server)->target();
  EXPECT_NE(LocalMaster::Find(target, options.security.job_token), nullptr);
  EXPECT_EQ(LocalMaster::Find(target, "another-token"), nullptr);

  Scope root = Scope::NewRootScope();
  ops::Identity(root.WithOpName("y"), ops::Const(root, 7));
  GraphDef graph;
  ASSERT_TRUE(root.ToGraphDef(&graph).ok());
  GrpcSessionOptions session_options;
  session_options.security = options.security;
  auto session = GrpcSession::Create(target, graph, session_options);
  ASSERT_TRUE(session.ok()) << session.status();
  std::vector<Tensor> out;
  ASSERT_TRUE((*session)->Run({}, {"y:0"}, {}, &out).ok());
  EXPECT_EQ(out[0].scalar<int32_t>(), 7);

  ASSERT_TRUE((*server)->Stop().ok());
  EXPECT_EQ(LocalMaster::Find(target, options.security.job_token), nullptr);
  absl::Status after = (*session)->Run({}, {"y:0"}, {}, &out);
  EXPECT_EQ(after.code(), absl::StatusCode::kUnavailable) << after;
  EXPECT_EQ(after.message(), absl::StrCat("the master at ", target,
                                          " (in this process) has stopped"));
}

// CheckServerDef is Create's configuration checks without binding: OK for
// a port another server holds (Create then fails to bind), the same errors
// as Create otherwise.
TEST(ServerTest, CheckServerDefChecksWithoutBinding) {
  auto first = Server::Create(OneTask("127.0.0.1:0"));
  ASSERT_TRUE(first.ok()) << first.status();
  const ServerDef taken =
      OneTask(absl::StrCat("127.0.0.1:", (*first)->bound_port()));
  EXPECT_TRUE(Server::CheckServerDef(taken).ok());
  EXPECT_EQ(Server::Create(taken).status().code(),
            absl::StatusCode::kUnavailable);

  absl::Status no_port = Server::CheckServerDef(OneTask("localhost"));
  EXPECT_EQ(no_port.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(no_port.message(),
            "Could not parse port for local server from \"localhost\".");
  // ServerDef.port supplies the port the address lacks.
  ServerDef with_port = OneTask("localhost");
  with_port.set_port(2222);
  EXPECT_TRUE(Server::CheckServerDef(with_port).ok());
  ServerDef two = OneTask("127.0.0.1:0");
  (*two.mutable_cluster()->mutable_job(0)->mutable_tasks())[1] = "127.0.0.1:1";
  EXPECT_THAT(Server::CheckServerDef(two).message(), HasSubstr("port 0"));
  ServerDef unknown_job = OneTask("127.0.0.1:0");
  unknown_job.set_job_name("ps");
  EXPECT_EQ(Server::CheckServerDef(unknown_job).message(),
            "Job \"ps\" was not defined in cluster");
}

TEST(ServerTest, PortInUseIsUnavailableNamingIt) {
  auto first = Server::Create(OneTask("127.0.0.1:0"));
  ASSERT_TRUE(first.ok()) << first.status();
  const std::string address =
      absl::StrCat("127.0.0.1:", (*first)->bound_port());
  auto second = Server::Create(OneTask(address));
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(second.status().message(), HasSubstr(address));
}

TEST(ServerTest, ServerDefPortOverridesTheAddress) {
  auto port = rpc::PickFreePort("127.0.0.1");
  ASSERT_TRUE(port.ok());
  ServerDef def = OneTask("127.0.0.1:1");
  def.set_port(*port);
  auto s = Server::Create(def);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ((*s)->bound_port(), *port);
  EXPECT_EQ((*s)->target(), absl::StrCat("grpc://127.0.0.1:", *port));
}

TEST(ServerTest, LocalServerTargetAndLifecycle) {
  auto server = Server::CreateLocal();
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_THAT((*server)->target(), StartsWith("grpc://localhost:"));
  EXPECT_EQ((*server)->task_name(), "/job:localhost/replica:0/task:0");
  ASSERT_TRUE((*server)->Start().ok());
  EXPECT_TRUE((*server)->Start().ok());  // Already started: OK.

  // Join blocks until another thread stops the server.
  std::thread joiner([&] { EXPECT_TRUE((*server)->Join().ok()); });
  EXPECT_TRUE((*server)->Stop().ok());
  joiner.join();
  EXPECT_TRUE((*server)->Stop().ok());  // Idempotent.
  absl::Status restart = (*server)->Start();
  EXPECT_EQ(restart.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(restart.message(), "Server has stopped.");
  EXPECT_TRUE((*server)->Join().ok());  // At once.
}

TEST(ServerTest, JoinBeforeStartPreventsStart) {
  auto server = Server::CreateLocal();
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_TRUE((*server)->Join().ok());
  EXPECT_EQ((*server)->Start().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(ServerTest, StoppedServerRefusesNewSessions) {
  auto server = Server::CreateLocal();
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_TRUE((*server)->Start().ok());
  const std::string target = (*server)->target();
  ASSERT_TRUE((*server)->Stop().ok());
  GrpcSessionOptions options;
  options.rpc_timeout = absl::Milliseconds(500);
  auto session = GrpcSession::Create(target, GraphDef(), options);
  // Unreachable, whether the wait ran out between connection attempts or
  // during one (GrpcSession::Create's contract).
  EXPECT_EQ(session.status().code(), absl::StatusCode::kUnavailable)
      << session.status();
  EXPECT_THAT(session.status().message(), HasSubstr(target));
}

TEST(ServerTest, JobNamesThatWouldBreakDeviceNamesAreRefused) {
  for (const char* name : {"a/b", "ps:0", "", "two words", "9lives"}) {
    SCOPED_TRACE(name);
    ServerDef def = OneTask("127.0.0.1:0");
    def.mutable_cluster()->mutable_job(0)->set_name(name);
    def.set_job_name(name);
    auto s = Server::Create(def);
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(s.status().message(), HasSubstr("not a valid job name"));
  }
}

TEST(ServerTest, ThreadsAndStepTimeoutAreChecked) {
  ServerOptions options;
  options.num_threads = kMaxServerThreads + 1;
  auto s = Server::Create(OneTask("127.0.0.1:0"), options);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.status().message(), HasSubstr("1025 threads"));
  options.num_threads = 0;
  options.default_step_timeout = absl::ZeroDuration();
  s = Server::Create(OneTask("127.0.0.1:0"), options);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.status().message(), HasSubstr("step timeout"));
}

// A started one-task server with a job token, and a session on it for
// `graph`, as a client process would make one.
struct LiveServer {
  std::unique_ptr<Server> server;
  std::unique_ptr<GrpcSession> session;
};
LiveServer StartWithSession(const Scope& root, ServerOptions options) {
  options.security.job_token = "server-test-token-0123";
  LiveServer live;
  auto server = Server::Create(OneTask("127.0.0.1:0"), options);
  EXPECT_TRUE(server.ok()) << server.status();
  if (!server.ok()) return live;
  live.server = std::move(*server);
  EXPECT_TRUE(live.server->Start().ok());
  GraphDef graph;
  EXPECT_TRUE(root.ToGraphDef(&graph).ok());
  GrpcSessionOptions session_options;
  session_options.security = options.security;
  session_options.rpc_timeout = absl::Seconds(30);
  auto session =
      GrpcSession::Create(live.server->target(), graph, session_options);
  EXPECT_TRUE(session.ok()) << session.status();
  if (session.ok()) live.session = std::move(*session);
  return live;
}

// A step whose session sets no timeout still ends, at the server's
// default, naming the task that was still running it.
TEST(ServerTest, AStepWithoutATimeoutEndsAtTheServersDefault) {
  ServerOptions options;
  options.default_step_timeout = absl::Milliseconds(500);
  const std::string task = "/job:worker/replica:0/task:0";
  const std::string device = task + "/device:CPU:0";
  Scope root = Scope::NewRootScope().WithDevice(task);
  // A Recv nothing sends: the step can only end by its deadline.
  auto stuck = ops::Recv(root.WithOpName("wait"), DT_FLOAT, "never_sent",
                         device, device);
  ops::Identity(root.WithOpName("stuck"), stuck);
  LiveServer live = StartWithSession(root, options);
  ASSERT_NE(live.session, nullptr);
  absl::Status step = live.session->Run({}, {"stuck:0"}, {}, nullptr);
  // Only the server's default could end it: the session set no timeout.
  // (The partition's executor and the master hold the same deadline; either
  // may report it first, and both name the task.)
  EXPECT_EQ(step.code(), absl::StatusCode::kDeadlineExceeded) << step;
  EXPECT_THAT(std::string(step.message()), HasSubstr(task));
}

// The graphs that used to kill a server (SIGFPE, an out-of-memory abort),
// sent to a live one over gRPC: each fails (or wraps) in its own step, and
// the server goes on serving.
TEST(ServerTest, GraphsThatKilledAServerFailOnlyTheirStep) {
  Scope root = Scope::NewRootScope().WithDevice("/job:worker/replica:0/task:0");
  auto x = ops::Placeholder(root.WithOpName("x"), DT_INT32);
  auto y = ops::Placeholder(root.WithOpName("y"), DT_INT32);
  ops::Div(root.WithOpName("div"), x, y);
  auto dims = ops::Placeholder(root.WithOpName("dims"), DT_INT32);
  ops::Fill(root.WithOpName("fill"), dims, 1.0f);
  ops::RandomUniform(root.WithOpName("rand"), dims, DT_FLOAT);
  LiveServer live = StartWithSession(root, {});
  ASSERT_NE(live.session, nullptr);
  GrpcSession* session = live.session.get();
  std::vector<Tensor> out;
  // INT_MIN / -1: the two's complement answer, not SIGFPE.
  ASSERT_TRUE(session
                  ->Run({{"x", Tensor::Vec<int32_t>({INT_MIN})},
                         {"y", Tensor::Vec<int32_t>({-1})}},
                        {"div:0"}, {}, &out)
                  .ok());
  EXPECT_TRUE(out[0].Equals(Tensor::Vec<int32_t>({INT_MIN})));
  absl::Status by_zero = session->Run(
      {{"x", Tensor::Vec<int32_t>({7})}, {"y", Tensor::Vec<int32_t>({0})}},
      {"div:0"}, {}, &out);
  EXPECT_EQ(by_zero.code(), absl::StatusCode::kInvalidArgument) << by_zero;
  EXPECT_THAT(by_zero.message(), HasSubstr("div"));
  for (const char* fetch : {"fill:0", "rand:0"}) {
    absl::Status huge = session->Run(
        {{"dims", Tensor::Vec<int32_t>({2147483647, 512})}}, {fetch}, {}, &out);
    EXPECT_EQ(huge.code(), absl::StatusCode::kResourceExhausted) << huge;
    EXPECT_THAT(huge.message(), HasSubstr("needs 4398046509056 bytes"));
  }
  // Still serving, for this session and a new one.
  ASSERT_TRUE(
      session
          ->Run({{"dims", Tensor::Vec<int32_t>({2, 3})}}, {"fill:0"}, {}, &out)
          .ok());
  EXPECT_EQ(out[0].NumElements(), 6);
  GraphDef graph;
  ASSERT_TRUE(root.ToGraphDef(&graph).ok());
  GrpcSessionOptions again;
  again.security.job_token = "server-test-token-0123";
  auto second = GrpcSession::Create(live.server->target(), graph, again);
  EXPECT_TRUE(second.ok()) << second.status();
}

}  // namespace
}  // namespace cohort::runtime
