#include "cohort/cluster/cluster_resolver.h"

#include "gtest/gtest.h"

namespace cohort {
namespace {

TEST(FormatMasterUrlTest, PrefixesOnlyANonEmptyLayer) {
  EXPECT_EQ(FormatMasterUrl("h:1", std::string("grpc")), "grpc://h:1");
  EXPECT_EQ(FormatMasterUrl("h:1", std::string()), "h:1");
  EXPECT_EQ(FormatMasterUrl("h:1", std::nullopt), "h:1");
  EXPECT_EQ(FormatMasterUrl("", std::string("grpc")), "grpc://");
}

std::vector<DeviceInfo> Devices() {
  return {{"/job:worker/task:0/device:GPU:0", "GPU"},
          {"/job:worker/task:0/device:CPU:0", "CPU"},
          {"/job:worker/task:0/device:XLA_CPU:0", "XLA_CPU"},
          {"/job:worker/task:1/device:TPU:0", "TPU"},
          {"/job:worker1/task:10/device:GPU:0", "GPU"}};
}

TEST(CountAcceleratorsTest, CountsByTypeWithoutCpus) {
  AcceleratorCounts counts =
      CountAccelerators(Devices(), std::nullopt, std::nullopt);
  EXPECT_EQ(counts, (AcceleratorCounts{{"GPU", 2}, {"TPU", 1}}));
}

TEST(CountAcceleratorsTest, FiltersBySubstringOnlyWhenBothGiven) {
  // "/job:worker" + "/task:1" also matches worker1/task:10 (TensorFlow's
  // substring rule).
  EXPECT_EQ(CountAccelerators(Devices(), std::string("worker"), 1),
            (AcceleratorCounts{{"GPU", 1}, {"TPU", 1}}));
  EXPECT_EQ(CountAccelerators(Devices(), std::string("worker"), std::nullopt),
            (AcceleratorCounts{{"GPU", 2}, {"TPU", 1}}));
  EXPECT_TRUE(CountAccelerators(Devices(), std::string("ps"), 0).empty());
}

class FixedLister : public DeviceLister {
 public:
  absl::StatusOr<std::vector<DeviceInfo>> ListDevices(
      absl::string_view master) override {
    seen_master = std::string(master);
    if (fail) return absl::UnavailableError("no route");
    return Devices();
  }
  std::string seen_master = "unset";
  bool fail = false;
};

class MasterOnlyResolver : public ClusterResolver {
 public:
  std::string name() const override { return "test"; }
  absl::StatusOr<ClusterSpec> cluster_spec() override { return ClusterSpec(); }
  absl::StatusOr<std::string> master(std::optional<std::string>,
                                     std::optional<int64_t>,
                                     std::optional<std::string>) override {
    return std::string("grpc://m:1");
  }
  std::optional<std::string> task_type() override { return std::nullopt; }
  std::optional<int64_t> task_id() override { return std::nullopt; }
  std::optional<std::string> rpc_layer() override { return std::nullopt; }
  absl::Status set_task_type(std::optional<std::string>) override {
    return absl::OkStatus();
  }
  absl::Status set_task_id(std::optional<int64_t>) override {
    return absl::OkStatus();
  }
  absl::Status set_rpc_layer(std::optional<std::string>) override {
    return absl::OkStatus();
  }
};

TEST(ClusterResolverTest, DefaultNumAcceleratorsListsThroughMaster) {
  MasterOnlyResolver resolver;
  EXPECT_TRUE(resolver.num_accelerators()->empty());  // no lister
  FixedLister lister;
  resolver.set_device_lister(&lister);
  EXPECT_EQ(*resolver.num_accelerators(std::string("worker"), 0),
            (AcceleratorCounts{{"GPU", 1}}));
  EXPECT_EQ(lister.seen_master, "grpc://m:1");
  EXPECT_EQ(resolver.environment(), std::string());
  lister.fail = true;
  auto failed = resolver.num_accelerators();
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(failed.status().message().find("grpc://m:1"), std::string::npos);
}

// A resolver with stored attributes whose cluster_spec() resets them, as
// Slurm's does: master() must take its defaults before calling it.
class AttributeResolver : public ClusterResolverWithTaskAttributes {
 public:
  AttributeResolver()
      : ClusterResolverWithTaskAttributes(std::string("worker"), 1,
                                          std::string("grpc")) {}
  std::string name() const override { return "attributes"; }
  absl::StatusOr<ClusterSpec> cluster_spec() override {
    ++spec_calls;
    task_type_ = std::string("ps");
    task_id_ = 0;
    ClusterSpec spec;
    spec.SetJob("worker", std::vector<std::string>{"w0:1", "w1:1"});
    spec.SetJob("ps", std::vector<std::string>{"p0:1"});
    return spec;
  }
  int spec_calls = 0;
};

TEST(ClusterResolverWithTaskAttributesTest, MasterDefaultsFromAttributes) {
  AttributeResolver r;
  EXPECT_EQ(*r.master(), "grpc://w1:1");  // defaults read before the reset
  EXPECT_EQ(r.task_type(), std::string("ps"));
  EXPECT_EQ(*r.master(std::string("worker"), 0, std::string("")),
            "grpc://w0:1");  // empty layer: the attribute's
  EXPECT_EQ(*r.master(std::string("worker"), 0, std::string("http")),
            "http://w0:1");
  EXPECT_TRUE(r.set_rpc_layer(std::nullopt).ok());
  EXPECT_EQ(*r.master(std::string("worker"), 1), "w1:1");
  EXPECT_EQ(r.master(std::string("chief"), 0).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ClusterResolverWithTaskAttributesTest, EmptyWithoutTaskAndSetters) {
  AttributeResolver r;
  EXPECT_TRUE(r.set_task_type(std::nullopt).ok());
  EXPECT_EQ(*r.master(), "");
  EXPECT_EQ(*r.master(std::nullopt, 0), "");
  EXPECT_EQ(r.spec_calls, 0);  // "" without looking the cluster up
  EXPECT_TRUE(r.set_task_id(std::nullopt).ok());
  EXPECT_EQ(r.task_id(), std::nullopt);
  EXPECT_TRUE(r.set_rpc_layer(std::string("grpc+verbs")).ok());
  EXPECT_EQ(r.rpc_layer(), std::string("grpc+verbs"));
  EXPECT_EQ(*r.master(std::string("ps"), 0), "grpc+verbs://p0:1");
}

TEST(ClusterResolverTest, RpcLayerOrFallsBackOnUnsetOrEmpty) {
  const std::optional<std::string> fallback = std::string("grpc");
  EXPECT_EQ(RpcLayerOr(std::nullopt, fallback), fallback);
  EXPECT_EQ(RpcLayerOr(std::string(""), fallback), fallback);
  EXPECT_EQ(RpcLayerOr(std::string("http"), fallback), std::string("http"));
  EXPECT_EQ(RpcLayerOr(std::string(""), std::nullopt), std::nullopt);
}

}  // namespace
}  // namespace cohort
