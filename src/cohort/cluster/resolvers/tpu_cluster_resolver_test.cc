#include "cohort/cluster/resolvers/tpu_cluster_resolver.h"

#include "absl/time/civil_time.h"
#include "cohort/base/fake_env.h"
#include "cohort/cluster/resolver_registry.h"
#include "cohort/cluster/resolvers/testing/fake_metadata_server.h"
#include "cohort/cluster/resolvers/testing/fake_tpu_server.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr char kNode[] =
    "projects/test-project/locations/us-central1-c/nodes/test-tpu-1";

class TpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    metadata_.Set("project/project-id", "test-project");
    metadata_.Set("instance/zone",
                  "projects/test-project/locations/us-central1-c");
    metadata_.Set("instance/network-interfaces/0/ip", "10.128.1.2");
    ASSERT_TRUE(metadata_.Start().ok());
    ASSERT_TRUE(tpu_.Start().ok());
  }

  TpuClusterResolver::Options Base(std::optional<std::string> tpu) {
    TpuClusterResolver::Options o;
    o.client.tpu = std::move(tpu);
    o.client.tpu_api_url = tpu_.api_url();
    o.client.metadata.base_url = metadata_.base_url();
    return o;
  }

  std::unique_ptr<TpuClusterResolver> Make(TpuClusterResolver::Options o) {
    auto r = TpuClusterResolver::Create(&env_, std::move(o));
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? std::move(*r) : nullptr;
  }

  FakeEnv env_;
  testing::FakeMetadataServer metadata_{"tpu-token"};
  testing::FakeTpuServer tpu_{std::string("tpu-token")};
};

TEST(TpuEndpointsTest, ParsesGrpcLists) {
  auto eps = EnvironmentVarToNetworkEndpoints("1.2.3.4:2000,grpc://5.6.7.8");
  ASSERT_EQ(eps.size(), 2u);
  EXPECT_EQ(eps[0].ip_address, "1.2.3.4");
  EXPECT_EQ(eps[0].port, "2000");
  EXPECT_EQ(eps[1].ip_address, "5.6.7.8");
  EXPECT_EQ(eps[1].port, "8470");
  EXPECT_EQ(eps[1].raw, (Json{{"ipAddress", "5.6.7.8"}, {"port", "8470"}}));
}

TEST_F(TpuTest, PodResolutionFromApiWithProjectAndZoneFromMetadata) {
  tpu_.SetNode(kNode, Json::parse(R"({"state": "READY", "health": "HEALTHY",
      "networkEndpoints": [{"ipAddress": "10.2.3.4", "port": 8470},
                           {"ipAddress": "10.2.3.5", "port": 8470}]})"));
  auto r = Make(Base("test-tpu-1"));
  EXPECT_TRUE(r->client()->api_available());
  EXPECT_EQ(r->client()->project(), "test-project");
  EXPECT_EQ(r->client()->zone(), "us-central1-c");
  auto spec = r->cluster_spec();
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->ToJson(),
            Json::parse(R"({"worker": ["10.2.3.4:8470", "10.2.3.5:8470"]})"));
  EXPECT_EQ(*r->master(), "grpc://10.2.3.4:8470");
  EXPECT_EQ(*r->master("worker", 1, "http"), "grpc://10.2.3.5:8470");
  ASSERT_TRUE(r->set_task_id(1).ok());
  EXPECT_EQ(*r->master(), "grpc://10.2.3.5:8470");
  EXPECT_THAT(tpu_.requests()[0], HasSubstr(std::string("GET /v1/") + kNode));
}

TEST_F(TpuTest, LegacyIpAndPortAndCoordinatorAddress) {
  tpu_.SetNode(
      kNode,
      Json::parse(
          R"({"ipAddress": "10.1.2.3", "port": "8470", "state": "READY"})"));
  auto o = Base("test-tpu-1");
  o.client.project = "test-project";
  o.client.zone = "us-central1-c";
  o.coordinator_name = "coordinator";
  o.coordinator_address = "10.128.1.5:10203";
  auto r = Make(o);
  EXPECT_EQ(r->cluster_spec()->ToJson(),
            Json::parse(R"({"worker": ["10.1.2.3:8470"],
      "coordinator": ["10.128.1.5:10203"]})"));
  // Project and zone were given: the metadata server only supplied a token.
  EXPECT_THAT(
      metadata_.requests(),
      ElementsAre(
          "GET /computeMetadata/v1/instance/service-accounts/default/token"));
  auto eps = r->client()->NetworkEndpoints();
  ASSERT_TRUE(eps.ok());
  EXPECT_EQ((*eps)[0].raw, (Json{{"ipAddress", "10.1.2.3"}, {"port", "8470"}}));
}

TEST_F(TpuTest, CoordinatorServerThroughHookOrUnimplemented) {
  tpu_.SetNode(
      kNode,
      Json::parse(
          R"({"ipAddress": "10.1.2.3", "port": "8470", "state": "READY"})"));
  auto o = Base("test-tpu-1");
  o.coordinator_name = "coordinator";
  auto r = TpuClusterResolver::Create(&env_, o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(r.status().message(), HasSubstr("coordinator_address"));
  o.start_local_server = [] { return absl::StatusOr<int>(40123); };
  auto ok = Make(o);
  EXPECT_EQ(ok->cluster_spec()->ToJson(),
            Json::parse(R"({"worker": ["10.1.2.3:8470"],
      "coordinator": ["10.128.1.2:40123"]})"));
}

TEST_F(TpuTest, NodeNotReadyAndLookupFailure) {
  tpu_.SetNode(
      kNode,
      Json::parse(
          R"({"state": "CREATING", "ipAddress": "1.1.1.1", "port": "1"})"));
  auto r = Make(Base("test-tpu-1"));
  auto spec = r->cluster_spec();
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(
      spec.status().message(),
      HasSubstr("TPU \"test-tpu-1\" is not yet ready; state: \"CREATING\""));
  tpu_.SetNode(kNode, Json::parse(R"({"ipAddress": "1.1.1.1", "port": "1"})"));
  EXPECT_THAT(r->cluster_spec().status().message(),
              HasSubstr("state: \"None\""));

  auto missing = Make(Base("nonexistent-tpu"));
  spec = missing->cluster_spec();
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(
      spec.status().message(),
      HasSubstr("Could not lookup TPU metadata from name 'nonexistent-tpu'"));
  EXPECT_THAT(spec.status().message(), HasSubstr("HTTP 404"));
  EXPECT_THAT(spec.status().message(), HasSubstr(tpu_.api_url()));
}

TEST_F(TpuTest, GrpcNamesBypassTheApi) {
  metadata_.FailAll("must not be queried");
  auto r = Make(Base("grpc://10.1.2.3:8470"));
  EXPECT_FALSE(r->client()->api_available());
  EXPECT_EQ(*r->master(), "grpc://10.1.2.3:8470");
  EXPECT_EQ(r->cluster_spec()->ToJson(),
            Json::parse(R"({"worker": ["10.1.2.3:8470"]})"));
  EXPECT_TRUE(*r->client()->Recoverable());
  EXPECT_EQ(metadata_.request_count(), 0);
  EXPECT_EQ(tpu_.request_count(), 0);
}

TEST_F(TpuTest, NameFallbacks) {
  TpuClusterResolver::Options o = Base(std::nullopt);
  auto none = TpuClusterResolver::Create(&env_, o);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(none.status().message(),
              HasSubstr("Please provide a TPU Name to connect to."));

  env_.SetVar("TPU_CONFIG",
              R"({"tpu_node_name": "cfg-tpu", "project": "p", "zone": "z"})");
  auto cfg = Make(o);
  EXPECT_EQ(cfg->client()->name(), "cfg-tpu");
  EXPECT_EQ(cfg->client()->project(), "p");
  EXPECT_EQ(cfg->client()->zone(), "z");

  env_.SetVar("TPU_NAME", "named");
  EXPECT_EQ(Make(o)->client()->name(), "named");

  env_.SetVar("KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS",
              "grpc://10.120.27.5:8470,grpc://10.120.27.6:8470");
  auto gke = Make(o);
  EXPECT_EQ(
      gke->cluster_spec()->ToJson(),
      Json::parse(R"({"worker": ["10.120.27.5:8470", "10.120.27.6:8470"]})"));

  o.client.tpu_list = std::vector<std::string>{};
  EXPECT_THAT(TpuClusterResolver::Create(&env_, o).status().message(),
              HasSubstr("At least one TPU must be specified."));
  o.client.tpu_list = std::vector<std::string>{"a", "b"};
  EXPECT_EQ(TpuClusterResolver::Create(&env_, o).status().code(),
            absl::StatusCode::kUnimplemented);
}

TEST_F(TpuTest, LocalTpu) {
  auto r = Make(Base("local"));
  EXPECT_TRUE(r->is_local());
  EXPECT_EQ(*r->master(), "");
  EXPECT_TRUE(r->cluster_spec()->empty());
}

class ScriptedLister : public DeviceLister {
 public:
  absl::StatusOr<std::vector<DeviceInfo>> ListDevices(
      absl::string_view master) override {
    ++calls;
    last_master = std::string(master);
    if (failures_left > 0) {
      --failures_left;
      return absl::DeadlineExceededError("session creation timed out");
    }
    return devices;
  }
  int calls = 0;
  int failures_left = 0;
  std::string last_master;
  std::vector<DeviceInfo> devices;
};

TEST(TpuDevicesTest, DeviceDictAndCoreCount) {
  TpuDeviceDetails d = GetTpuDeviceDictAndCores(
      {{"/job:tpu_worker/task:0/device:TPU:0", "TPU"},
       {"/job:tpu_worker/task:1/device:TPU:1", "TPU"},
       {"/job:tpu_worker/task:0/device:TPU:4", "TPU"},
       {"/job:tpu_worker/task:1/device:TPU:5", "TPU"},
       {"/job:tpu_worker/task:0/device:CPU:0", "CPU"}});
  EXPECT_EQ(d.total_cores, 4);
  EXPECT_THAT(d.device_map["0"], ElementsAre("0", "4"));
  EXPECT_THAT(d.device_map["1"], ElementsAre("1", "5"));
  EXPECT_EQ(*VerifyAndReturnSameCoreCount(d.device_map), 2);
  auto uneven = VerifyAndReturnSameCoreCount({{"0", {"0"}}, {"1", {"1", "2"}}});
  EXPECT_EQ(uneven.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(uneven.status().message(),
              HasSubstr("TPU cores on each device is not the same"));
}

TEST_F(TpuTest, NumAcceleratorsRetriesDeadlineExceeded) {
  ScriptedLister lister;
  lister.devices = {{"/job:worker/replica:0/task:0/device:TPU:0", "TPU"},
                    {"/job:worker/replica:0/task:0/device:TPU:1", "TPU"}};
  lister.failures_left = 3;
  auto r = Make(Base("grpc://10.1.2.3:8470"));
  r->set_device_lister(&lister);
  EXPECT_EQ(*r->num_accelerators(), (AcceleratorCounts{{"TPU", 2}}));
  EXPECT_EQ(lister.calls, 4);
  EXPECT_EQ(lister.last_master, "grpc://10.1.2.3:8470");

  lister.calls = 0;
  lister.failures_left = 1000;
  auto failed = r->num_accelerators();
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(failed.status().message(),
              HasSubstr("Failed to connect to master"));
  EXPECT_EQ(lister.calls, TpuClusterResolver::kTpuConnectRetries + 1);

  lister.failures_left = 0;
  lister.devices = {{"/job:worker/replica:0/task:0/device:CPU:0", "CPU"}};
  EXPECT_EQ(*r->num_accelerators(), (AcceleratorCounts{{"TPU", 0}}));
}

// As TensorFlow, num_accelerators resolves the master first: a TPU that is
// not READY is that error (testNumAcceleratorsRetryFailure passes on it),
// with or without a device listing, and nothing is listed.
TEST_F(TpuTest, NumAcceleratorsOfATpuNotReadyIsItsStateError) {
  tpu_.SetNode(kNode, Json::parse(R"({"ipAddress": "10.1.2.3",
                                      "port": "8470"})"));
  auto r = Make(Base("test-tpu-1"));
  auto unlisted = r->num_accelerators();
  EXPECT_EQ(unlisted.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(unlisted.status().message(),
              HasSubstr("is not yet ready; state: \"None\""));
  ScriptedLister lister;
  lister.failures_left = 1000;
  r->set_device_lister(&lister);
  auto listed = r->num_accelerators();
  EXPECT_THAT(listed.status().message(), HasSubstr("is not yet ready"));
  EXPECT_EQ(lister.calls, 0);
}

TEST_F(TpuTest, Recoverable) {
  env_.SetTime(absl::FromCivil(absl::CivilSecond(2024, 5, 1, 12, 0, 0),
                               absl::UTCTimeZone()));
  auto r = Make(Base("test-tpu-1"));
  tpu_.SetNode(kNode, Json::parse(R"({"ipAddress": "1.1.1.1", "port": "1"})"));
  EXPECT_TRUE(*r->client()->Recoverable());  // no state at all
  tpu_.SetNode(kNode, Json::parse(R"({"state": "PREEMPTED"})"));
  EXPECT_FALSE(*r->client()->Recoverable());
  tpu_.SetNode(kNode, Json::parse(R"({"state": "READY", "symptoms": [
      {"symptomType": "OUT_OF_MEMORY", "createTime": "2024-05-01T11:59:00.123Z"}]})"));
  EXPECT_FALSE(*r->client()->Recoverable());
  env_.AdvanceTime(absl::Seconds(60));  // now 91 s after the symptom
  EXPECT_TRUE(*r->client()->Recoverable());
  tpu_.SetNode(kNode, Json::parse(R"({"state": "READY", "symptoms": [
      {"symptomType": "HBM_OUT_OF_MEMORY", "createTime": "2024-05-01T12:00:30Z"}]})"));
  EXPECT_FALSE(*r->client()->Recoverable());
  EXPECT_EQ(*r->client()->state(), "READY");
}

TEST(TpuResolverRegistryTest, RegisteredNotDetected) {
  ResolverRegistry registry;
  RegisterTpuResolver(&registry);
  FakeEnv env;
  EXPECT_FALSE(registry.Detect(&env).ok());
  env.SetVar("TPU_NAME", "grpc://10.0.0.1:8470");
  auto r = registry.Create("tpu", &env);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*(*r)->master(), "grpc://10.0.0.1:8470");
}

}  // namespace
}  // namespace cohort
