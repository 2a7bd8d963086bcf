#include "cohort/cluster/resolvers/union_cluster_resolver.h"

#include "cohort/cluster/resolvers/simple_cluster_resolver.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort {
namespace {

using ::testing::HasSubstr;

std::unique_ptr<ClusterResolver> Simple(const char* json,
                                        SimpleClusterResolver::Options o = {}) {
  auto spec = ClusterSpec::FromJson(Json::parse(json), "test");
  EXPECT_TRUE(spec.ok()) << spec.status();
  return std::make_unique<SimpleClusterResolver>(*spec, std::move(o));
}

std::unique_ptr<UnionClusterResolver> Union(
    std::vector<std::unique_ptr<ClusterResolver>> rs,
    UnionClusterResolver::Overrides o = {}) {
  auto u = UnionClusterResolver::Create(std::move(rs), std::move(o));
  EXPECT_TRUE(u.ok()) << u.status();
  return u.ok() ? *std::move(u) : nullptr;
}

template <typename... T>
std::vector<std::unique_ptr<ClusterResolver>> List(T... rs) {
  std::vector<std::unique_ptr<ClusterResolver>> out;
  (out.push_back(std::move(rs)), ...);
  return out;
}

TEST(UnionClusterResolverTest, DenseListsConcatenateInResolverOrder) {
  auto u = Union(List(Simple(R"({"worker": ["w4:1", "w5:1"], "ps": ["p0:1"]})"),
                      Simple(R"({"worker": ["w0:1"]})")));
  EXPECT_EQ(
      u->cluster_spec()->ToJson(),
      Json::parse(R"({"worker": ["w4:1", "w5:1", "w0:1"], "ps": ["p0:1"]})"));
  // A dict with dense keys counts as a list.
  auto dense_dict = Union(List(Simple(R"({"w": {"0": "a:1", "1": "b:1"}})"),
                               Simple(R"({"w": ["c:1"]})")));
  EXPECT_EQ(dense_dict->cluster_spec()->ToJson(),
            Json::parse(R"({"w": ["a:1", "b:1", "c:1"]})"));
}

TEST(UnionClusterResolverTest, SparseJobsMergeByIndexAndDetectDuplicates) {
  auto ok = Union(List(Simple(R"({"w": ["a:1", "b:1"]})"),
                       Simple(R"({"w": {"3": "c:1", "6": "d:1"}})")));
  EXPECT_EQ(ok->cluster_spec()->ToJson(),
            Json::parse(
                R"({"w": {"0": "a:1", "1": "b:1", "3": "c:1", "6": "d:1"}})"));
  auto clash = Union(List(Simple(R"({"w": ["a:1", "b:1"]})"),
                          Simple(R"({"w": {"1": "c:1"}})")));
  auto spec = clash->cluster_spec();
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(
      spec.status().message(),
      HasSubstr("Duplicate keys detected when merging two ClusterSpecs: {1}"));
  auto single = Union(List(Simple(R"({"w": {"1": "a:1", "3": "b:1"}})")));
  EXPECT_EQ(single->cluster_spec()->ToJson(),
            Json::parse(R"({"w": {"1": "a:1", "3": "b:1"}})"));
}

TEST(UnionClusterResolverTest, CreateRejectsEmptyAndNull) {
  auto empty = UnionClusterResolver::Create({});
  EXPECT_THAT(empty.status().message(),
              HasSubstr("At least one ClusterResolver is required."));
  std::vector<std::unique_ptr<ClusterResolver>> with_null;
  with_null.push_back(nullptr);
  auto null = UnionClusterResolver::Create(std::move(with_null));
  EXPECT_EQ(null.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(null.status().message(),
              HasSubstr("All arguments must be a sub-class of"));
}

TEST(UnionClusterResolverTest, PropertiesComeFromOverridesThenFirstResolver) {
  SimpleClusterResolver::Options first;
  first.task_type = "ps";
  first.task_id = 1;
  first.environment = "cloud";
  first.num_accelerators = {{"GPU", 8}};
  first.rpc_layer = "grpc";
  SimpleClusterResolver::Options second = first;
  second.environment = "local";
  second.rpc_layer = "http";
  auto u = Union(List(Simple(R"({"ps": ["p:1"]})", first),
                      Simple(R"({"worker": ["w:1", "w1:1"]})", second)));
  EXPECT_EQ(u->task_type(), "ps");
  EXPECT_EQ(u->task_id(), 1);
  EXPECT_EQ(u->environment(), "cloud");
  EXPECT_EQ(*u->num_accelerators(), (AcceleratorCounts{{"GPU", 8}}));
  EXPECT_EQ(u->rpc_layer(), "grpc");
  ASSERT_TRUE(u->set_task_type(std::string("worker")).ok());
  ASSERT_TRUE(u->set_rpc_layer(std::string("http")).ok());
  EXPECT_EQ(u->task_type(), "worker");
  EXPECT_EQ(u->rpc_layer(), "http");
}

// Deliberate deviation from TensorFlow: its Union tests the override's
// truthiness, so task_id=0 fell back to the first resolver's id. An explicit
// 0 is a real task id and is honoured here.
TEST(UnionClusterResolverTest, TaskIdOverrideOfZeroIsHonoured) {
  SimpleClusterResolver::Options first;
  first.task_type = "worker";
  first.task_id = 1;
  UnionClusterResolver::Overrides overrides;
  overrides.task_id = 0;
  overrides.task_type = "";
  auto u =
      Union(List(Simple(R"({"worker": ["a:1", "b:1"]})", first)), overrides);
  EXPECT_EQ(u->task_id(), 0);
  EXPECT_EQ(u->task_type(), "");
  auto later = Union(List(Simple(R"({"worker": ["a:1", "b:1"]})", first)));
  EXPECT_EQ(later->task_id(), 1);
  ASSERT_TRUE(later->set_task_id(0).ok());
  EXPECT_EQ(later->task_id(), 0);
}

TEST(UnionClusterResolverTest, MasterUsesMergedSpecOrFirstResolver) {
  SimpleClusterResolver::Options first;
  first.master = "m:1";
  first.rpc_layer = "grpc";
  auto u = Union(List(Simple(R"({"ps": ["p:1"]})", first),
                      Simple(R"({"worker": ["w0:1", "w1:1"]})")));
  EXPECT_EQ(*u->master(), "grpc://m:1");
  EXPECT_EQ(*u->master(std::nullopt, std::nullopt, std::string("http")),
            "http://m:1");
  // A named task gets the union's own rpc layer, not the first resolver's.
  EXPECT_EQ(*u->master(std::string("worker"), 1), "w1:1");
  EXPECT_EQ(*u->master(std::string("worker"), 1, std::string("grpc")),
            "grpc://w1:1");
  ASSERT_TRUE(u->set_rpc_layer(std::string("ab")).ok());
  EXPECT_EQ(*u->master(std::string("worker"), 0), "ab://w0:1");
}

}  // namespace
}  // namespace cohort
