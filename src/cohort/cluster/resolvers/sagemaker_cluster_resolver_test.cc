#include "cohort/cluster/resolvers/sagemaker_cluster_resolver.h"

#include "cohort/base/fake_env.h"
#include "cohort/cluster/resolver_registry.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort {
namespace {

using ::testing::HasSubstr;

TEST(SageMakerClusterResolverTest, SortsHostsAsTextAndFindsThisHost) {
  FakeEnv env;
  env.SetVar("SM_HOSTS", R"(["algo-2","algo-10","algo-1"])");
  env.SetVar("SM_CURRENT_HOST", "algo-2");
  SageMakerClusterResolver resolver(&env, 8000);
  EXPECT_EQ(
      resolver.cluster_spec()->ToJson(),
      Json::parse(
          R"({"worker": ["algo-1:8000", "algo-10:8000", "algo-2:8000"]})"));
  EXPECT_EQ(resolver.task_type(), "worker");
  EXPECT_EQ(resolver.task_id(), 2);
  EXPECT_EQ(resolver.rpc_layer(), std::nullopt);
  EXPECT_EQ(*resolver.master(), "algo-2:8000");
  EXPECT_EQ(*resolver.master(std::string("worker"), 0, std::string("grpc")),
            "grpc://algo-1:8000");
}

TEST(SageMakerClusterResolverTest, DefaultPortAndRpcOverride) {
  FakeEnv env;
  env.SetVar("SM_HOSTS", R"(["algo-1","algo-2"])");
  env.SetVar("SM_CURRENT_HOST", "algo-1");
  SageMakerClusterResolver::Options options;
  options.rpc_layer = "grpc";
  SageMakerClusterResolver resolver(
      &env, SageMakerClusterResolver::kDefaultPort, options);
  EXPECT_EQ(*resolver.master(), "grpc://algo-1:2223");
}

TEST(SageMakerClusterResolverTest, UnlistedHostOrNoHostsGiveAnEmptyConfig) {
  FakeEnv env;
  env.SetVar("SM_HOSTS", R"(["algo-1","algo-2"])");
  env.SetVar("SM_CURRENT_HOST", "algo-3");
  SageMakerClusterResolver resolver(&env);
  EXPECT_TRUE(resolver.cluster_spec()->empty());
  EXPECT_EQ(resolver.task_type(), std::nullopt);
  EXPECT_EQ(resolver.task_id(), std::nullopt);
  EXPECT_EQ(*resolver.master(), "");
  env.SetVar("SM_HOSTS", "");
  env.SetVar("SM_CURRENT_HOST", "");
  EXPECT_EQ(*resolver.master(), "");
  env.SetVar("SM_HOSTS", R"(["algo-1"])");
  EXPECT_EQ(*resolver.master(), "");
}

TEST(SageMakerClusterResolverTest, MissingOrMalformedVariables) {
  FakeEnv env;
  SageMakerClusterResolver resolver(&env);
  auto missing = resolver.cluster_spec();
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(missing.status().message(),
              HasSubstr("Not a SageMaker Environment"));
  env.SetVar("SM_CURRENT_HOST", "algo-1");
  env.SetVar("SM_HOSTS", "algo-1,algo-2");
  auto not_json = resolver.cluster_spec();
  EXPECT_EQ(not_json.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(not_json.status().message(), HasSubstr("SM_HOSTS"));
  env.SetVar("SM_HOSTS", R"({"a": 1})");
  EXPECT_THAT(resolver.cluster_spec().status().message(),
              HasSubstr("SM_HOSTS must be a JSON list"));
  env.SetVar("SM_HOSTS", R"(["a", 2])");
  EXPECT_THAT(resolver.cluster_spec().status().message(),
              HasSubstr("as strings"));
}

TEST(SageMakerClusterResolverTest, DetectedWhenBothVariablesAreSet) {
  ResolverRegistry registry;
  RegisterSageMakerResolver(&registry);
  FakeEnv env;
  env.SetVar("SM_HOSTS", "[]");
  EXPECT_FALSE(registry.Detect(&env).ok());
  env.SetVar("SM_CURRENT_HOST", "algo-1");
  EXPECT_EQ((*registry.Detect(&env))->name, "sagemaker");
}

}  // namespace
}  // namespace cohort
