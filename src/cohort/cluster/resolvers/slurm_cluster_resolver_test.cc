#include "cohort/cluster/resolvers/slurm_cluster_resolver.h"

#include "cohort/base/fake_env.h"
#include "cohort/cluster/resolver_registry.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort {
namespace {

using ::testing::HasSubstr;

Json SpecJson(SlurmClusterResolver& r) {
  auto spec = r.cluster_spec();
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.ok() ? spec->ToJson() : Json();
}

void StepEnv(FakeEnv& env, const char* procid, const char* num_tasks,
             const char* nodelist, const char* tasks_per_node) {
  env.SetVar("SLURM_PROCID", procid);
  if (num_tasks) env.SetVar("SLURM_STEP_NUM_TASKS", num_tasks);
  if (nodelist) env.SetVar("SLURM_STEP_NODELIST", nodelist);
  if (tasks_per_node) env.SetVar("SLURM_STEP_TASKS_PER_NODE", tasks_per_node);
}

TEST(SlurmClusterResolverTest, SimpleRetrievalFromEnvSetsVisibleDevices) {
  FakeEnv env;
  StepEnv(env, "0", "3", "t02n13,t02n41,t02n43", "1(x3)");
  env.SetVar("CUDA_VISIBLE_DEVICES", "0");
  auto r = SlurmClusterResolver::Create(&env, {});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(
      SpecJson(**r),
      Json::parse(
          R"({"worker": ["t02n13:8888", "t02n41:8888", "t02n43:8888"]})"));
  EXPECT_EQ(*(*r)->master("worker", 0, "grpc"), "grpc://t02n13:8888");
  EXPECT_EQ(*(*r)->num_accelerators(), (AcceleratorCounts{{"GPU", 1}}));
  EXPECT_EQ(env.GetVar("CUDA_VISIBLE_DEVICES"), "0");
  EXPECT_EQ((*r)->task_type(), "worker");
  EXPECT_EQ((*r)->task_id(), 0);
}

TEST(SlurmClusterResolverTest, MultipleGpusPerTask) {
  FakeEnv env;
  StepEnv(env, "1", "5", "t02n13,t02n41,t02n43", "2(x2),1");
  env.SetVar("CUDA_VISIBLE_DEVICES", "");
  SlurmClusterResolver::Options o;
  o.jobs = {{{"ps", 1}, {"worker", 4}}};
  o.gpus_per_node = 4;
  o.gpus_per_task = 2;
  auto r = SlurmClusterResolver::Create(&env, o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(SpecJson(**r), Json::parse(R"({"ps": ["t02n13:8888"],
      "worker": ["t02n13:8889", "t02n41:8888", "t02n41:8889", "t02n43:8888"]})"));
  EXPECT_EQ(env.GetVar("CUDA_VISIBLE_DEVICES"), "2,3");
  EXPECT_EQ((*r)->task_type(), "worker");
  EXPECT_EQ((*r)->task_id(), 0);
  EXPECT_EQ(*(*r)->num_accelerators(), (AcceleratorCounts{{"GPU", 2}}));
}

TEST(SlurmClusterResolverTest, MasterRulesAndRpcLayer) {
  FakeEnv env;
  StepEnv(env, "0", "3", "t02n13,t02n41,t02n43", nullptr);
  SlurmClusterResolver::Options o;
  o.jobs = {{{"ps", 1}, {"worker", 2}}};
  o.tasks_per_node = 1;
  o.gpus_per_node = 1;
  o.gpus_per_task = 1;
  o.auto_set_gpu = false;
  auto r = SlurmClusterResolver::Create(&env, o);
  ASSERT_TRUE(r.ok()) << r.status();
  // Unknown until the spec is computed.
  EXPECT_EQ((*r)->task_type(), std::nullopt);
  EXPECT_EQ(*(*r)->master(), "");
  ASSERT_TRUE((*r)->set_task_type("worker").ok());
  ASSERT_TRUE((*r)->set_task_id(1).ok());
  EXPECT_EQ(*(*r)->master(), "grpc://t02n43:8888");
  ASSERT_TRUE((*r)->set_rpc_layer("ab").ok());
  EXPECT_EQ(*(*r)->master("ps", 0), "ab://t02n13:8888");
  EXPECT_EQ(*(*r)->master("ps", 0, "test"), "test://t02n13:8888");
  EXPECT_FALSE(env.GetVar("CUDA_VISIBLE_DEVICES").has_value());
}

TEST(SlurmClusterResolverTest, HostsAreVisitedInTextOrder) {
  FakeEnv env;
  StepEnv(env, "0", "2", "n[9-10]", "1(x2)");
  SlurmClusterResolver::Options o;
  o.gpus_per_node = 1;
  o.auto_set_gpu = false;
  auto r = SlurmClusterResolver::Create(&env, o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(SpecJson(**r),
            Json::parse(R"({"worker": ["n10:8888", "n9:8888"]})"));
  EXPECT_EQ(*(*r)->master(), "grpc://n10:8888");
}

TEST(SlurmClusterResolverTest, TasksPerNodeMapNeedsNoNodelist) {
  FakeEnv env;
  env.SetVar("SLURM_PROCID", "2");
  SlurmClusterResolver::Options o;
  o.jobs = {{{"worker", 3}}};
  o.tasks_per_node_map = {{{"b", 1}, {"a", 2}}};
  o.gpus_per_node = 2;
  auto r = SlurmClusterResolver::Create(&env, o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(SpecJson(**r),
            Json::parse(R"({"worker": ["a:8888", "a:8889", "b:8888"]})"));
  EXPECT_EQ(env.GetVar("CUDA_VISIBLE_DEVICES"), "0");
  EXPECT_EQ((*r)->task_id(), 2);
}

TEST(SlurmClusterResolverTest, ValidationOrderGpusBeforeTaskCount) {
  FakeEnv env;
  StepEnv(env, "0", nullptr, "a,b", nullptr);
  SlurmClusterResolver::Options o;
  o.jobs = {{{"worker", 5}}};  // also wrong, but GPUs are checked first
  o.tasks_per_node = 2;
  o.gpus_per_node = 1;
  o.gpus_per_task = 1;
  auto r = SlurmClusterResolver::Create(&env, o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(r.status().message(),
              HasSubstr("Requested more GPUs per node than available."));

  o.jobs = {{{"worker", 3}}};
  o.tasks_per_node = 1;
  r = SlurmClusterResolver::Create(&env, o);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(),
              HasSubstr("Requested 3 tasks but only 2 were assigned."));
}

TEST(SlurmClusterResolverTest, MissingVariablesAreNamed) {
  FakeEnv env;
  auto r = SlurmClusterResolver::Create(&env, {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(r.status().message(),
              HasSubstr("SLURM_PROCID not found in environment. Not running "
                        "inside a SLURM step?"));
  env.SetVar("SLURM_PROCID", "0");
  r = SlurmClusterResolver::Create(&env, {});
  EXPECT_THAT(r.status().message(),
              HasSubstr("SLURM_STEP_NUM_TASKS not found"));
  env.SetVar("SLURM_STEP_NUM_TASKS", "2");
  r = SlurmClusterResolver::Create(&env, {});
  EXPECT_THAT(r.status().message(), HasSubstr("SLURM_STEP_NODELIST not found"));
  env.SetVar("SLURM_STEP_NODELIST", "a,b");
  r = SlurmClusterResolver::Create(&env, {});
  EXPECT_THAT(r.status().message(),
              HasSubstr("SLURM_STEP_TASKS_PER_NODE not found"));
}

TEST(SlurmClusterResolverTest, MalformedVariablesNameVariableValueGrammar) {
  FakeEnv env;
  StepEnv(env, "x1", "2", "a,b", "1(x2)");
  auto r = SlurmClusterResolver::Create(&env, {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("SLURM_PROCID=\"x1\""));

  StepEnv(env, "0", "2", "a[1-2]b", "1(x2)");
  r = SlurmClusterResolver::Create(&env, {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("SLURM_STEP_NODELIST"));
  EXPECT_THAT(r.status().message(), HasSubstr("a[1-2]b"));
  EXPECT_THAT(r.status().message(), HasSubstr("expected"));

  StepEnv(env, "0", "2", "a,b", "1x2");
  r = SlurmClusterResolver::Create(&env, {});
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("SLURM_STEP_TASKS_PER_NODE"));
  EXPECT_THAT(r.status().message(), HasSubstr("\"1x2\""));
  EXPECT_THAT(r.status().message(), HasSubstr("C(xR)"));
}

// TensorFlow crashes here (range() with step 0 in cluster_spec). cohort gives
// a CPU-only layout: no GPU environment change, {"GPU": 0}.
TEST(SlurmClusterResolverTest, GpuLessNodesGetCpuOnlyLayout) {
  FakeEnv env;
  StepEnv(env, "1", "4", "c[1-2]", "2(x2)");
  env.SetCommandOutput("nvidia-smi",
                       absl::NotFoundError("nvidia-smi: not found"));
  auto r = SlurmClusterResolver::Create(&env, {});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)->gpus_per_node(), 0);
  EXPECT_EQ((*r)->gpus_per_task(), 0);
  EXPECT_EQ(SpecJson(**r),
            Json::parse(
                R"({"worker": ["c1:8888", "c1:8889", "c2:8888", "c2:8889"]})"));
  EXPECT_FALSE(env.GetVar("CUDA_VISIBLE_DEVICES").has_value());
  EXPECT_EQ(*(*r)->num_accelerators(), (AcceleratorCounts{{"GPU", 0}}));
  EXPECT_EQ(*(*r)->master(), "grpc://c1:8889");
}

TEST(SlurmClusterResolverTest, GpuCountFromNvidiaSmi) {
  FakeEnv env;
  env.SetCommandOutput(
      "nvidia-smi", std::string("GPU 0: A100 (UUID: x)\nGPU 1: A100 (UUID: y)\n"
                                "GPU 2: A100\nGPU 3: A100\nother line\n"));
  EXPECT_EQ(CountGpusForSlurm(&env), 4);
  StepEnv(env, "3", "4", "g[1-2]", "2(x2)");
  auto r = SlurmClusterResolver::Create(&env, {});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)->gpus_per_task(), 2);
  SpecJson(**r);
  EXPECT_EQ(env.GetVar("CUDA_VISIBLE_DEVICES"), "2,3");
  env.SetVar("CUDA_VISIBLE_DEVICES", "");
  EXPECT_EQ(CountGpusForSlurm(&env), 1);
  env.SetVar("CUDA_VISIBLE_DEVICES", "0,1,2");
  EXPECT_EQ(CountGpusForSlurm(&env), 3);
}

TEST(SlurmClusterResolverTest, RankOutsideTheStepIsAnError) {
  FakeEnv env;
  StepEnv(env, "7", "2", "a,b", "1(x2)");
  SlurmClusterResolver::Options o;
  o.gpus_per_node = 0;
  auto r = SlurmClusterResolver::Create(&env, o);
  ASSERT_TRUE(r.ok()) << r.status();
  auto spec = (*r)->cluster_spec();
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(spec.status().message(), HasSubstr("SLURM_PROCID=7"));
}

TEST(SlurmClusterResolverTest, RegisteredWithDetection) {
  ResolverRegistry registry;
  RegisterSlurmResolver(&registry);
  FakeEnv env;
  EXPECT_FALSE(registry.Detect(&env).ok());
  StepEnv(env, "0", "1", "solo", "1");
  env.SetVar("CUDA_VISIBLE_DEVICES", "0");
  auto detected = registry.Detect(&env);
  ASSERT_TRUE(detected.ok());
  EXPECT_EQ((*detected)->name, "slurm");
  auto r = registry.Create("slurm", &env);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)->name(), "slurm");
  EXPECT_EQ((*r)->cluster_spec()->ToJson(),
            Json::parse(R"({"worker": ["solo:8888"]})"));
}

}  // namespace
}  // namespace cohort
