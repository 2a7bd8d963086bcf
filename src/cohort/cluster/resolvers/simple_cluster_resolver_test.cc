#include "cohort/cluster/resolvers/simple_cluster_resolver.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort {
namespace {

using ::testing::HasSubstr;

ClusterSpec TwoJobs() {
  ClusterSpec spec;
  spec.SetJob("ps", std::vector<std::string>{"ps0:2222", "ps1:2222"});
  spec.SetJob("worker",
              std::vector<std::string>{"w0:2222", "w1:2222", "w2:2222"});
  return spec;
}

TEST(SimpleClusterResolverTest, MasterLooksUpTaskOrUsesStoredMaster) {
  SimpleClusterResolver resolver(TwoJobs());
  EXPECT_EQ(*resolver.master(std::string("worker"), 2), "w2:2222");
  EXPECT_EQ(*resolver.master(std::string("worker"), 0, std::string("grpc")),
            "grpc://w0:2222");
  EXPECT_EQ(*resolver.master(), "");
  // Only a task type: the stored master.
  EXPECT_EQ(*resolver.master(std::string("worker")), "");
  // A 64-bit id is never truncated onto another task.
  EXPECT_THAT(resolver.master(std::string("worker"), int64_t{1} << 32)
                  .status()
                  .message(),
              HasSubstr("No task with index 4294967296 in job 'worker'"));
  EXPECT_THAT(resolver.master(std::string("chief"), 0).status().message(),
              HasSubstr("No such job in cluster: 'chief'"));
}

TEST(SimpleClusterResolverTest, StoredValuesAndRpcFallback) {
  SimpleClusterResolver::Options options;
  options.master = "m:1";
  options.task_type = "ps";
  options.task_id = 1;
  options.environment = "cloud";
  options.num_accelerators = {{"GPU", 8}};
  options.rpc_layer = "grpc";
  SimpleClusterResolver resolver(TwoJobs(), options);
  EXPECT_EQ(*resolver.master(), "grpc://m:1");
  // An empty argument falls back to the stored layer, as TensorFlow's `or`.
  EXPECT_EQ(*resolver.master(std::nullopt, std::nullopt, std::string()),
            "grpc://m:1");
  EXPECT_EQ(*resolver.master(std::nullopt, std::nullopt, std::string("http")),
            "http://m:1");
  EXPECT_EQ(resolver.task_type(), "ps");
  EXPECT_EQ(resolver.task_id(), 1);
  EXPECT_EQ(resolver.environment(), "cloud");
  EXPECT_EQ(*resolver.num_accelerators(std::string("worker"), 0),
            (AcceleratorCounts{{"GPU", 8}}));
  EXPECT_EQ(*resolver.cluster_spec(), TwoJobs());
  ASSERT_TRUE(resolver.set_task_id(0).ok());
  ASSERT_TRUE(resolver.set_rpc_layer(std::nullopt).ok());
  EXPECT_EQ(resolver.task_id(), 0);
  EXPECT_EQ(*resolver.master(), "m:1");
}

}  // namespace
}  // namespace cohort
