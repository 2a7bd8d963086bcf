#include "cohort/cluster/resolvers/gce_cluster_resolver.h"

#include "cohort/base/fake_env.h"
#include "cohort/cluster/resolver_registry.h"
#include "cohort/cluster/resolvers/testing/fake_compute_server.h"
#include "cohort/cluster/resolvers/testing/fake_metadata_server.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

Json Nic(const std::string& ip) {
  return Json{{"networkInterfaces", Json::array({{{"networkIP", ip}}})}};
}

class GceClusterResolverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    metadata_.Set("project/project-id", "md-project");
    metadata_.Set("instance/zone", "projects/1/zones/md-zone");
    ASSERT_TRUE(metadata_.Start().ok());
    ASSERT_TRUE(compute_.Start().ok());
    compute_.SetInstanceGroup("group",
                              {{"https://x/zones/z/instances/instance1",
                                "https://x/zones/z/instances/instance2"},
                               {"https://x/zones/z/instances/instance3"}});
    compute_.SetInstance("instance1", Nic("10.1.2.3"));
    compute_.SetInstance("instance2", Nic("10.10.3.4"));
    compute_.SetInstance("instance3", Nic("10.3.4.5"));
  }

  GceClusterResolver::Options Base() {
    GceClusterResolver::Options o;
    o.project = "test-project";
    o.zone = "us-east1-d";
    o.instance_group = "group";
    o.compute_api_url = compute_.api_url();
    o.metadata.base_url = metadata_.base_url();
    return o;
  }

  std::unique_ptr<GceClusterResolver> Make(GceClusterResolver::Options o) {
    auto r = GceClusterResolver::Create(&env_, o);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? std::move(*r) : nullptr;
  }

  FakeEnv env_;
  testing::FakeMetadataServer metadata_{"md-token"};
  testing::FakeComputeServer compute_{std::string("md-token")};
};

TEST_F(GceClusterResolverTest, PaginatesAndSortsAddressesAsText) {
  auto r = Make(Base());
  auto spec = r->cluster_spec();
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->ToJson(), Json::parse(R"({"worker":
      ["10.1.2.3:8470", "10.10.3.4:8470", "10.3.4.5:8470"]})"));
  const std::string group =
      "/compute/v1/projects/test-project/zones/us-east1-d/instanceGroups/group";
  EXPECT_THAT(
      compute_.requests(),
      ElementsAre("POST " + group + "/listInstances?orderBy=name",
                  "GET "
                  "/compute/v1/projects/test-project/zones/us-east1-d/"
                  "instances/instance1",
                  "GET "
                  "/compute/v1/projects/test-project/zones/us-east1-d/"
                  "instances/instance2",
                  "POST " + group + "/listInstances?orderBy=name&pageToken=1",
                  "GET "
                  "/compute/v1/projects/test-project/zones/us-east1-d/"
                  "instances/instance3"));
  EXPECT_EQ(*r->master(), "grpc://10.1.2.3:8470");
  EXPECT_EQ(*r->master("worker", 2, "test"), "test://10.3.4.5:8470");
}

TEST_F(GceClusterResolverTest, ProjectZoneAndTokenFromMetadata) {
  GceClusterResolver::Options o = Base();
  o.project.reset();
  o.zone.reset();
  auto spec = Make(o)->cluster_spec();
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_THAT(compute_.requests()[0],
              HasSubstr("/projects/md-project/zones/md-zone/instanceGroups/"));
}

TEST_F(GceClusterResolverTest, SettersAndEmptyTaskType) {
  GceClusterResolver::Options o = Base();
  o.task_type = "";
  o.task_id = 1;
  o.port = 2222;
  auto r = Make(o);
  auto set = r->set_task_type("foobar");
  EXPECT_EQ(set.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(set.message(),
              HasSubstr("You cannot reset the task_type of the "
                        "GCEClusterResolver after it has been created."));
  EXPECT_EQ(*r->master("", 0), "grpc://10.1.2.3:2222");
  EXPECT_EQ(*r->master(), "grpc://10.10.3.4:2222");
  ASSERT_TRUE(r->set_rpc_layer("").ok());
  EXPECT_EQ(*r->master(), "10.10.3.4:2222");
  ASSERT_TRUE(r->set_task_id(std::nullopt).ok());
  EXPECT_EQ(*r->master(), "");
}

TEST_F(GceClusterResolverTest, EmptyGroupGivesEmptyJob) {
  compute_.SetInstanceGroup("empty", {{}});
  GceClusterResolver::Options o = Base();
  o.instance_group = "empty";
  auto spec = Make(o)->cluster_spec();
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->ToJson(), Json::parse(R"({"worker": {}})"));
}

TEST_F(GceClusterResolverTest, ErrorsNameTheEndpoint) {
  GceClusterResolver::Options o = Base();
  o.instance_group = "nope";
  auto spec = Make(o)->cluster_spec();
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(spec.status().message(), HasSubstr(compute_.api_url()));
  EXPECT_THAT(spec.status().message(), HasSubstr("HTTP 404"));
  EXPECT_THAT(spec.status().message(), HasSubstr("was not found"));
  EXPECT_THAT(spec.status().message(), HasSubstr("instance group \"nope\""));

  o = Base();
  o.access_token = "bad";
  spec = Make(o)->cluster_spec();
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kUnauthenticated);

  o = Base();
  o.metadata.base_url = "http://127.0.0.1:1";
  spec = Make(o)->cluster_spec();
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(spec.status().message(), HasSubstr("GCE metadata server"));
  EXPECT_THAT(spec.status().message(), HasSubstr("http://127.0.0.1:1"));

  o = Base();
  o.instance_group = "";
  EXPECT_EQ(GceClusterResolver::Create(&env_, o).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(GceClusterResolverTest, RegistryFactoryReadsVariables) {
  ResolverRegistry registry;
  RegisterGceResolver(&registry);
  EXPECT_FALSE(registry.Detect(&env_).ok());  // never auto-detected
  auto r = registry.Create("gce", &env_);
  EXPECT_THAT(r.status().message(), HasSubstr("COHORT_GCE_INSTANCE_GROUP"));
  env_.SetVar("COHORT_GCE_INSTANCE_GROUP", "g");
  env_.SetVar("COHORT_GCE_PORT", "x");
  r = registry.Create("gce", &env_);
  EXPECT_THAT(r.status().message(), HasSubstr("COHORT_GCE_PORT=\"x\""));
  env_.SetVar("COHORT_GCE_PORT", "2222");
  env_.SetVar("COHORT_GCE_INSTANCE_GROUP", "group");
  env_.SetVar("COHORT_GCE_PROJECT", "p");
  env_.SetVar("COHORT_GCE_ZONE", "z");
  env_.SetVar("COHORT_GCE_ACCESS_TOKEN", "md-token");
  env_.SetVar("COHORT_GCE_COMPUTE_API_URL", compute_.api_url());
  metadata_.FailAll("the token was given: must not be queried");
  r = registry.Create("gce", &env_);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)->name(), "gce");
  auto spec = (*r)->cluster_spec();
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->ToJson(), Json::parse(R"({"worker":
      ["10.1.2.3:2222", "10.10.3.4:2222", "10.3.4.5:2222"]})"));
  EXPECT_EQ(metadata_.request_count(), 0);
}

}  // namespace
}  // namespace cohort
