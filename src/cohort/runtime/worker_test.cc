// Worker: sessions, graphs, GetStatus, CleanupAll (worker.h).
#include "cohort/runtime/worker.h"

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/synchronization/mutex.h"
#include "cohort/base/logging.h"
#include "cohort/runtime/worker_errors.h"
#include "cohort/runtime/worker_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort::runtime {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;
using namespace testing;  // NOLINT: the test helpers

// Captured log lines (the GC test checks TF's INFO line).
absl::Mutex log_mu;
std::vector<std::string>* log_lines = new std::vector<std::string>;
void CaptureLog(LogLevel, const std::string& line) {
  absl::MutexLock lock(&log_mu);
  log_lines->push_back(line);
}
int CountLogLines(const std::string& needle) {
  absl::MutexLock lock(&log_mu);
  int n = 0;
  for (const auto& l : *log_lines) n += absl::StrContains(l, needle);
  return n;
}

class WorkerTest : public WorkerFixture {
 protected:
  // "v = VarHandleOp(shared_name); assign/read" graphs for session tests.
  GraphDef AssignGraph(const std::string& var, float value,
                       const std::string& container = "") {
    GraphDef g;
    AddVar(&g, "v", var, kDev, container);
    AddConst(&g, "c", Tensor(value), kDev);
    AddAssign(&g, "assign", "AssignVariableOp", "v", "c", kDev);
    return g;
  }
  GraphDef ReadGraph(const std::string& var,
                     const std::string& container = "") {
    GraphDef g;
    AddVar(&g, "v", var, kDev, container);
    AddRead(&g, "r", "v", kDev);
    return g;
  }
  absl::Status Assign(const std::string& session, const std::string& var,
                      float value, const std::string& container = "") {
    auto g = Register(session, AssignGraph(var, value, container), {}, {},
                      {"assign"});
    if (!g.ok()) return g.status();
    return DoRunGraph(worker_.get(), RunRequest(session, *g, NextStep()));
  }
  absl::StatusOr<float> Read(const std::string& session, const std::string& var,
                             const std::string& container = "") {
    auto g = Register(session, ReadGraph(var, container), {}, {"r:0"});
    if (!g.ok()) return g.status();
    RunGraphResponse resp;
    absl::Status s =
        DoRunGraph(worker_.get(), RunRequest(session, *g, NextStep()), &resp);
    if (!s.ok()) return s;
    auto t = Tensor::FromProto(resp.recv(0).tensor());
    if (!t.ok()) return t.status();
    return t->scalar<float>();
  }
  int64_t NextStep() { return ++step_; }
  int64_t step_ = 1000;
};

TEST_F(WorkerTest, GetStatusListsTheDeviceWithItsIncarnation) {
  GetStatusResponse resp;
  ASSERT_TRUE(DoGetStatus(worker_.get(), {}, &resp).ok());
  ASSERT_EQ(resp.device_attributes_size(), 1);
  EXPECT_EQ(resp.device_attributes(0).name(), kDev);
  EXPECT_EQ(resp.device_attributes(0).device_type(), "CPU");
  EXPECT_EQ(resp.device_attributes(0).incarnation(), kIncarnation);
}

TEST_F(WorkerTest, CreateWorkerSessionRules) {
  absl::Status s = CreateSession("");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "Session must be non-empty.");
  ASSERT_TRUE(CreateSession("s", false, "/job:m/replica:0/task:0", 3).ok());
  // An identical retry is OK; the same handle with other settings is not.
  EXPECT_TRUE(CreateSession("s", false, "/job:m/replica:0/task:0", 3).ok());
  EXPECT_EQ(CreateSession("s", true, "/job:m/replica:0/task:0", 3).code(),
            absl::StatusCode::kAlreadyExists);
  // A ServerDef naming another task is refused; naming this one is fine.
  CreateWorkerSessionRequest req;
  req.set_session_handle("t");
  req.mutable_server_def()->set_job_name("ps");
  s = DoCreateWorkerSession(worker_.get(), req);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("/job:ps/replica:0/task:0"));
  req.mutable_server_def()->set_job_name("worker");
  EXPECT_TRUE(DoCreateWorkerSession(worker_.get(), req).ok());
}

TEST_F(WorkerTest, UnknownSessionIsAbortedWithRestartPayload) {
  auto g = Register("nope", ReadGraph("w"), {}, {"r:0"});
  EXPECT_EQ(g.status().code(), absl::StatusCode::kAborted);
  EXPECT_EQ(g.status().message(),
            "Session handle is not found: nope. Possibly this worker "
            "(\"/job:worker/replica:0/task:0\") just restarted.");
  EXPECT_TRUE(IsWorkerPossiblyRestarted(g.status()));
  absl::Status run = DoRunGraph(worker_.get(), RunRequest("nope", "g", 1));
  EXPECT_EQ(run.message(), g.status().message());
  DeregisterGraphRequest dereg;
  dereg.set_session_handle("nope");
  dereg.set_graph_handle("g");
  EXPECT_EQ(DoDeregisterGraph(worker_.get(), dereg).message(),
            g.status().message());
}

TEST_F(WorkerTest, UnknownGraphHandlesUseTfMessages) {
  ASSERT_TRUE(CreateSession("s").ok());
  absl::Status run = DoRunGraph(worker_.get(), RunRequest("s", "0042", 1));
  EXPECT_EQ(run.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(run.message(), "Graph handle is not found: 0042");
  DeregisterGraphRequest dereg;
  dereg.set_session_handle("s");
  dereg.set_graph_handle("0042");
  absl::Status s = DoDeregisterGraph(worker_.get(), dereg);
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(s.message(),
            "Graph handle is not found: 0042. Possibly, this worker just "
            "restarted.");
}

TEST_F(WorkerTest, RegisterRefusesNodesOfOtherDevicesAndBadGraphs) {
  ASSERT_TRUE(CreateSession("s").ok());
  GraphDef g;
  AddConst(&g, "c", Tensor(1.0f), kDev);
  AddConst(&g, "elsewhere", Tensor(1.0f), Dev(Task("ps", 0)));
  auto h = Register("s", g, {}, {"c:0"});
  EXPECT_EQ(h.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(h.status().message(), HasSubstr("node 'elsewhere'"));
  EXPECT_THAT(h.status().message(),
              HasSubstr("/job:ps/replica:0/task:0/device:CPU:0"));
  // An unplaced node is refused too: the master places every node.
  GraphDef unplaced;
  AddConst(&unplaced, "c", Tensor(1.0f), "");
  EXPECT_EQ(Register("s", unplaced, {}, {"c:0"}).status().code(),
            absl::StatusCode::kInvalidArgument);
  // TF's legacy device spelling is the same device.
  GraphDef legacy;
  AddConst(&legacy, "c", Tensor(1.0f), "/job:worker/replica:0/task:0/cpu:0");
  EXPECT_TRUE(Register("s", legacy, {}, {"c:0"}).ok());
  GraphDef bad;
  AddNode(&bad, "weird", "NoSuchOp", {}, kDev);
  h = Register("s", bad, {}, {});
  EXPECT_EQ(h.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(h.status().message(), HasSubstr("weird"));
  // A fetch of an unknown node is refused at registration.
  EXPECT_EQ(Register("s", legacy, {}, {"zz:0"}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(WorkerTest, DeregisterDropsTheGraph) {
  ASSERT_TRUE(CreateSession("s").ok());
  GraphDef g;
  AddConst(&g, "c", Tensor(1.0f), kDev);
  auto h = Register("s", g, {}, {"c:0"});
  ASSERT_TRUE(h.ok()) << h.status();
  auto h2 = Register("s", g, {}, {"c:0"});
  EXPECT_NE(*h, *h2);  // a new handle per registration
  DeregisterGraphRequest dereg;
  dereg.set_session_handle("s");
  dereg.set_graph_handle(*h);
  ASSERT_TRUE(DoDeregisterGraph(worker_.get(), dereg).ok());
  EXPECT_EQ(DoRunGraph(worker_.get(), RunRequest("s", *h, 1)).message(),
            "Graph handle is not found: " + *h);
  EXPECT_TRUE(DoRunGraph(worker_.get(), RunRequest("s", *h2, 2)).ok());
}

TEST_F(WorkerTest, SharedSessionsShareVariablesAndOutliveEachOther) {
  ASSERT_TRUE(CreateSession("a").ok());
  ASSERT_TRUE(CreateSession("b").ok());
  ASSERT_TRUE(Assign("a", "w", 5).ok());
  EXPECT_EQ(*Read("b", "w"), 5);
  DeleteWorkerSessionRequest del;
  del.set_session_handle("a");
  ASSERT_TRUE(DoDeleteWorkerSession(worker_.get(), del).ok());
  EXPECT_EQ(*Read("b", "w"), 5);  // the variable outlived session a
}

TEST_F(WorkerTest, IsolatedSessionsHaveTheirOwnVariables) {
  ASSERT_TRUE(CreateSession("c", true).ok());
  ASSERT_TRUE(CreateSession("d", true).ok());
  ASSERT_TRUE(CreateSession("shared").ok());
  ASSERT_TRUE(Assign("c", "w2", 7).ok());
  EXPECT_EQ(*Read("c", "w2"), 7);
  EXPECT_EQ(Read("d", "w2").status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Read("shared", "w2").status().code(),
            absl::StatusCode::kFailedPrecondition);
  // A shared variable is not visible to an isolated session either.
  ASSERT_TRUE(Assign("shared", "w3", 1).ok());
  EXPECT_EQ(Read("c", "w3").status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(WorkerTest, NewMasterIncarnationCollectsOldSessions) {
  {
    absl::MutexLock lock(&log_mu);
    log_lines->clear();
  }
  SetLogSinkForTest(CaptureLog);
  const std::string master = "/job:m/replica:0/task:0";
  const std::string line =
      "When creating WorkerSession for master task /job:m/replica:0/task:0, "
      "found old WorkerSessions created by the same master task with a "
      "different incarnation. These sessions will be garbage collected. "
      "Current WorkerSession count: ";
  ASSERT_TRUE(CreateSession("s1", false, master, 1).ok());
  ASSERT_TRUE(CreateSession("other", false, "", 0).ok());
  ASSERT_TRUE(Assign("s1", "kept", 9).ok());
  const int before = CountLogLines(line);

  ASSERT_TRUE(CreateSession("s2", false, master, 2).ok());
  EXPECT_EQ(CountLogLines(line + "2"), 1);
  EXPECT_EQ(Read("s1", "kept").status().message(),
            "Session handle is not found: s1. Possibly this worker "
            "(\"/job:worker/replica:0/task:0\") just restarted.");
  EXPECT_EQ(*Read("s2", "kept"), 9);     // shared variables are untouched
  EXPECT_EQ(*Read("other", "kept"), 9);  // other masters' sessions stay

  // Same incarnation again: nothing collected, no log line.
  ASSERT_TRUE(CreateSession("s3", false, master, 2).ok());
  EXPECT_TRUE(Read("s2", "kept").ok());
  EXPECT_EQ(CountLogLines(line), before + 1);
  SetLogSinkForTest(nullptr);
}

TEST_F(WorkerTest, EmptyMasterTaskDisablesIncarnationCheck) {
  ASSERT_TRUE(CreateSession("x", false, "", 1).ok());
  ASSERT_TRUE(CreateSession("y", false, "", 2).ok());
  ASSERT_TRUE(Assign("x", "w", 1).ok());
  ASSERT_TRUE(Assign("y", "w", 2).ok());
}

TEST_F(WorkerTest, DeleteUnknownSessionIsOk) {
  DeleteWorkerSessionRequest del;
  del.set_session_handle("never");
  EXPECT_TRUE(DoDeleteWorkerSession(worker_.get(), del).ok());
}

TEST_F(WorkerTest, CleanupAllClearsNamedOrDefaultContainers) {
  ASSERT_TRUE(CreateSession("s").ok());
  ASSERT_TRUE(Assign("s", "w", 1).ok());
  ASSERT_TRUE(Assign("s", "z", 2, "c1").ok());
  ASSERT_TRUE(DoCleanupAll(worker_.get(), {}).ok());
  EXPECT_EQ(Read("s", "w").status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(*Read("s", "z", "c1"), 2);
  CleanupAllRequest req;
  req.add_container("c1");
  ASSERT_TRUE(DoCleanupAll(worker_.get(), req).ok());
  EXPECT_EQ(Read("s", "z", "c1").status().code(),
            absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace cohort::runtime
