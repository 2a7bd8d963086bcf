#include "cohort/distribute/distribute_coordinator.h"

#include <atomic>
#include <map>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "cohort/base/fake_env.h"
#include "cohort/base/status.h"
#include "cohort/distribute/testing.h"
#include "cohort/rpc/transport.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort::distribute {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::UnorderedElementsAre;

// What one worker_fn / eval_fn call saw.
struct Seen {
  std::string task_type;
  int task_id;
  std::string master_target;
  int num_workers;
  bool is_chief;
  bool distributed_mode;
  bool has_barrier;
  bool should_init, should_checkpoint, should_save_summary;
  ConfigProto session_config;
};

class Recorder {
 public:
  WorkerFn Fn(absl::Status result = absl::OkStatus()) {
    return [this, result](const Strategy*) {
      const WorkerContext* c = CurrentWorkerContext();
      EXPECT_NE(c, nullptr);
      if (c == nullptr) return absl::InternalError("no context");
      absl::MutexLock lock(&mu_);
      seen_.push_back(Seen{
          c->task_type(), c->task_id(), c->master_target(), c->num_workers(),
          c->is_chief(), c->distributed_mode(), c->has_barrier(),
          c->experimental_should_init(), c->should_checkpoint(),
          c->should_save_summary(), c->session_config()});
      return result;
    };
  }
  std::vector<Seen> seen() {
    absl::MutexLock lock(&mu_);
    return seen_;
  }
  // [master_target, num_workers, is_chief, distributed_mode] by type, id.
  std::map<std::string, std::vector<std::tuple<std::string, int, bool, bool>>>
  Tuples() {
    std::map<std::pair<std::string, int>,
             std::tuple<std::string, int, bool, bool>>
        sorted;
    for (const Seen& s : seen()) {
      sorted[{s.task_type, s.task_id}] = {s.master_target, s.num_workers,
                                          s.is_chief, s.distributed_mode};
    }
    std::map<std::string, std::vector<std::tuple<std::string, int, bool, bool>>>
        out;
    for (const auto& [key, t] : sorted) {
      out[key.first.empty() ? "None" : key.first].push_back(t);
    }
    return out;
  }

 private:
  absl::Mutex mu_;
  std::vector<Seen> seen_ ABSL_GUARDED_BY(mu_);
};

// Each coordinator call on a fresh thread: a thread keeps its standard
// server (BR-72-04), and tests must not share one.
absl::Status InThread(const std::function<absl::Status()>& fn) {
  absl::Status s;
  std::thread t([&] { s = fn(); });
  t.join();
  return s;
}

ClusterSpec Cluster(
    std::vector<std::pair<std::string, std::vector<std::string>>> jobs) {
  ClusterSpec c;
  for (auto& [job, addresses] : jobs) c.SetJob(job, addresses);
  return c;
}

ClusterSpec WorkersAndPs() {
  return Cluster({{"worker", {"w0:2222", "w1:2222", "w2:2222"}},
                  {"ps", {"p0:2222", "p1:2222"}}});
}

class CoordinatorTest : public ::testing::Test {
 protected:
  DistributeCoordinatorOptions Options(WorkerFn fn, const Strategy* strategy) {
    DistributeCoordinatorOptions o;
    o.worker_fn = std::move(fn);
    o.strategy = strategy;
    o.env = &env_;
    o.server_factory = &factory_;
    return o;
  }
  absl::Status Run(const DistributeCoordinatorOptions& o) {
    return InThread([&] { return RunDistributeCoordinator(o); });
  }

  FakeEnv env_;
  RecordingStdServerFactory factory_;
  Recorder recorder_;
};

using Tuple = std::tuple<std::string, int, bool, bool>;

// --- Local mode
// ---------------------------------------------------------------

TEST_F(CoordinatorTest, NoClusterRunsWorkerFnOnceLocally) {
  MockStrategy strategy(true);
  ASSERT_TRUE(Run(Options(recorder_.Fn(), &strategy)).ok());
  EXPECT_THAT(recorder_.Tuples()["None"],
              ElementsAre(Tuple{"", 0, true, false}));
  EXPECT_FALSE(recorder_.seen()[0].has_barrier);
  EXPECT_TRUE(factory_.records().empty());
}

TEST_F(CoordinatorTest, TfConfigWithoutClusterIsLocalAndRunsEvalFn) {
  env_.SetVar("TF_CONFIG", R"({"task": {"type": "worker", "index": 0}})");
  Recorder eval;
  auto o = Options(recorder_.Fn(), nullptr);
  o.eval_fn = eval.Fn();
  o.mode = CoordinatorMode::kIndependentWorker;
  ASSERT_TRUE(Run(o).ok());
  EXPECT_EQ(recorder_.seen().size(), 1u);
  EXPECT_EQ(eval.seen().size(), 1u);
  EXPECT_EQ(eval.seen()[0].master_target, "");
}

TEST_F(CoordinatorTest, LocalModeIgnoresTheMode) {
  auto o = Options(recorder_.Fn(), nullptr);
  o.mode = static_cast<CoordinatorMode>(7);
  EXPECT_TRUE(Run(o).ok());
}

// --- STANDALONE_CLIENT
// ----------------------------------------------------------

TEST_F(CoordinatorTest, StandaloneBetweenGraphOneThreadPerWorker) {
  MockStrategy strategy(true, /*should_init=*/true);
  auto o = Options(recorder_.Fn(), &strategy);
  o.cluster_spec = WorkersAndPs();
  ASSERT_TRUE(Run(o).ok());
  EXPECT_THAT(recorder_.Tuples()["worker"],
              ElementsAre(Tuple{"grpc://w0:2222", 3, true, true},
                          Tuple{"grpc://w1:2222", 3, false, true},
                          Tuple{"grpc://w2:2222", 3, false, true}));
  std::map<int, std::tuple<bool, bool, bool>> props;
  for (const Seen& s : recorder_.seen()) {
    EXPECT_TRUE(s.has_barrier);
    props[s.task_id] = {s.should_init, s.should_checkpoint,
                        s.should_save_summary};
  }
  EXPECT_EQ(props[0], std::make_tuple(true, true, true));
  EXPECT_EQ(props[1], std::make_tuple(true, false, false));
  EXPECT_EQ(props[2], std::make_tuple(true, false, false));
  EXPECT_TRUE(factory_.records().empty());
}

TEST_F(CoordinatorTest, StandaloneBetweenGraphWithChief) {
  MockStrategy strategy(true);
  auto o = Options(recorder_.Fn(), &strategy);
  o.cluster_spec = Cluster(
      {{"chief", {"fake_chief"}}, {"worker", {"w0:1", "w1:1", "w2:1"}}});
  ASSERT_TRUE(Run(o).ok());
  auto tuples = recorder_.Tuples();
  EXPECT_THAT(tuples["chief"],
              ElementsAre(Tuple{"grpc://fake_chief", 4, true, true}));
  EXPECT_THAT(tuples["worker"],
              ElementsAre(Tuple{"grpc://w0:1", 4, false, true},
                          Tuple{"grpc://w1:1", 4, false, true},
                          Tuple{"grpc://w2:1", 4, false, true}));
}

TEST_F(CoordinatorTest, StandaloneBarrierIsReusableManyTimes) {
  constexpr int kRounds = 200;
  std::atomic<int> arrivals{0};
  std::atomic<bool> out_of_step{false};
  MockStrategy strategy(true);
  auto o = Options(
      [&](const Strategy*) {
        const WorkerContext* c = CurrentWorkerContext();
        for (int round = 0; round < kRounds; ++round) {
          arrivals.fetch_add(1);
          EXPECT_TRUE(c->WaitForOtherWorkers().ok());
          // After the barrier of round r every thread has arrived r+1 times.
          if (arrivals.load() < 3 * (round + 1)) out_of_step = true;
          EXPECT_TRUE(c->WaitForOtherWorkers().ok());
        }
        return absl::OkStatus();
      },
      &strategy);
  o.cluster_spec = WorkersAndPs();
  ASSERT_TRUE(Run(o).ok());
  EXPECT_EQ(arrivals.load(), 3 * kRounds);
  EXPECT_FALSE(out_of_step.load());
}

TEST_F(CoordinatorTest, StandaloneFailedWorkerDoesNotHangTheOthers) {
  MockStrategy strategy(true);
  std::atomic<int> finished{0};
  auto o = Options(
      [&](const Strategy*) -> absl::Status {
        const WorkerContext* c = CurrentWorkerContext();
        if (c->task_id() == 1) return absl::InternalError("worker 1 failed");
        EXPECT_TRUE(c->WaitForOtherWorkers().ok());
        ++finished;
        return absl::OkStatus();
      },
      &strategy);
  o.cluster_spec = WorkersAndPs();
  absl::Status s = Run(o);
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(s.message(), HasSubstr("worker 1 failed"));
  EXPECT_EQ(finished.load(), 2);
}

TEST_F(CoordinatorTest, StandaloneInGraphRunsOnceWithNoTask) {
  MockStrategy strategy(false);
  auto o = Options(recorder_.Fn(), &strategy);
  o.cluster_spec = WorkersAndPs();
  ASSERT_TRUE(Run(o).ok());
  EXPECT_THAT(recorder_.Tuples()["None"],
              ElementsAre(Tuple{"grpc://w0:2222", 3, true, true}));
  EXPECT_FALSE(recorder_.seen()[0].has_barrier);
}

TEST_F(CoordinatorTest, StandaloneInGraphWithEvaluator) {
  MockStrategy strategy(false);
  auto o = Options(recorder_.Fn(), &strategy);
  o.cluster_spec = WorkersAndPs();
  o.cluster_spec.SetJob("evaluator",
                        std::vector<std::string>{"fake_evaluator"});
  o.rpc_layer = "";
  ASSERT_TRUE(Run(o).ok());
  auto tuples = recorder_.Tuples();
  EXPECT_THAT(tuples["None"], ElementsAre(Tuple{"w0:2222", 3, true, true}));
  EXPECT_THAT(tuples["evaluator"],
              ElementsAre(Tuple{"fake_evaluator", 3, true, false}));
}

TEST_F(CoordinatorTest, StandalonePsOnlyCluster) {
  MockStrategy in_graph(false), between(true);
  auto o = Options(recorder_.Fn(), &in_graph);
  o.cluster_spec = Cluster({{"ps", {"p0:1"}}});
  absl::Status s = Run(o);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("in-graph replication needs a chief or "
                                     "worker job in the cluster"));
  o.strategy = &between;
  EXPECT_TRUE(Run(o).ok());
  EXPECT_TRUE(recorder_.seen().empty());
}

TEST_F(CoordinatorTest, StandaloneNonClientTaskServesAndJoins) {
  MockStrategy strategy(true);
  auto o = Options(recorder_.Fn(), &strategy);
  o.cluster_spec = WorkersAndPs();
  o.task_type = "worker";
  o.task_id = 1;
  ASSERT_TRUE(Run(o).ok());
  EXPECT_TRUE(recorder_.seen().empty());
  EXPECT_EQ(factory_.started("worker"), 1);
  EXPECT_THAT(factory_.joined("worker"), ElementsAre(true));
}

// --- INDEPENDENT_WORKER
// ---------------------------------------------------------

// One coordinator per task of `cluster`, each on its own thread.
absl::Status RunEveryTask(const DistributeCoordinatorOptions& base) {
  std::vector<std::thread> threads;
  absl::Mutex mu;
  absl::Status first;
  for (const std::string& job : base.cluster_spec.jobs()) {
    for (const auto& [index, address] : *base.cluster_spec.tasks(job)) {
      threads.emplace_back([&, job = job, index = index] {
        DistributeCoordinatorOptions o = base;
        o.task_type = job;
        o.task_id = index;
        absl::Status s = RunDistributeCoordinator(o);
        absl::MutexLock lock(&mu);
        if (first.ok()) first = s;
      });
    }
  }
  for (auto& t : threads) t.join();
  return first;
}

TEST_F(CoordinatorTest, IndependentBetweenGraph) {
  MockStrategy strategy(true);
  auto o = Options(recorder_.Fn(), &strategy);
  o.mode = CoordinatorMode::kIndependentWorker;
  o.cluster_spec = Cluster(
      {{"worker", {"localhost:1001", "localhost:1002", "localhost:1003"}},
       {"ps", {"localhost:1004", "localhost:1005"}}});
  ASSERT_TRUE(RunEveryTask(o).ok());
  EXPECT_EQ(recorder_.seen().size(), 3u);
  for (const Seen& s : recorder_.seen()) EXPECT_FALSE(s.has_barrier);
  EXPECT_THAT(recorder_.Tuples()["worker"],
              ElementsAre(Tuple{"grpc://localhost:1001", 3, true, true},
                          Tuple{"grpc://localhost:1002", 3, false, true},
                          Tuple{"grpc://localhost:1003", 3, false, true}));
  EXPECT_THAT(factory_.joined("worker"), ElementsAre(false, false, false));
  EXPECT_THAT(factory_.joined("ps"), ElementsAre(true, true));
}

TEST_F(CoordinatorTest, IndependentInGraphWithEvaluator) {
  MockStrategy strategy(false);
  auto o = Options(recorder_.Fn(), &strategy);
  o.mode = CoordinatorMode::kIndependentWorker;
  o.rpc_layer = "";
  o.cluster_spec = Cluster(
      {{"worker", {"localhost:1001", "localhost:1002", "localhost:1003"}},
       {"evaluator", {"localhost:1009"}}});
  ASSERT_TRUE(RunEveryTask(o).ok());
  auto tuples = recorder_.Tuples();
  EXPECT_THAT(tuples["None"],
              ElementsAre(Tuple{"localhost:1001", 3, true, true}));
  EXPECT_THAT(tuples["evaluator"],
              ElementsAre(Tuple{"localhost:1009", 3, true, false}));
  EXPECT_EQ(factory_.started("worker"), 3);
  EXPECT_THAT(factory_.joined("worker"), ElementsAre(false, true, true));
  EXPECT_EQ(factory_.started("evaluator"), 1);
  EXPECT_THAT(factory_.joined("evaluator"), ElementsAre(false));
  // The evaluator's server knows only itself; the others not the evaluator.
  for (const auto& r : factory_.records()) {
    if (r.args.task_type == "evaluator") {
      EXPECT_EQ(r.args.cluster.jobs(), std::vector<std::string>{"evaluator"});
    } else {
      EXPECT_FALSE(r.args.cluster.HasJob("evaluator"));
    }
  }
}

TEST_F(CoordinatorTest, EvaluatorOutsideTheClusterRunsLocallyWithoutServer) {
  MockStrategy strategy(true);
  auto o = Options(nullptr, &strategy);
  o.eval_fn = recorder_.Fn();
  o.mode = CoordinatorMode::kIndependentWorker;
  o.cluster_spec = Cluster({{"chief", {"c:1"}}, {"worker", {"w:1"}}});
  o.task_type = "evaluator";
  o.task_id = 0;
  ASSERT_TRUE(Run(o).ok());
  EXPECT_THAT(recorder_.Tuples()["evaluator"],
              ElementsAre(Tuple{"", 2, true, false}));
  EXPECT_TRUE(factory_.records().empty());
}

TEST_F(CoordinatorTest, IndependentErrorsBeforeAnythingStarts) {
  MockStrategy strategy(true);
  auto o = Options(recorder_.Fn(), &strategy);
  o.mode = CoordinatorMode::kIndependentWorker;
  env_.SetVar("TF_CONFIG", R"({"cluster": {"worker": ["w:1"]}})");
  absl::Status s = Run(o);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("\"task\""));

  o.cluster_spec = WorkersAndPs();
  o.task_type = "master";
  o.task_id = 0;
  s = Run(o);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("Unexpected task_type: 'master'"));

  o.task_type = "worker";
  o.task_id = 5;
  s = Run(o);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("No task with index 5 in job 'worker'"));
  EXPECT_TRUE(factory_.records().empty());
  EXPECT_TRUE(recorder_.seen().empty());
}

TEST_F(CoordinatorTest, UnknownMode) {
  EXPECT_THAT(ParseCoordinatorMode("bogus").status().message(),
              HasSubstr("Unexpected coordinator mode: 'bogus'"));
  EXPECT_EQ(*ParseCoordinatorMode("INDEPENDENT_WORKER"),
            CoordinatorMode::kIndependentWorker);
  EXPECT_EQ(*ParseCoordinatorMode("standalone_client"),
            CoordinatorMode::kStandaloneClient);
  auto o = Options(recorder_.Fn(), nullptr);
  o.cluster_spec = WorkersAndPs();
  o.mode = static_cast<CoordinatorMode>(7);
  absl::Status s = Run(o);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("Unexpected coordinator mode: '7'"));
}

TEST_F(CoordinatorTest, NestedCallFails) {
  absl::Status inner;
  auto o = Options(
      [&](const Strategy*) {
        DistributeCoordinatorOptions nested;
        nested.env = &env_;
        inner = RunDistributeCoordinator(nested);
        return absl::OkStatus();
      },
      nullptr);
  ASSERT_TRUE(Run(o).ok());
  EXPECT_EQ(inner.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(inner.message(),
              HasSubstr("You cannot run distribute coordinator in a "
                        "`worker_fn`.\t[local]"));
  EXPECT_EQ(CurrentWorkerContext(), nullptr);
}

TEST_F(CoordinatorTest, TfConfigGivesClusterTaskAndRpcLayer) {
  env_.SetVar("TF_CONFIG",
              R"({"cluster": {"worker": ["w0:1", "w1:1"], "ps": ["p:1"]},
                  "task": {"type": "worker", "index": "1"},
                  "rpc_layer": "cake"})");
  MockStrategy strategy(true);
  auto o = Options(recorder_.Fn(), &strategy);
  o.mode = CoordinatorMode::kIndependentWorker;
  ASSERT_TRUE(Run(o).ok());
  ASSERT_EQ(recorder_.seen().size(), 1u);
  EXPECT_EQ(recorder_.seen()[0].master_target, "cake://w1:1");
  ASSERT_EQ(factory_.records().size(), 1u);
  EXPECT_EQ(factory_.records()[0].args.rpc_layer, "cake");
  EXPECT_EQ(factory_.records()[0].args.task_id, 1);
}

TEST_F(CoordinatorTest, ClusterArgumentWinsOverTfConfig) {
  env_.SetVar("TF_CONFIG", R"({"cluster": {"worker": ["other:1"]},
                              "task": {"type": "worker", "index": 0}})");
  MockStrategy strategy(true);
  auto o = Options(recorder_.Fn(), &strategy);
  o.mode = CoordinatorMode::kIndependentWorker;
  o.cluster_spec = Cluster({{"worker", {"mine:1"}}});
  o.task_type = "worker";
  o.task_id = 0;
  ASSERT_TRUE(Run(o).ok());
  EXPECT_EQ(recorder_.seen()[0].master_target, "grpc://mine:1");
}

// --- Session configs (BR-72-05)
// -----------------------------------------------

TEST_F(CoordinatorTest, StdServerConfigHasNoDeviceFiltersContextConfigHas) {
  MockStrategy strategy(true);
  auto o = Options(recorder_.Fn(), &strategy);
  o.mode = CoordinatorMode::kIndependentWorker;
  o.cluster_spec = Cluster({{"worker", {"fake_worker"}}, {"ps", {"fake_ps"}}});
  o.task_type = "worker";
  o.task_id = 0;
  ASSERT_TRUE(Run(o).ok());
  const ConfigProto server = factory_.records().at(0).args.session_config;
  EXPECT_EQ(server.intra_op_parallelism_threads(), 1);
  EXPECT_EQ(server.inter_op_parallelism_threads(), 0);
  EXPECT_EQ(server.device_filters_size(), 0);
  const ConfigProto context = recorder_.seen().at(0).session_config;
  EXPECT_EQ(context.intra_op_parallelism_threads(), 2);
  EXPECT_THAT(context.device_filters(),
              ElementsAre("/job:worker/task:0", "/job:ps"));
  EXPECT_TRUE(context.allow_soft_placement());
}

// TF's test_session_config_in_session_creator runs a real standard server
// for {"worker": ["localhost:0"]}: a cluster of one task may ask for port 0
// (it was refused as "no port" before the server saw it).
TEST_F(CoordinatorTest, RealStdServerOnPortZeroForAOneTaskCluster) {
  MockStrategy strategy(true);
  auto o = Options(recorder_.Fn(), &strategy);
  o.server_factory = nullptr;  // The real one.
  env_.SetVar(rpc::kJobTokenEnvVar, "coordinator-test-token-0123");
  o.mode = CoordinatorMode::kIndependentWorker;
  o.cluster_spec = Cluster({{"worker", {"localhost:0"}}});
  o.task_type = "worker";
  o.task_id = 0;
  absl::Status s = Run(o);
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_EQ(recorder_.seen().size(), 1u);
  const ConfigProto context = recorder_.seen().at(0).session_config;
  EXPECT_EQ(context.intra_op_parallelism_threads(), 2);
  EXPECT_EQ(context.inter_op_parallelism_threads(), 0);
  EXPECT_THAT(context.device_filters(),
              ElementsAre("/job:worker/task:0", "/job:ps"));
}

TEST_F(CoordinatorTest, EvalStrategyConfiguresTheEvaluator) {
  MockStrategy strategy(false), eval_strategy(true);
  auto o = Options(nullptr, &strategy);
  o.eval_fn = recorder_.Fn();
  o.eval_strategy = &eval_strategy;
  o.mode = CoordinatorMode::kIndependentWorker;
  o.cluster_spec = Cluster({{"evaluator", {"localhost:0"}}});
  o.task_type = "evaluator";
  o.task_id = 0;
  ASSERT_TRUE(Run(o).ok());
  const ConfigProto context = recorder_.seen().at(0).session_config;
  EXPECT_THAT(context.device_filters(), ElementsAre("/job:somejob"));
  EXPECT_EQ(context.inter_op_parallelism_threads(), 2);
  EXPECT_EQ(context.intra_op_parallelism_threads(), 0);
}

// --- Server reuse (BR-72-04)
// -----------------------------------------------------

TEST_F(CoordinatorTest, ServerIsReusedInOneThreadAndDifferentArgsFail) {
  MockStrategy strategy(true);
  auto o = Options(recorder_.Fn(), &strategy);
  o.mode = CoordinatorMode::kIndependentWorker;
  o.cluster_spec = WorkersAndPs();
  o.task_type = "worker";
  o.task_id = 0;
  absl::Status second;
  ASSERT_TRUE(InThread([&] {
                COHORT_RETURN_IF_ERROR(RunDistributeCoordinator(o));
                COHORT_RETURN_IF_ERROR(RunDistributeCoordinator(o));
                DistributeCoordinatorOptions other = o;
                other.task_id = 1;
                second = RunDistributeCoordinator(other);
                return absl::OkStatus();
              }).ok());
  EXPECT_EQ(factory_.started("worker"), 1);
  EXPECT_EQ(recorder_.seen().size(), 2u);
  EXPECT_EQ(second.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(second.message(), HasSubstr("task_id"));
  // Another thread starts its own.
  ASSERT_TRUE(Run(o).ok());
  EXPECT_EQ(factory_.started("worker"), 2);
}

// --- Google environment
// ------------------------------------------------------------

TEST_F(CoordinatorTest, GoogleEnvironmentPsJoinsAFakeServerThatSleeps) {
  env_.SetVar("TF_CONFIG", R"({"cluster": {"worker": ["fake_worker"],
                                           "ps": ["localhost:0"]},
                              "environment": "google"})");
  MockStrategy strategy(true);
  auto o = Options(nullptr, &strategy);
  o.mode = CoordinatorMode::kIndependentWorker;
  o.cluster_spec =
      Cluster({{"worker", {"fake_worker"}}, {"ps", {"localhost:0"}}});
  o.task_type = "ps";
  o.task_id = 0;
  absl::Mutex mu;
  StdServer* server = nullptr;
  o.on_std_server = [&](StdServer* s) {
    absl::MutexLock lock(&mu);
    server = s;
  };
  absl::Status result;
  std::thread ps([&] { result = RunDistributeCoordinator(o); });
  // The ps joined the fake server: it sleeps on the Env's clock.
  ASSERT_TRUE(env_.BlockUntilParked(1));
  env_.AdvanceTime(absl::Seconds(5));
  ASSERT_TRUE(env_.BlockUntilParked(1));  // and sleeps again: forever
  {
    absl::MutexLock lock(&mu);
    ASSERT_NE(server, nullptr);
    EXPECT_THAT(server->description(), HasSubstr("environment == 'google'"));
    server->Stop();
  }
  env_.AdvanceTime(absl::Seconds(5));
  ps.join();
  EXPECT_TRUE(result.ok());
  EXPECT_TRUE(factory_.records().empty());  // no real server
}

// --- RunStandardTensorflowServer (§2.6)
// ---------------------------------------------

class StandardServerTest : public CoordinatorTest {
 protected:
  absl::Status Start(const std::string& tf_config,
                     std::optional<ConfigProto> config = std::nullopt) {
    env_.SetVar("TF_CONFIG", tf_config);
    StandardServerOptions o;
    o.env = &env_;
    o.server_factory = &factory_;
    o.session_config = config;
    return InThread([&] { return RunStandardTensorflowServer(o).status(); });
  }
};

TEST_F(StandardServerTest, MissingPartsOfTfConfig) {
  EXPECT_THAT(Start("{}").message(),
              HasSubstr("\"cluster\" is not found in TF_CONFIG."));
  EXPECT_THAT(Start(R"({"cluster": {"worker": ["w:1"]}})").message(),
              HasSubstr("\"task\" is not found in TF_CONFIG."));
  absl::Status s =
      Start(R"({"cluster": {"worker": ["w:1"]}, "task": {"index": 0}})");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("\"task_type\" is not found in the `task` "
                                     "part of TF_CONFIG."));
  s = Start(
      R"({"cluster": {"ps": ["p:1"]}, "task": {"type": "ps", "index": 0}})");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(),
              HasSubstr("You must have `chief` or `worker` jobs in "
                        "the `cluster_spec`."));
  EXPECT_TRUE(factory_.records().empty());
}

TEST_F(StandardServerTest, ArgumentsFromTfConfig) {
  ConfigProto config;
  config.set_intra_op_parallelism_threads(1);
  ASSERT_TRUE(
      Start(R"({"cluster": {"worker": ["fake_worker"], "ps": ["fake_ps"]},
                       "task": {"type": "ps", "id": 3}})",
            config)
          .ok());
  ASSERT_EQ(factory_.records().size(), 1u);
  const StdServerArgs args = factory_.records()[0].args;
  EXPECT_EQ(args.task_type, "ps");
  EXPECT_EQ(args.task_id, 0);  // "id" is not read
  EXPECT_EQ(args.rpc_layer, "grpc");
  EXPECT_EQ(args.session_config.intra_op_parallelism_threads(), 1);
  EXPECT_EQ(args.session_config.experimental().collective_group_leader(),
            "/job:worker/replica:0/task:0");
  EXPECT_EQ(args.cluster,
            Cluster({{"worker", {"fake_worker"}}, {"ps", {"fake_ps"}}}));
}

// --- Strategies
// ----------------------------------------------------------------------

TEST(StrategyTest, ParameterServerStrategy) {
  ParameterServerStrategy ps;
  ClusterSpec cluster = Cluster(
      {{"chief", {"c:1"}}, {"worker", {"w:1", "w:2"}}, {"ps", {"p:1"}}});
  ConfigProto config;
  config.add_device_filters("/job:stale");
  ps.Configure(&config, &cluster, "worker", 1);
  EXPECT_THAT(config.device_filters(),
              ElementsAre("/job:worker/task:1", "/job:ps"));
  EXPECT_FALSE(*ps.should_init());
  EXPECT_FALSE(*ps.should_checkpoint());
  ps.Configure(&config, &cluster, "chief", 0);
  EXPECT_TRUE(*ps.should_init());
  EXPECT_TRUE(*ps.should_save_summary());
  EXPECT_TRUE(ps.between_graph());
  ClusterSpec no_chief = Cluster({{"worker", {"w:1"}}, {"ps", {"p:1"}}});
  ps.Configure(nullptr, &no_chief, "worker", 0);
  EXPECT_TRUE(*ps.should_checkpoint());
}

TEST(StrategyTest, CollectiveAllReduceStrategy) {
  CollectiveAllReduceStrategy s;
  ClusterSpec cluster = Cluster({{"worker", {"w:1", "w:2"}}});
  ConfigProto config;
  config.add_device_filters("/job:stale");
  s.Configure(&config, &cluster, "worker", 1);
  EXPECT_EQ(config.experimental().collective_group_leader(),
            "/job:worker/replica:0/task:0");
  EXPECT_THAT(config.device_filters(), ElementsAre("/job:worker/task:1"));
  EXPECT_TRUE(*s.should_init());
  EXPECT_FALSE(*s.should_checkpoint());
  auto copy = s.Clone();
  EXPECT_FALSE(*copy->should_checkpoint());
}

}  // namespace
}  // namespace cohort::distribute
