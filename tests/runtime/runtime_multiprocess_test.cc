// The distributed runtime between real processes: `cohort server` for
// ps:0, worker:0 and worker:1 on 127.0.0.1, driven by `cohort run` and by a
// GrpcSession in this process; kill -9 between and during steps, restart
// on the same port, SIGTERM, configuration errors.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "cohort/base/json.h"
#include "cohort/graph/builder.h"
#include "cohort/graph/kernels/array_ops.h"
#include "cohort/graph/kernels/math_ops.h"
#include "cohort/graph/kernels/sendrecv_ops.h"
#include "cohort/graph/kernels/state_ops.h"
#include "cohort/rpc/socket.h"
#include "cohort/runtime/grpc_session.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/coord/test_process.h"

namespace cohort::testing {
namespace {

using ::testing::HasSubstr;

const char kCohort[] = COHORT_BINARY;
constexpr char kToken[] = "multiprocess-runtime-token";
constexpr char kPs[] = "/job:ps/replica:0/task:0";
constexpr char kWorker0[] = "/job:worker/replica:0/task:0";

// Three `cohort server` processes, each started (and restartable) on a
// fixed port of the cluster.
class ProcessCluster {
 public:
  ProcessCluster() {
    for (const char* task : {"ps:0", "worker:0", "worker:1"}) {
      auto port = rpc::PickFreePort("127.0.0.1");
      EXPECT_TRUE(port.ok()) << port.status();
      ports_[task] = *port;
    }
    cluster_json_ =
        absl::StrCat(R"({"ps": ["127.0.0.1:)", ports_["ps:0"],
                     R"("], "worker": ["127.0.0.1:)", ports_["worker:0"],
                     R"(", "127.0.0.1:)", ports_["worker:1"], R"("]})");
    setenv("COHORT_JOB_TOKEN", kToken, 1);
  }

  // Starts `job:index` and waits for its "serving" line.
  TestProcess* Start(const std::string& job, int index) {
    const std::string key = absl::StrCat(job, ":", index);
    auto p = std::make_unique<TestProcess>(std::vector<std::string>{
        kCohort, "server", "--cluster", cluster_json_, "--job", job, "--task",
        std::to_string(index), "--threads", "2", "--heartbeat-timeout", "2"});
    std::string line = p->WaitForLine("serving");
    EXPECT_EQ(line, absl::StrCat("serving grpc://127.0.0.1:", ports_[key]));
    servers_[key] = std::move(p);
    return servers_[key].get();
  }
  void StartAll() {
    Start("ps", 0);
    Start("worker", 0);
    Start("worker", 1);
  }
  // Waits until the coordination service (on worker:0, the leader) reports
  // every task connected: a task registers in the background after it
  // serves, and one that stops before registering is "still starting", not
  // lost. False on the deadline.
  bool WaitUntilAllRegistered(absl::Duration timeout = absl::Seconds(20));
  // Waits until the service reports `key` ("ps:0") in `state` ("error").
  bool WaitForState(const std::string& key, const std::string& state,
                    absl::Duration timeout = absl::Seconds(20));
  TestProcess* server(const std::string& key) { return servers_[key].get(); }
  std::string target(const std::string& key) {
    return absl::StrCat("grpc://127.0.0.1:", ports_[key]);
  }
  const std::string& cluster_json() const { return cluster_json_; }

  // Stops every server with SIGTERM (a clean stop) and waits for them.
  ~ProcessCluster() {
    for (auto& [key, p] : servers_) p->Terminate();
    for (auto& [key, p] : servers_) p->Wait(absl::Seconds(10));
  }

 private:
  std::map<std::string, int> ports_;
  std::string cluster_json_;
  std::map<std::string, std::unique_ptr<TestProcess>> servers_;
};

// A CLI run to completion: stdout lines and exit code.
struct Result {
  std::vector<std::string> lines;
  int exit_code = -1;
};

Result RunCli(std::vector<std::string> args) {
  args.insert(args.begin(), kCohort);
  TestProcess p(args);
  p.WaitForLine("\x01never\x01", absl::Seconds(60));  // Reads until EOF.
  Result r;
  r.lines = p.lines();
  const int status = p.Wait(absl::Seconds(10));
  r.exit_code = (status >= 0 && WIFEXITED(status)) ? WEXITSTATUS(status) : -1;
  return r;
}

// Polls `cohort status` against the service (on worker:0, the leader) until
// `done(tasks)` holds for its task list; false on the deadline.
bool PollStatus(int port, absl::Duration timeout,
                const std::function<bool(const Json& tasks)>& done) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    Result r = RunCli({"status", "--coordinator",
                       absl::StrCat("127.0.0.1:", port), "--format", "json"});
    auto status = r.lines.empty()
                      ? absl::StatusOr<Json>(absl::NotFoundError("no output"))
                      : ParseJson(r.lines.back(), "cohort status");
    if (r.exit_code == 0 && status.ok() && status->contains("tasks") &&
        done((*status)["tasks"])) {
      return true;
    }
    // Polls a child process; the pause only paces the polling.
    absl::SleepFor(absl::Milliseconds(100));
  }
  return false;
}

bool ProcessCluster::WaitUntilAllRegistered(absl::Duration timeout) {
  return PollStatus(ports_["worker:0"], timeout, [&](const Json& tasks) {
    size_t connected = 0;
    for (const Json& t : tasks) {
      if (t.value("state", "") == "connected") ++connected;
    }
    return connected == ports_.size();
  });
}

bool ProcessCluster::WaitForState(const std::string& key,
                                  const std::string& state,
                                  absl::Duration timeout) {
  return PollStatus(ports_["worker:0"], timeout, [&](const Json& tasks) {
    for (const Json& t : tasks) {
      if (t.value("task", "") == key && t.value("state", "") == state) {
        return true;
      }
    }
    return false;
  });
}

// x (fed on worker:0) + c (a Const on ps:0), added on worker:1.
std::string WriteGraphFile() {
  const std::string path = absl::StrCat(
      ::testing::TempDir(), "/runtime_mp_graph_", getpid(), ".pbtxt");
  FILE* f = fopen(path.c_str(), "w");
  EXPECT_NE(f, nullptr);
  fputs(
      R"(node { name: "x" op: "Placeholder" device: "/job:worker/task:0"
  attr { key: "dtype" value { type: DT_FLOAT } } }
node { name: "c" op: "Const" device: "/job:ps/task:0"
  attr { key: "dtype" value { type: DT_FLOAT } }
  attr { key: "value" value { tensor { dtype: DT_FLOAT
    tensor_shape { dim { size: 2 } } float_val: 1 float_val: 2 } } } }
node { name: "y" op: "Add" device: "/job:worker/task:1" input: "x"
  input: "c" attr { key: "T" value { type: DT_FLOAT } }
  attr { key: "_output_shapes" value { list { shape { dim { size: 2 } } } } } }
versions { producer: 27 }
library {}
)",
      f);
  fclose(f);
  return path;
}

std::unique_ptr<runtime::GrpcSession> NewSession(const std::string& target,
                                                 const GraphDef& graph) {
  runtime::GrpcSessionOptions options;
  options.security.job_token = kToken;
  options.rpc_timeout = absl::Seconds(30);
  options.config.set_operation_timeout_in_ms(20000);
  auto s = runtime::GrpcSession::Create(target, graph, options);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? std::move(*s) : nullptr;
}

// ps:0 computes c + 1 and worker:0 fetches it: a step that needs ps.
GraphDef PsGraph() {
  Scope root = Scope::NewRootScope();
  Scope ps = root.WithDevice(kPs);
  auto c = ops::Const(ps.WithOpName("c"), 41.0f);
  auto y = ops::Add(ps.WithOpName("y"), c, ops::Const(ps, 1.0f));
  ops::Identity(root.WithOpName("out").WithDevice(kWorker0), y);
  // A Recv on ps:0 that nobody sends: a step fetching "stuck" runs on ps
  // until it is cancelled or ps dies. Before it waits, the step counts
  // itself in the variable "entered" on ps:0 (the Recv runs after "mark"),
  // so a test that reads the count up knows a stuck step's RunGraph is
  // executing on ps:0, parked at the Recv ("init" sets the count to 0).
  auto entered = ops::MakeVariable(ps, "entered", 0.0f);
  auto mark = ops::AssignAddVariableOp(ps.WithOpName("mark"), entered.handle,
                                       ops::Const(ps, 1.0f));
  auto stuck = ops::Recv(
      root.WithOpName("wait").WithDevice(kPs).WithControlDependencies({mark}),
      DT_FLOAT, "never_sent", absl::StrCat(kPs, "/device:CPU:0"),
      absl::StrCat(kPs, "/device:CPU:0"));
  ops::Identity(root.WithOpName("stuck").WithDevice(kWorker0), stuck);
  ops::Identity(root.WithOpName("entered_now").WithDevice(kWorker0),
                entered.value);
  ops::GlobalVariablesInitializer(root.WithDevice(kPs));
  GraphDef g;
  EXPECT_TRUE(root.ToGraphDef(&g).ok());
  return g;
}

// Waits until a stuck step of `session` (PsGraph, "init" run before it
// started) is executing on ps:0: its "mark" has run there. False on the
// deadline.
bool WaitUntilStuckStepIsOnPs(runtime::GrpcSession* session,
                              absl::Duration timeout = absl::Seconds(20)) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    std::vector<Tensor> out;
    absl::Status s = session->Run({}, {"entered_now:0"}, {}, &out);
    if (!s.ok()) {
      ADD_FAILURE() << "reading the stuck step's mark on ps:0: " << s;
      return false;
    }
    if (out[0].scalar<float>() >= 1.0f) return true;
    // Polls a step's progress on ps:0; the pause only paces the polling.
    absl::SleepFor(absl::Milliseconds(10));
  }
  return false;
}

TEST(RuntimeMultiprocessTest, CohortRunAcrossThreeServerProcesses) {
  ProcessCluster cluster;
  cluster.StartAll();
  const std::string graph = WriteGraphFile();
  Result r = RunCli({"run", "--target", cluster.target("worker:0"), "--graph",
                     graph, "--feed", "x=[10, 20]", "--fetch", "y:0", "--steps",
                     "3", "--format", "json"});
  ASSERT_EQ(r.exit_code, 0) << absl::StrJoin(r.lines, "\n");
  ASSERT_EQ(r.lines.size(), 1u) << absl::StrJoin(r.lines, "\n");
  auto json = ParseJson(r.lines[0], "cohort run output");
  ASSERT_TRUE(json.ok()) << json.status();
  const Json& y = (*json)["y:0"];
  EXPECT_EQ(y["dtype"], "float32");
  EXPECT_EQ(y["shape"], Json::array({2}));
  EXPECT_EQ(y["values"], Json::array({11.0, 22.0}));

  // A feed whose shape cannot be added to c's: exit 1 (the message, on
  // stderr, names node y).
  r = RunCli({"run", "--target", cluster.target("worker:0"), "--graph", graph,
              "--feed", "x=[1, 2, 3]", "--fetch", "y:0"});
  EXPECT_EQ(r.exit_code, 1);
  // No token: refused.
  unsetenv("COHORT_JOB_TOKEN");
  r = RunCli({"run", "--target", cluster.target("worker:0"), "--graph", graph,
              "--feed", "x=[1, 2]", "--fetch", "y:0", "--timeout", "10"});
  setenv("COHORT_JOB_TOKEN", kToken, 1);
  EXPECT_EQ(r.exit_code, 1);
}

// A CollectiveReduce on each worker process, driven by one `cohort run`: the
// runtime forms the group through the leader the flag names (no program
// registers anything) and both tasks get the sum.
TEST(RuntimeMultiprocessTest, CohortRunsACollectiveAcrossServerProcesses) {
  ProcessCluster cluster;
  cluster.StartAll();
  const std::string path = absl::StrCat(
      ::testing::TempDir(), "/runtime_mp_collective_", getpid(), ".pbtxt");
  std::string graph;
  for (int w = 0; w < 2; ++w) {
    absl::StrAppend(
        &graph, "node { name: \"c", w,
        "\" op: \"Const\" device: \"/job:worker/task:", w,
        "\"\n  attr { key: \"dtype\" value { type: DT_FLOAT } }\n"
        "  attr { key: \"value\" value { tensor { dtype: DT_FLOAT\n"
        "    tensor_shape { dim { size: 2 } } float_val: ",
        w + 1, " float_val: ", 10 * (w + 1),
        " } } } }\n"
        "node { name: \"sum",
        w, "\" op: \"CollectiveReduce\" device: \"/job:worker/task:", w,
        "\" input: \"c", w,
        "\"\n  attr { key: \"T\" value { type: DT_FLOAT } }\n"
        "  attr { key: \"group_size\" value { i: 2 } }\n"
        "  attr { key: \"group_key\" value { i: 3 } }\n"
        "  attr { key: \"instance_key\" value { i: 1 } }\n"
        "  attr { key: \"merge_op\" value { s: \"Add\" } }\n"
        "  attr { key: \"final_op\" value { s: \"Id\" } } }\n");
  }
  FILE* f = fopen(path.c_str(), "w");
  ASSERT_NE(f, nullptr);
  fputs(graph.c_str(), f);
  fclose(f);
  Result r = RunCli({"run", "--target", cluster.target("worker:1"), "--graph",
                     path, "--fetch", "sum0:0", "--fetch", "sum1:0",
                     "--collective-group-leader", kWorker0, "--format", "json",
                     "--timeout", "30"});
  ASSERT_EQ(r.exit_code, 0) << absl::StrJoin(r.lines, "\n");
  ASSERT_EQ(r.lines.size(), 1u) << absl::StrJoin(r.lines, "\n");
  auto json = ParseJson(r.lines[0], "cohort run output");
  ASSERT_TRUE(json.ok()) << json.status();
  EXPECT_EQ((*json)["sum0:0"]["values"], Json::array({3.0, 30.0}));
  EXPECT_EQ((*json)["sum1:0"]["values"], Json::array({3.0, 30.0}));
}

TEST(RuntimeMultiprocessTest, PsKilledBetweenStepsIsNamedAndComesBack) {
  ProcessCluster cluster;
  cluster.StartAll();
  auto session = NewSession(cluster.target("worker:0"), PsGraph());
  ASSERT_NE(session, nullptr);
  std::vector<Tensor> out;
  ASSERT_TRUE(session->Run({}, {"out:0"}, {}, &out).ok());
  EXPECT_EQ(out[0].scalar<float>(), 42.0f);

  cluster.server("ps:0")->Kill9();
  ASSERT_GE(cluster.server("ps:0")->Wait(), 0);
  const absl::Time start = absl::Now();
  absl::Status s = session->Run({}, {"out:0"}, {}, &out);
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_THAT(s.message(), HasSubstr(kPs));

  // The workers stayed up: once ps:0 is back (same port, new incarnation)
  // and registered again, a new session works, through worker:0's
  // connection to the new ps:0.
  cluster.Start("ps", 0);
  ASSERT_TRUE(cluster.WaitUntilAllRegistered()) << "ps:0 not re-admitted";
  auto fresh = NewSession(cluster.target("worker:0"), PsGraph());
  ASSERT_NE(fresh, nullptr);
  ASSERT_TRUE(fresh->Run({}, {"out:0"}, {}, &out).ok());
  EXPECT_EQ(out[0].scalar<float>(), 42.0f);
  // The old session registered its graphs on the dead ps:0; the new one
  // does not know them: Aborted (TensorFlow's "possibly restarted"), the
  // code that tells a client to make a new session.
  absl::Status old = session->Run({}, {"out:0"}, {}, &out);
  EXPECT_EQ(old.code(), absl::StatusCode::kAborted) << old;
}

TEST(RuntimeMultiprocessTest, PsKilledDuringAStepFailsItPromptly) {
  ProcessCluster cluster;
  cluster.StartAll();
  auto session = NewSession(cluster.target("worker:0"), PsGraph());
  ASSERT_NE(session, nullptr);
  ASSERT_TRUE(session->Run({}, {}, {"init"}, nullptr).ok());
  absl::Status step;
  absl::Time ended;
  std::thread runner([&] {
    step = session->Run({}, {"stuck:0"}, {}, nullptr);
    ended = absl::Now();
  });
  // ps dies while the stuck step's RunGraph is parked there (a kill that
  // came before it arrived would test a refused connection instead).
  const bool on_ps = WaitUntilStuckStepIsOnPs(session.get());
  cluster.server("ps:0")->Kill9();
  const absl::Time killed = absl::Now();
  runner.join();
  ASSERT_TRUE(on_ps) << "the stuck step never reached ps:0";
  EXPECT_EQ(step.code(), absl::StatusCode::kUnavailable) << step;
  EXPECT_THAT(step.message(), HasSubstr(kPs));
  EXPECT_LT(ended - killed, absl::Seconds(10));
  // The other servers stayed up: once ps:0 is back they serve new sessions.
  cluster.Start("ps", 0);
  Result r = RunCli({"run", "--target", cluster.target("worker:1"), "--graph",
                     WriteGraphFile(), "--feed", "x=[1, 1]", "--fetch", "x:0",
                     "--timeout", "20"});
  EXPECT_EQ(r.exit_code, 0) << absl::StrJoin(r.lines, "\n");
}

TEST(RuntimeMultiprocessTest, HungPsIsFoundByTheCoordinationService) {
  // ps:0 is stopped (SIGSTOP), not killed: no connection breaks, so only the
  // coordination service's heartbeat timeout (2 s here) can tell. The
  // leader is worker:0, which hosts the service.
  ProcessCluster cluster;
  cluster.StartAll();
  ASSERT_TRUE(cluster.WaitUntilAllRegistered());
  auto session = NewSession(cluster.target("worker:0"), PsGraph());
  ASSERT_NE(session, nullptr);
  ASSERT_TRUE(session->Run({}, {}, {"init"}, nullptr).ok());
  absl::Status step;
  std::thread runner(
      [&] { step = session->Run({}, {"stuck:0"}, {}, nullptr); });
  const bool on_ps = WaitUntilStuckStepIsOnPs(session.get());
  const pid_t ps = cluster.server("ps:0")->pid();
  ASSERT_EQ(kill(ps, SIGSTOP), 0);
  runner.join();
  kill(ps, SIGCONT);
  ASSERT_TRUE(on_ps) << "the stuck step never reached ps:0";
  EXPECT_EQ(step.code(), absl::StatusCode::kUnavailable) << step;
  EXPECT_THAT(step.message(), HasSubstr(kPs));
  // Found by the heartbeat watch (Unavailable naming the service), not by
  // the step's 20 s operation timeout (DeadlineExceeded). That the watch
  // reports a silent task exactly at the heartbeat timeout is
  // src/cohort/runtime/server_coordination_test.cc's, on a fake clock: no
  // real-time bound here.
  EXPECT_THAT(std::string(step.message()), HasSubstr("coordination service"));
}

// A new session that needs a task the coordination service has declared
// lost fails at once, naming it, instead of waiting out its operation
// timeout (20 s here) for an answer that cannot come.
TEST(RuntimeMultiprocessTest, NewSessionFailsAtOnceForAKnownLostTask) {
  ProcessCluster cluster;
  cluster.StartAll();
  ASSERT_TRUE(cluster.WaitUntilAllRegistered());
  const pid_t ps = cluster.server("ps:0")->pid();
  ASSERT_EQ(kill(ps, SIGSTOP), 0);
  const bool declared = cluster.WaitForState("ps:0", "error");
  runtime::GrpcSessionOptions options;
  options.security.job_token = kToken;
  options.rpc_timeout = absl::Seconds(30);
  options.config.set_operation_timeout_in_ms(20000);
  absl::StatusOr<std::unique_ptr<runtime::GrpcSession>> session =
      declared ? runtime::GrpcSession::Create(cluster.target("worker:0"),
                                              PsGraph(), options)
               : absl::InternalError("ps:0 never reported in error");
  ASSERT_EQ(kill(ps, SIGCONT), 0);
  ASSERT_TRUE(declared) << "the stall of ps:0 was not detected";
  EXPECT_EQ(session.status().code(), absl::StatusCode::kUnavailable)
      << session.status();
  EXPECT_THAT(session.status().message(), HasSubstr(kPs));
  EXPECT_THAT(session.status().message(), HasSubstr("known to be lost"));
}

// A stalled task that comes back (SIGCONT) is re-admitted by the
// coordination service with a new incarnation and watched again: a second
// stall is found like the first, instead of leaving the task in error for
// good and the step waiting for its operation timeout.
TEST(RuntimeMultiprocessTest, StalledPsComesBackAndIsWatchedAgain) {
  ProcessCluster cluster;
  cluster.StartAll();
  ASSERT_TRUE(cluster.WaitUntilAllRegistered());
  const pid_t ps = cluster.server("ps:0")->pid();
  for (int stall = 0; stall < 2; ++stall) {
    SCOPED_TRACE(absl::StrCat("stall ", stall));
    auto session = NewSession(cluster.target("worker:0"), PsGraph());
    ASSERT_NE(session, nullptr);
    ASSERT_TRUE(session->Run({}, {}, {"init"}, nullptr).ok());
    absl::Status step;
    std::thread runner(
        [&] { step = session->Run({}, {"stuck:0"}, {}, nullptr); });
    const bool on_ps = WaitUntilStuckStepIsOnPs(session.get());
    ASSERT_EQ(kill(ps, SIGSTOP), 0);
    runner.join();
    ASSERT_EQ(kill(ps, SIGCONT), 0);
    ASSERT_TRUE(on_ps) << "the stuck step never reached ps:0";
    // Found by the heartbeat watch (Unavailable naming ps:0), not by the
    // step's 20 s operation timeout (DeadlineExceeded).
    EXPECT_EQ(step.code(), absl::StatusCode::kUnavailable) << step;
    EXPECT_THAT(step.message(), HasSubstr(kPs));
    // Re-admitted: every task connected again.
    ASSERT_TRUE(cluster.WaitUntilAllRegistered()) << "ps:0 not re-admitted";
  }
}

TEST(RuntimeMultiprocessTest, SigtermStopsCleanlyWithExitZero) {
  ProcessCluster cluster;
  TestProcess* ps = cluster.Start("ps", 0);
  ps->Terminate();
  const int status = ps->Wait(absl::Seconds(10));
  ASSERT_GE(status, 0);
  EXPECT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

TEST(RuntimeMultiprocessTest, ConfigurationErrorsExitTwoAndNameTheProblem) {
  ProcessCluster cluster;
  // No job token: refused, even on loopback.
  unsetenv("COHORT_JOB_TOKEN");
  Result r0 = RunCli({"server", "--cluster", R"({"worker": ["127.0.0.1:1"]})",
                      "--job", "worker", "--task", "0"});
  setenv("COHORT_JOB_TOKEN", kToken, 1);
  EXPECT_EQ(r0.exit_code, 2);
  Result r = RunCli({"server", "--cluster", cluster.cluster_json(), "--job",
                     "chief", "--task", "0"});
  EXPECT_EQ(r.exit_code, 2);
  r = RunCli({"server", "--cluster", R"({"worker": ["localhost"]})", "--job",
              "worker", "--task", "0"});
  EXPECT_EQ(r.exit_code, 2);
  r = RunCli({"server", "--cluster",
              R"({"worker": ["127.0.0.1:0", "127.0.0.1:0"]})", "--job",
              "worker", "--task", "0"});
  EXPECT_EQ(r.exit_code, 2);
  // A job name that would change the meaning of device names.
  r = RunCli({"server", "--cluster", R"({"a/b": ["127.0.0.1:0"]})", "--job",
              "a/b", "--task", "0"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(r.lines.empty()) << "it must not serve";
  // Flags out of range: refused before anything starts.
  const std::vector<std::vector<std::string>> bad_flags = {
      {"--threads", "1000000"},       {"--threads", "-1"},
      {"--heartbeat-timeout", "nan"}, {"--heartbeat-timeout", "inf"},
      {"--step-timeout", "nan"},      {"--step-timeout", "-5"}};
  for (const std::vector<std::string>& flag : bad_flags) {
    std::vector<std::string> args = {
        "server", "--cluster", R"({"worker": ["127.0.0.1:0"]})",
        "--job",  "worker",    "--task",
        "0"};
    args.insert(args.end(), flag.begin(), flag.end());
    r = RunCli(args);
    EXPECT_NE(r.exit_code, 0) << flag[0] << " " << flag[1];
    EXPECT_TRUE(r.lines.empty()) << flag[0] << " " << flag[1];
  }
}

// TF's create_local_server through the CLI: a cluster of one task may give
// port 0; `cohort server` binds a port the OS picks and its one stdout line
// names that port, which then accepts connections. (The in-process Server
// runs a step on such a port: src/cohort/runtime/server_test.cc.)
TEST(RuntimeMultiprocessTest, PortZeroInAOneTaskClusterServesOnTheBoundPort) {
  setenv("COHORT_JOB_TOKEN", kToken, 1);
  TestProcess server({kCohort, "server", "--cluster",
                      R"({"local": ["127.0.0.1:0"]})", "--threads", "2"});
  const std::string line = server.WaitForLine("serving");
  const std::string prefix = "serving grpc://127.0.0.1:";
  ASSERT_EQ(line.rfind(prefix, 0), 0u) << line;
  int port = 0;
  ASSERT_TRUE(absl::SimpleAtoi(line.substr(prefix.size()), &port)) << line;
  EXPECT_GT(port, 0);
  auto connection = rpc::ConnectTcp(absl::StrCat("127.0.0.1:", port),
                                    absl::Now() + absl::Seconds(10));
  EXPECT_TRUE(connection.ok()) << connection.status();
  server.Terminate();
  EXPECT_EQ(server.Wait(absl::Seconds(10)), 0);
}

}  // namespace
}  // namespace cohort::testing
