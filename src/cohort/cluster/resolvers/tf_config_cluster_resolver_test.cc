#include "cohort/cluster/resolvers/tf_config_cluster_resolver.h"

#include "cohort/base/fake_env.h"
#include "cohort/cluster/resolver_registry.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr char kTwoJobs[] =
    R"({"cluster": {"ps": ["ps0:2222", "ps1:2222"],
                    "worker": ["w0:2222", "w1:2222", "w2:2222"]},
        "task": {"type": "ps", "index": 0}})";

TEST(TFConfigClusterResolverTest, ReadsClusterTaskAndMaster) {
  FakeEnv env;
  env.SetVar("TF_CONFIG", kTwoJobs);
  TFConfigClusterResolver resolver(&env);
  EXPECT_EQ(resolver.cluster_spec()->ToJson(),
            Json::parse(R"({"ps": ["ps0:2222", "ps1:2222"],
                            "worker": ["w0:2222", "w1:2222", "w2:2222"]})"));
  EXPECT_EQ(resolver.task_type(), "ps");
  EXPECT_EQ(resolver.task_id(), 0);
  EXPECT_EQ(resolver.rpc_layer(), std::nullopt);
  EXPECT_EQ(resolver.environment(), std::nullopt);
  EXPECT_EQ(*resolver.master(), "ps0:2222");
  EXPECT_EQ(*resolver.master(std::string("worker"), 1), "w1:2222");
  EXPECT_EQ(*resolver.master(std::string("worker"), 1, std::string("grpc")),
            "grpc://w1:2222");
}

TEST(TFConfigClusterResolverTest, RereadsTheVariableOnEveryAccess) {
  FakeEnv env;
  TFConfigClusterResolver resolver(&env);
  EXPECT_TRUE(resolver.cluster_spec()->empty());  // unset means {}
  EXPECT_EQ(*resolver.master(), "");
  env.SetVar("TF_CONFIG", kTwoJobs);
  EXPECT_EQ(*resolver.master(), "ps0:2222");
  env.SetVar("TF_CONFIG",
             R"({"cluster": {"worker": ["a:1", "b:1"]}, "rpc_layer": "grpc",
                 "task": {"type": "worker", "index": "1"}})");
  EXPECT_EQ(resolver.task_id(), 1);  // "1" is converted, as TensorFlow does
  EXPECT_EQ(*resolver.master(), "grpc://b:1");
}

TEST(TFConfigClusterResolverTest, MasterSpecialCases) {
  FakeEnv env;
  TFConfigClusterResolver resolver(&env);
  env.SetVar("TF_CONFIG",
             R"({"cluster": {"worker": ["only:1"]}, "rpc_layer": "grpc"})");
  EXPECT_EQ(*resolver.master(), "");  // one job with one task
  env.SetVar("TF_CONFIG", R"({"cluster": {"worker": ["a:1", "b:1"]},
                              "session_master": "sm:5"})");
  EXPECT_EQ(*resolver.master(std::string("worker"), 1, std::string("grpc")),
            "sm:5");
  env.SetVar("TF_CONFIG", R"({"cluster": {"worker": ["a:1", "b:1"]}})");
  auto no_task = resolver.master();
  EXPECT_EQ(no_task.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(no_task.status().message(),
              HasSubstr("No such job in cluster: None"));
}

TEST(TFConfigClusterResolverTest, OverridesWinAndZeroIsHonoured) {
  FakeEnv env;
  env.SetVar("TF_CONFIG", R"({"cluster": {"worker": ["a:1", "b:1"]},
                              "task": {"type": "worker", "index": 1},
                              "rpc_layer": "grpc"})");
  TFConfigClusterResolver::Options options;
  options.task_id = 0;
  options.rpc_layer = "";
  options.environment = "cloud";
  TFConfigClusterResolver resolver(&env, options);
  EXPECT_EQ(resolver.task_id(), 0);
  EXPECT_EQ(resolver.rpc_layer(), "");
  EXPECT_EQ(resolver.environment(), "cloud");
  EXPECT_EQ(*resolver.master(), "a:1");
  ASSERT_TRUE(resolver.set_task_type(std::string("worker")).ok());
  ASSERT_TRUE(resolver.set_task_id(std::nullopt).ok());
  EXPECT_EQ(resolver.task_id(), 1);
}

TEST(TFConfigClusterResolverTest, JobsKeepTheOrderOfTfConfig) {
  FakeEnv env;
  env.SetVar("TF_CONFIG",
             R"({"cluster": {"worker": ["w:1"], "chief": ["c:1"]}})");
  TFConfigClusterResolver resolver(&env);
  EXPECT_EQ(resolver.cluster_spec()->jobs(),
            (std::vector<std::string>{"worker", "chief"}));
}

TEST(TFConfigClusterResolverTest, NumericTaskTypeBecomesText) {
  FakeEnv env;
  env.SetVar("TF_CONFIG", R"({"cluster": {"123456": ["a:1"], "worker": ["w:1"]},
                              "task": {"type": 123456, "index": 0}})");
  TFConfigClusterResolver resolver(&env);
  EXPECT_EQ(resolver.task_type(), "123456");
  EXPECT_EQ(*resolver.master(), "a:1");
}

TEST(TFConfigClusterResolverTest, NumAcceleratorsDefaultsToThisTask) {
  class Lister : public DeviceLister {
   public:
    absl::StatusOr<std::vector<DeviceInfo>> ListDevices(
        absl::string_view) override {
      return std::vector<DeviceInfo>{
          {"/job:worker/task:0/device:GPU:0", "GPU"},
          {"/job:worker/task:1/device:GPU:0", "GPU"},
          {"/job:worker/task:1/device:GPU:1", "GPU"}};
    }
  } lister;
  FakeEnv env;
  env.SetVar("TF_CONFIG", R"({"cluster": {"worker": ["a:1", "b:1"]},
                              "task": {"type": "worker", "index": 1}})");
  TFConfigClusterResolver resolver(&env);
  resolver.set_device_lister(&lister);
  EXPECT_EQ(*resolver.num_accelerators(), (AcceleratorCounts{{"GPU", 2}}));
  EXPECT_EQ(*resolver.num_accelerators(std::string("worker"), 0),
            (AcceleratorCounts{{"GPU", 1}}));
}

struct BadConfig {
  const char* tf_config;
  std::vector<const char*> mentions;
};

TEST(TFConfigClusterResolverTest,
     MalformedConfigNamesFieldValueAndExpectation) {
  const BadConfig cases[] = {
      {R"({"cluster": )", {"TF_CONFIG", "not valid JSON"}},
      {R"([1, 2])", {"TF_CONFIG", "must be a JSON object", "[1,2]"}},
      {R"({"cluster": ["a:1"]})", {"TF_CONFIG", "\"cluster\"", "array"}},
      {R"({"cluster": {"worker": "a:1"}})",
       {"TF_CONFIG \"cluster\"", "worker", "must be a list"}},
      {R"({"cluster": {"worker": ["a:1"]}, "task": "worker"})",
       {"TF_CONFIG", "\"task\"", "\"worker\""}},
      {R"({"cluster": {"worker": ["a:1"]}, "task": {"type": ["w"]}})",
       {"TF_CONFIG", "task.type", "[\"w\"]", "job name"}},
      {R"({"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": "x"}})",
       {"TF_CONFIG", "task.index", "\"x\"", "integer"}},
      {R"({"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": -1}})",
       {"TF_CONFIG", "task.index", "-1", "non-negative"}},
      {R"({"cluster": {"worker": ["a:1"]}, "task": {"type": "wrker", "index": 0}})",
       {"TF_CONFIG", "task.type", "wrker", "expected one of: worker"}},
      {R"({"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "worker", "index": 2}})",
       {"TF_CONFIG", "task.index", "2", "tasks 0, 1"}},
      {R"({"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 4294967296}})",
       {"TF_CONFIG", "task.index", "4294967296", "has tasks 0"}},
      {R"({"cluster": {"worker": ["a:1"]}, "rpc_layer": 5})",
       {"TF_CONFIG", "rpc_layer", "5", "a string"}},
  };
  FakeEnv env;
  TFConfigClusterResolver resolver(&env);
  for (const BadConfig& c : cases) {
    env.SetVar("TF_CONFIG", c.tf_config);
    auto spec = resolver.cluster_spec();
    ASSERT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument)
        << c.tf_config;
    for (const char* m : c.mentions) {
      EXPECT_THAT(spec.status().message(), HasSubstr(m)) << c.tf_config;
    }
    EXPECT_EQ(resolver.master().status().code(),
              absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(resolver.task_type(), std::nullopt) << c.tf_config;
  }
  // An evaluator outside the cluster and a blank variable are valid.
  env.SetVar("TF_CONFIG", R"({"cluster": {"worker": ["a:1"]},
                              "task": {"type": "evaluator", "index": 0}})");
  EXPECT_TRUE(resolver.cluster_spec().ok());
  env.SetVar("TF_CONFIG", "  \n ");
  EXPECT_TRUE(resolver.cluster_spec()->empty());
}

TEST(TFConfigClusterResolverTest, RegistryDetectsNonBlankTfConfig) {
  ResolverRegistry registry;
  RegisterTFConfigResolver(&registry);
  FakeEnv env;
  EXPECT_FALSE(registry.Detect(&env).ok());
  env.SetVar("TF_CONFIG", " ");
  EXPECT_FALSE(registry.Detect(&env).ok());
  env.SetVar("TF_CONFIG", kTwoJobs);
  auto found = registry.Detect(&env);
  ASSERT_TRUE(found.ok());
  EXPECT_EQ((*found)->name, "tf_config");
  auto resolver = registry.Create("tf_config", &env);
  ASSERT_TRUE(resolver.ok());
  EXPECT_EQ(*(*resolver)->master(), "ps0:2222");
}

}  // namespace
}  // namespace cohort
