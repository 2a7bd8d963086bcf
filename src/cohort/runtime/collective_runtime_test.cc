// Collective ops through the distributed runtime: real servers (chief:0,
// worker:0, worker:1 on 127.0.0.1) and GrpcSession, groups resolved by the
// group leader the session config names, nothing registered by hand.
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "cohort/graph/builder.h"
#include "cohort/graph/collective.h"
#include "cohort/graph/device.h"
#include "cohort/graph/kernels/array_ops.h"
#include "cohort/graph/kernels/collective_ops.h"
#include "cohort/runtime/test_cluster.h"
#include "cohort/runtime/worker.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort::runtime {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr char kChief[] = "/job:chief/replica:0/task:0";
constexpr char kWorker0[] = "/job:worker/replica:0/task:0";
constexpr char kWorker1[] = "/job:worker/replica:0/task:1";
constexpr char kToken[] = "collective-runtime-test-token";
const char* const kTasks[] = {kChief, kWorker0, kWorker1};

ConfigProto LeaderConfig(const std::string& leader) {
  ConfigProto config;
  config.mutable_experimental()->set_collective_group_leader(leader);
  return config;
}

std::vector<float> Values(const Tensor& t) {
  auto flat = t.flat<float>();
  return std::vector<float>(flat.data(), flat.data() + flat.size());
}

// Rank r's contribution: {r + 1, 10 (r + 1), 0.1 (r + 1)}.
Tensor Contribution(int r) {
  const float k = static_cast<float>(r + 1);
  return Tensor::Vec<float>({k, 10 * k, 0.1f * k});
}

// Task `rank`'s own graph (between-graph replication): a mean all-reduce, a
// gather and a broadcast from the chief, each fetched by its own Run.
GraphDef TaskGraph(int rank) {
  Scope root = Scope::NewRootScope().WithDevice(kTasks[rank]);
  ops::CollectiveReduce(root.WithOpName("mean"),
                        ops::Const(root, Contribution(rank)), 3, 1, 1, "Div");
  ops::CollectiveGather(root.WithOpName("gathered"),
                        ops::Const(root, Tensor::Vec<float>({1.0f * rank})), 3,
                        1, 2, TensorShape({1}));
  if (rank == 0) {
    ops::CollectiveBcastSend(root.WithOpName("bcast"),
                             ops::Const(root, Tensor::Vec<float>({7, 8})), 3, 1,
                             3, TensorShape({2}));
  } else {
    ops::CollectiveBcastRecv(root.WithOpName("bcast"), DT_FLOAT, 3, 1, 3,
                             TensorShape({2}));
  }
  GraphDef g;
  EXPECT_TRUE(root.ToGraphDef(&g).ok());
  return g;
}

class CollectiveRuntimeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cluster_ = TestCluster::Start({{"chief", 1}, {"worker", 2}}, kToken);
    ASSERT_NE(cluster_, nullptr);
  }
  std::unique_ptr<TestCluster> cluster_;
};

TEST_F(CollectiveRuntimeTest, EachTaskRunsItsOwnGraphAndTheGroupResolves) {
  std::vector<std::vector<std::vector<float>>> got(3);
  std::vector<absl::Status> status(3);
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] {
      auto session =
          cluster_->Session(kTasks[r], TaskGraph(r), LeaderConfig(kChief));
      if (session == nullptr) return;
      for (const char* fetch : {"mean:0", "gathered:0", "bcast:0"}) {
        std::vector<Tensor> out;
        status[r] = session->Run({}, {fetch}, {}, &out);
        if (!status[r].ok()) return;
        got[r].push_back(Values(out[0]));
      }
    });
  }
  for (auto& t : threads) t.join();
  // The mean as the group computes it: the float sum, divided by 3.
  std::vector<float> mean(3);
  for (int i = 0; i < 3; ++i) {
    float sum = 0;
    for (int r = 0; r < 3; ++r) sum += Values(Contribution(r))[i];
    mean[i] = sum / 3;
  }
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(status[r].ok()) << kTasks[r] << ": " << status[r];
    ASSERT_EQ(got[r].size(), 3u);
    EXPECT_EQ(got[r][0], mean) << kTasks[r];  // Bit-identical everywhere.
    EXPECT_THAT(got[r][1], ElementsAre(0, 1, 2)) << kTasks[r];
    EXPECT_THAT(got[r][2], ElementsAre(7, 8)) << kTasks[r];
    // On one host "auto" moves the data through shared memory.
    auto groups = CollectiveGroupsOf(
        cluster_->server(kTasks[r])->device()->resource_manager());
    ASSERT_TRUE(groups.ok()) << groups.status();
    auto group = (*groups)->Find(1);
    ASSERT_TRUE(group.ok()) << group.status();
    EXPECT_EQ((*group)->transport(), "shm") << kTasks[r];
  }
}

TEST_F(CollectiveRuntimeTest, OneClientDrivesACollectiveOnEveryTask) {
  // In-graph: one graph, one master (worker:1's), a reduce on each task.
  Scope root = Scope::NewRootScope();
  for (int r = 0; r < 3; ++r) {
    Scope on = root.WithDevice(kTasks[r]);
    ops::CollectiveReduce(on.WithOpName(absl::StrCat("sum", r)),
                          ops::Const(on, Contribution(r)), 3, 4, 1, "Id");
  }
  GraphDef g;
  ASSERT_TRUE(root.ToGraphDef(&g).ok());
  auto session = cluster_->Session(kWorker1, g, LeaderConfig(kChief));
  ASSERT_NE(session, nullptr);
  std::vector<Tensor> out;
  absl::Status s = session->Run({}, {"sum0:0", "sum1:0", "sum2:0"}, {}, &out);
  ASSERT_TRUE(s.ok()) << s;
  const std::vector<float> expected = {6, 60, 0.1f + 0.2f + 0.3f};
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(Values(out[r]), Values(out[0]));
    EXPECT_FLOAT_EQ(Values(out[r])[2], expected[2]);
    EXPECT_EQ(Values(out[r])[0], 6);
    EXPECT_EQ(Values(out[r])[1], 60);
  }
  // Again: the group is resolved once; the next step reuses it.
  s = session->Run({}, {"sum0:0", "sum1:0", "sum2:0"}, {}, &out);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(Values(out[2])[0], 6);
}

// communication_hint "ring" forms the group over the TCP ring between the
// tasks' own endpoints (on one host, where "auto" takes shared memory): the
// same bits on every task.
TEST_F(CollectiveRuntimeTest, TheRingHintFormsTheGroupOverTcp) {
  std::vector<std::vector<float>> got(3);
  std::vector<absl::Status> status(3);
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] {
      Scope root = Scope::NewRootScope().WithDevice(kTasks[r]);
      ops::CollectiveReduce(root.WithOpName("mean"),
                            ops::Const(root, Contribution(r)), 3, 21, 1, "Div",
                            0, "ring");
      GraphDef g;
      status[r] = root.ToGraphDef(&g);
      if (!status[r].ok()) return;
      auto session = cluster_->Session(kTasks[r], g, LeaderConfig(kChief));
      if (session == nullptr) {
        status[r] = absl::UnavailableError("no session");
        return;
      }
      std::vector<Tensor> out;
      status[r] = session->Run({}, {"mean:0"}, {}, &out);
      if (status[r].ok()) got[r] = Values(out[0]);
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(status[r].ok()) << kTasks[r] << ": " << status[r];
    ASSERT_EQ(got[r].size(), 3u) << kTasks[r];
    EXPECT_EQ(got[r], got[0]) << kTasks[r];
    EXPECT_EQ(got[r][0], 2) << kTasks[r];
    EXPECT_EQ(got[r][1], 20) << kTasks[r];
    // The group each task formed moves its data over TCP.
    auto groups = CollectiveGroupsOf(
        cluster_->server(kTasks[r])->device()->resource_manager());
    ASSERT_TRUE(groups.ok()) << groups.status();
    auto group = (*groups)->Find(21);
    ASSERT_TRUE(group.ok()) << group.status();
    EXPECT_EQ((*group)->transport(), "tcp") << kTasks[r];
    EXPECT_EQ((*group)->rank(), r) << kTasks[r];
  }
}

TEST_F(CollectiveRuntimeTest, AnUnknownHintIsRefusedNamingIt) {
  Scope root = Scope::NewRootScope().WithDevice(kWorker1);
  ops::CollectiveReduce(root.WithOpName("r"),
                        ops::Const(root, Tensor::Vec<float>({1})), 2, 22, 1,
                        "Id", 0, "nccl");
  GraphDef g;
  ASSERT_TRUE(root.ToGraphDef(&g).ok());
  auto session = cluster_->Session(kWorker1, g, LeaderConfig(kChief));
  ASSERT_NE(session, nullptr);
  std::vector<Tensor> out;
  absl::Status s = session->Run({}, {"r:0"}, {}, &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), HasSubstr("communication_hint 'nccl'"));
}

TEST_F(CollectiveRuntimeTest, AMemberThatNeverJoinsIsNamedByTheLeader) {
  // worker:0 alone in a group of 2, with a 1-second op timeout: the leader
  // (chief:0, reached over gRPC) says who joined and how many are missing.
  Scope root = Scope::NewRootScope().WithDevice(kWorker0);
  ops::CollectiveReduce(root.WithOpName("lonely"),
                        ops::Const(root, Tensor::Vec<float>({1})), 2, 12, 1,
                        "Id", /*timeout_seconds=*/1);
  GraphDef g;
  ASSERT_TRUE(root.ToGraphDef(&g).ok());
  auto session = cluster_->Session(kWorker0, g, LeaderConfig(kChief));
  ASSERT_NE(session, nullptr);
  std::vector<Tensor> out;
  absl::Status s = session->Run({}, {"lonely:0"}, {}, &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_THAT(s.message(),
              HasSubstr("resolving collective group 12 through the group "
                        "leader /job:chief/replica:0/task:0: collective group "
                        "12 (group_size 2) at the leader "
                        "/job:chief/replica:0/task:0: 1 of 2 members joined by "
                        "the deadline (/job:worker/replica:0/task:0), 1 "
                        "missing"));
}

// A collective whose peers never come waits no longer than its step: the
// session's 1-second operation timeout ends it, not the op's own 10 minutes.
TEST_F(CollectiveRuntimeTest, ACollectiveWaitsNoLongerThanItsStep) {
  // Form group 31 of chief and worker:0 with a first step on both.
  auto graph_for = [](const char* task) {
    Scope root = Scope::NewRootScope().WithDevice(task);
    ops::CollectiveReduce(root.WithOpName("r"),
                          ops::Const(root, Tensor::Vec<float>({1})), 2, 31, 1);
    GraphDef g;
    EXPECT_TRUE(root.ToGraphDef(&g).ok());
    return g;
  };
  ConfigProto config = LeaderConfig(kChief);
  config.set_operation_timeout_in_ms(1000);
  auto chief = cluster_->Session(kChief, graph_for(kChief), config);
  auto worker = cluster_->Session(kWorker0, graph_for(kWorker0), config);
  ASSERT_NE(chief, nullptr);
  ASSERT_NE(worker, nullptr);
  absl::Status worker_status;
  std::thread peer([&] {
    std::vector<Tensor> out;
    worker_status = worker->Run({}, {"r:0"}, {}, &out);
  });
  std::vector<Tensor> out;
  ASSERT_TRUE(chief->Run({}, {"r:0"}, {}, &out).ok());
  peer.join();
  ASSERT_TRUE(worker_status.ok()) << worker_status;
  // The chief alone now: its reduce waits for worker:0 until the step's
  // deadline. The master answers at that deadline whatever its worker does;
  // the worker's step must end too (with the op's 10 minutes it would hold
  // its thread that long).
  absl::Status s = chief->Run({}, {"r:0"}, {}, &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  Worker* chief_worker = cluster_->server(kChief)->worker();
  const absl::Time limit = absl::Now() + absl::Seconds(10);
  while (chief_worker->NumRunningSteps() > 0 && absl::Now() < limit) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_EQ(chief_worker->NumRunningSteps(), 0u)
      << "the chief's reduce still runs 10 s after its step's deadline";
}

TEST_F(CollectiveRuntimeTest, WithoutALeaderAnUnknownGroupSaysWhatToSet) {
  Scope root = Scope::NewRootScope().WithDevice(kWorker1);
  ops::CollectiveReduce(root.WithOpName("r"),
                        ops::Const(root, Tensor::Vec<float>({1})), 2, 13, 1);
  GraphDef g;
  ASSERT_TRUE(root.ToGraphDef(&g).ok());
  auto session = cluster_->Session(kWorker1, g);
  ASSERT_NE(session, nullptr);
  std::vector<Tensor> out;
  absl::Status s = session->Run({}, {"r:0"}, {}, &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_THAT(s.message(), HasSubstr("no collective group with group_key 13"));
  EXPECT_THAT(s.message(), HasSubstr("collective_group_leader"));
}

TEST_F(CollectiveRuntimeTest, ALeaderOutsideTheClusterIsNotFound) {
  Scope root = Scope::NewRootScope().WithDevice(kWorker1);
  ops::CollectiveReduce(root.WithOpName("r"),
                        ops::Const(root, Tensor::Vec<float>({1})), 2, 14, 1);
  GraphDef g;
  ASSERT_TRUE(root.ToGraphDef(&g).ok());
  auto session =
      cluster_->Session(kWorker1, g, LeaderConfig("/job:ps/replica:0/task:0"));
  ASSERT_NE(session, nullptr);
  std::vector<Tensor> out;
  absl::Status s = session->Run({}, {"r:0"}, {}, &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
  EXPECT_THAT(s.message(),
              HasSubstr("resolving collective group 14 through the group "
                        "leader /job:ps/replica:0/task:0"));
}

}  // namespace
}  // namespace cohort::runtime
