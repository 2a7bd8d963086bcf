// Engine resolution (engine.h) and the role plan of engine tasks
// (job_plan.h): what each engine's environment says, read through a fake
// environment; Kubernetes against the fake API server with a real Indexed
// Job's pod list.
#include "cohort/launch/engine.h"

#include <thread>

#include "absl/strings/str_cat.h"
#include "cohort/base/fake_env.h"
#include "cohort/base/json.h"
#include "cohort/cluster/resolvers/testing/fake_kubernetes_server.h"
#include "cohort/launch/job_plan.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort::launch {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(JobCountsTest, ParsesTensorFlowJobs) {
  auto jobs = ParseJobCounts("chief=1,worker=2,ps=1");
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  EXPECT_EQ(*jobs, (std::map<std::string, int>{
                       {"chief", 1}, {"ps", 1}, {"worker", 2}}));
}

TEST(JobCountsTest, RefusesWhatIsNotAJob) {
  for (const char* text : {"chief=2", "evaluator=2", "master=1", "worker=0",
                           "worker=x", "worker", "worker=1,worker=2", ""}) {
    auto jobs = ParseJobCounts(text);
    EXPECT_EQ(jobs.status().code(), absl::StatusCode::kInvalidArgument) << text;
  }
  EXPECT_THAT(ParseJobCounts("master=1").status().message(),
              HasSubstr("chief, worker, ps, evaluator"));
}

// TensorFlow's Slurm resolver: jobs sorted by name take consecutive slices.
TEST(PlanEngineTasksTest, JobsSortedByNameTakeConsecutiveTasks) {
  auto tasks = PlanEngineTasks({{"worker", 2}, {"ps", 1}, {"chief", 1}}, 4);
  ASSERT_TRUE(tasks.ok()) << tasks.status();
  std::vector<std::string> names;
  std::vector<int> partitions;
  for (const TaskSpec& t : *tasks) {
    names.push_back(t.Name());
    partitions.push_back(t.partition_id);
  }
  EXPECT_THAT(names, ElementsAre("chief:0", "ps:0", "worker:0", "worker:1"));
  EXPECT_THAT(partitions, ElementsAre(0, -1, 1, 2));
}

TEST(PlanEngineTasksTest, CountsMustMatchTheEngine) {
  auto tasks = PlanEngineTasks({{"worker", 2}}, 4);
  EXPECT_EQ(tasks.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(tasks.status().message(), HasSubstr("asks for 2 task(s)"));
  EXPECT_THAT(tasks.status().message(), HasSubstr("runs 4"));
  EXPECT_EQ(PlanEngineTasks({{"ps", 2}}, 2).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(RendezvousFlagTest, ReplacesHostAndPortOrOnlyThePort) {
  EXPECT_EQ(*ApplyRendezvousFlag("node-1", 8888, ""), "node-1:8888");
  EXPECT_EQ(*ApplyRendezvousFlag("node-1", 8888, ":7000"), "node-1:7000");
  EXPECT_EQ(*ApplyRendezvousFlag("node-1", 8888, "head:7000"), "head:7000");
  for (const char* bad : {":0", ":x", "head", "head:70000", ":"}) {
    EXPECT_EQ(ApplyRendezvousFlag("node-1", 8888, bad).status().code(),
              absl::StatusCode::kInvalidArgument)
        << bad;
  }
  auto v6 = SplitHostPort("[fd00::5]:7070", "address");
  ASSERT_TRUE(v6.ok());
  EXPECT_EQ(v6->first, "fd00::5");
  EXPECT_EQ(v6->second, 7070);
}

TEST(SlurmEngineTest, RankHostsAndTask0sAddress) {
  FakeEnv env;
  env.SetVar("SLURM_PROCID", "2");
  env.SetVar("SLURM_STEP_NUM_TASKS", "4");
  env.SetVar("SLURM_STEP_NODELIST", "node[1-2]");
  env.SetVar("SLURM_STEP_TASKS_PER_NODE", "2(x2)");
  env.SetVar("SLURM_JOB_ID", "77");
  auto task = ResolveEngineTask(&env, "auto", {});
  ASSERT_TRUE(task.ok()) << task.status();
  EXPECT_EQ(task->engine, "slurm");
  EXPECT_EQ(task->index, 2);
  EXPECT_EQ(task->count, 4);
  EXPECT_THAT(task->hosts, ElementsAre("node1", "node1", "node2", "node2"));
  EXPECT_EQ(task->rendezvous, "node1:8888");
  EXPECT_THAT(task->source, HasSubstr("SLURM_PROCID=2 of 4"));
  EXPECT_THAT(task->source, HasSubstr("node[1-2]"));

  EngineFlags flags;
  flags.rendezvous = ":9000";
  EXPECT_EQ(ResolveSlurmTask(&env, flags)->rendezvous, "node1:9000");
}

TEST(SlurmEngineTest, OutsideAStepNamesTheVariable) {
  FakeEnv env;
  auto task = ResolveEngineTask(&env, "slurm", {});
  EXPECT_EQ(task.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(task.status().message(), HasSubstr("SLURM_PROCID"));
}

TEST(TfConfigEngineTest, ClusterSortedByJobGivesTheTasks) {
  FakeEnv env;
  env.SetVar("TF_CONFIG", R"({"cluster": {"worker": ["w0:2222", "w1:2222"],
      "chief": ["c0:2222"], "ps": ["p0:2222"]},
      "task": {"type": "worker", "index": 1}})");
  auto task = ResolveEngineTask(&env, "auto", {});
  ASSERT_TRUE(task.ok()) << task.status();
  EXPECT_EQ(task->engine, "tf_config");
  EXPECT_EQ(task->index, 3);  // chief:0, ps:0, worker:0, worker:1
  EXPECT_THAT(task->hosts, ElementsAre("c0", "p0", "w0", "w1"));
  EXPECT_EQ(task->rendezvous, "c0:2222");
  EXPECT_EQ(task->jobs, (std::map<std::string, int>{
                            {"chief", 1}, {"ps", 1}, {"worker", 2}}));
}

TEST(TfConfigEngineTest, TaskOutsideTheClusterIsAnError) {
  FakeEnv env;
  env.SetVar("TF_CONFIG", R"({"cluster": {"worker": ["w0:2222"]},
      "task": {"type": "worker", "index": 3}})");
  EXPECT_FALSE(ResolveEngineTask(&env, "tf_config", {}).ok());
}

TEST(EngineTest, AutoWithoutAnEngineSaysWhatItLookedFor) {
  FakeEnv env;
  auto task = ResolveEngineTask(&env, "auto", {});
  EXPECT_EQ(task.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(task.status().message(), HasSubstr("SLURM_PROCID"));
  EXPECT_THAT(task.status().message(), HasSubstr("JOB_COMPLETION_INDEX"));
  EXPECT_EQ(ResolveEngineTask(&env, "yarn", {}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// A pod of the Indexed Job "train" in namespace "ml", reaching the fake API
// server through a kubeconfig (the fake speaks plain HTTP).
class KubernetesEngineTest : public ::testing::Test {
 protected:
  static constexpr char kSelector[] = "batch.kubernetes.io/job-name=train";

  void SetUp() override {
    ASSERT_TRUE(server_.Start().ok());
    env_.SetVar("JOB_COMPLETION_INDEX", "2");
    env_.SetVar("HOSTNAME", "train-2");
    env_.SetVar("COHORT_KUBERNETES_NAMESPACE", "ml");
    env_.SetVar("KUBECONFIG", "/kc");
    env_.SetFile("/kc", server_.Kubeconfig("sa-token"));
  }

  // The fixture's running pods with completion index < n.
  Json PodsBelow(int n) {
    auto list = testing::IndexedJobPods(COHORT_SOURCE_DIR, n);
    EXPECT_TRUE(list.ok()) << list.status();
    Json running = Json::array();
    for (const Json& pod : (*list)["items"]) {
      if (pod["status"]["phase"] == "Running") running.push_back(pod);
    }
    (*list)["items"] = running;
    return *list;
  }
  std::vector<std::string> PodIps(int n) {
    std::vector<std::string> ips(n);
    const Json list = PodsBelow(n);
    for (const Json& pod : list["items"]) {
      const std::string index = pod["metadata"]["annotations"]
                                   ["batch.kubernetes.io/job-completion-index"];
      ips[std::stoi(index)] = pod["status"]["podIP"];
    }
    return ips;
  }

  testing::FakeKubernetesServer server_{std::string("sa-token")};
  FakeEnv env_;
};

TEST_F(KubernetesEngineTest, IndexFromTheJobAndPeersByCompletionIndex) {
  server_.SetPodList(kSelector, PodsBelow(4));
  EngineFlags flags;
  flags.num_tasks = 4;
  auto task = ResolveEngineTask(&env_, "auto", flags);
  ASSERT_TRUE(task.ok()) << task.status();
  EXPECT_EQ(task->engine, "kubernetes");
  EXPECT_EQ(task->index, 2);
  EXPECT_EQ(task->count, 4);
  EXPECT_EQ(task->hosts, PodIps(4));
  EXPECT_EQ(task->rendezvous, absl::StrCat(PodIps(4)[0], ":8470"));
  EXPECT_EQ(
      server_.requests().at(0),
      absl::StrCat("GET /api/v1/namespaces/ml/pods?labelSelector=", kSelector));

  flags.rendezvous = "train-0.train:7070";
  EXPECT_EQ(ResolveKubernetesTask(&env_, flags)->rendezvous,
            "train-0.train:7070");
}

TEST_F(KubernetesEngineTest, WaitsWhilePodsStart) {
  server_.SetPodList(kSelector, PodsBelow(3));
  EngineFlags flags;
  flags.num_tasks = 4;
  absl::StatusOr<EngineTask> task;
  std::thread resolver([&] { task = ResolveKubernetesTask(&env_, flags); });
  env_.BlockUntilSleepers(1);  // parked: 3 of 4 pods run
  server_.SetPodList(kSelector, PodsBelow(4));
  env_.AdvanceTime(absl::Seconds(1));
  resolver.join();
  ASSERT_TRUE(task.ok()) << task.status();
  EXPECT_EQ(task->hosts, PodIps(4));
}

TEST_F(KubernetesEngineTest, PodsThatNeverAllRunNameTheSelector) {
  server_.SetPodList(kSelector, PodsBelow(3));
  EngineFlags flags;
  flags.num_tasks = 4;
  flags.timeout = absl::ZeroDuration();
  auto task = ResolveKubernetesTask(&env_, flags);
  EXPECT_EQ(task.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(task.status().message(), HasSubstr(kSelector));
  EXPECT_THAT(task.status().message(), HasSubstr("3 of 4 pods"));
}

TEST_F(KubernetesEngineTest, NeedsTheTaskCountAndAnIndexedJob) {
  server_.SetPodList(kSelector, PodsBelow(4));
  EXPECT_THAT(ResolveKubernetesTask(&env_, {}).status().message(),
              HasSubstr("--num-tasks"));
  EngineFlags flags;
  flags.num_tasks = 2;  // index 2 of 2
  EXPECT_EQ(ResolveKubernetesTask(&env_, flags).status().code(),
            absl::StatusCode::kInvalidArgument);
  FakeEnv outside;
  flags.num_tasks = 4;
  EXPECT_THAT(ResolveKubernetesTask(&outside, flags).status().message(),
              HasSubstr("JOB_COMPLETION_INDEX"));
}

}  // namespace
}  // namespace cohort::launch
