#include "cohort/cluster/cluster_spec.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

ClusterSpec Parse(const char* text) {
  auto spec = ClusterSpec::FromJson(Json::parse(text), "test");
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.ok() ? *spec : ClusterSpec();
}

TEST(ClusterSpecTest, DenseAndSparseJobsRoundTripThroughJson) {
  ClusterSpec spec = Parse(
      R"({"ps": ["ps0:1", "ps1:1"], "sparse": {"0": "s0:1", "3": "s3:1"},
          "empty": []})");
  EXPECT_EQ(spec.ToJson(), Json::parse(R"({"ps": ["ps0:1", "ps1:1"],
                            "sparse": {"0": "s0:1", "3": "s3:1"},
                            "empty": {}})"));
  // A sparse object whose keys are dense comes back as a list.
  EXPECT_EQ(Parse(R"({"w": {"1": "b:1", "0": "a:1"}})").ToJson(),
            Json::parse(R"({"w": ["a:1", "b:1"]})"));
}

TEST(ClusterSpecTest, AccessorsAndTheirErrors) {
  ClusterSpec spec =
      Parse(R"({"ps": ["p:1"], "sparse": {"0": "a:1", "3": "b:1"}})");
  EXPECT_EQ(*spec.num_tasks("sparse"), 2);
  EXPECT_THAT(*spec.task_indices("sparse"), ElementsAre(0, 3));
  EXPECT_EQ(*spec.task_address("sparse", 3), "b:1");
  auto padded = spec.job_tasks("sparse");
  ASSERT_TRUE(padded.ok());
  ASSERT_EQ(padded->size(), 4u);
  EXPECT_EQ((*padded)[0], "a:1");
  EXPECT_FALSE((*padded)[1].has_value());
  EXPECT_EQ((*padded)[3], "b:1");

  auto no_job = spec.num_tasks("unknown");
  EXPECT_EQ(no_job.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(no_job.status().message(),
              HasSubstr("No such job in cluster: 'unknown'"));
  auto no_task = spec.task_address("sparse", 2);
  EXPECT_THAT(no_task.status().message(),
              HasSubstr("No task with index 2 in job 'sparse'"));
}

TEST(ClusterSpecTest, EmptyJobListsNoTasks) {
  ClusterSpec spec = Parse(R"({"w": []})");
  EXPECT_FALSE(spec.empty());
  EXPECT_TRUE(spec.job_tasks("w")->empty());
  EXPECT_TRUE(ClusterSpec().empty());
}

TEST(ClusterSpecTest, EqualityIgnoresFormButNotOrder) {
  EXPECT_EQ(Parse(R"({"job": {"0": "h:1"}})"), Parse(R"({"job": ["h:1"]})"));
  EXPECT_NE(Parse(R"({"job": ["a:1", "b:1"]})"),
            Parse(R"({"job": ["b:1", "a:1"]})"));
  EXPECT_EQ(ClusterSpec(), Parse("{}"));
}

TEST(ClusterSpecTest, RejectsMalformedJobs) {
  for (const char* bad : {R"({"worker": "host:1"})", R"({"worker": [1]})",
                          R"({"worker": {"x": "a:1"}})", R"(["a"])"}) {
    auto spec = ClusterSpec::FromJson(Json::parse(bad), "TF_CONFIG cluster");
    EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(spec.status().message(), HasSubstr("TF_CONFIG cluster")) << bad;
  }
  auto spec =
      ClusterSpec::FromJson(Json::parse(R"({"worker": "host:1"})"), "c");
  EXPECT_THAT(
      spec.status().message(),
      HasSubstr("must be a list or a dictionary from integers to strings"));
}

TEST(ClusterSpecTest, ClusterDefIsSortedAndRoundTrips) {
  ClusterSpec spec =
      Parse(R"({"worker": {"2": "w2:1", "0": "w0:1"}, "ps": ["p:1"]})");
  ClusterDef def = spec.ToClusterDef();
  ASSERT_EQ(def.job_size(), 2);
  EXPECT_EQ(def.job(0).name(), "ps");
  EXPECT_EQ(def.job(1).name(), "worker");
  EXPECT_EQ(def.job(1).tasks().at(2), "w2:1");
  auto back = ClusterSpec::FromClusterDef(def);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, spec);

  ClusterDef dup;
  dup.add_job()->set_name("w");
  dup.add_job()->set_name("w");
  EXPECT_EQ(ClusterSpec::FromClusterDef(dup).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ClusterSpecTest, OrderedJsonKeepsTheJobOrder) {
  auto spec = ClusterSpec::FromJson(
      nlohmann::ordered_json::parse(
          R"({"worker": ["w:1"], "chief": ["c:1"], "ps": {"2": "p:1"}})"),
      "test");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_THAT(spec->jobs(), ElementsAre("worker", "chief", "ps"));
  EXPECT_EQ(
      *spec,
      Parse(R"({"ps": {"2": "p:1"}, "chief": ["c:1"], "worker": ["w:1"]})"));
  auto bad =
      ClusterSpec::FromJson(nlohmann::ordered_json::parse(R"({"w": 5})"), "X");
  EXPECT_THAT(bad.status().message(), HasSubstr("X: the tasks for job 'w'"));
}

TEST(ClusterSpecTest, JobsKeepInsertionOrderAndDebugStringSorts) {
  ClusterSpec spec;
  spec.SetJob("worker", std::vector<std::string>{"w0:1"});
  spec.SetJob("ps", ClusterSpec::TaskMap{{3, "p3:1"}});
  EXPECT_THAT(spec.jobs(), ElementsAre("worker", "ps"));
  EXPECT_EQ(spec.DebugString(),
            "ClusterSpec({'ps': {3: 'p3:1'}, 'worker': ['w0:1']})");
}

TEST(MakeServerDefTest, InfersJobAndIndexOnlyWhenUnique) {
  ClusterSpec one = Parse(R"({"worker": {"3": "a:1"}})");
  auto def = MakeServerDef(one, std::nullopt, std::nullopt);
  ASSERT_TRUE(def.ok()) << def.status();
  EXPECT_EQ(def->job_name(), "worker");
  EXPECT_EQ(def->task_index(), 3);
  EXPECT_EQ(def->protocol(), "grpc");

  ClusterSpec two = Parse(R"({"worker": ["a:1", "b:1"], "ps": ["p:1"]})");
  EXPECT_THAT(MakeServerDef(two, std::nullopt, 0).status().message(),
              HasSubstr("Must specify an explicit `job_name`."));
  EXPECT_THAT(MakeServerDef(two, "worker", std::nullopt).status().message(),
              HasSubstr("Must specify an explicit `task_index`."));
  auto explicit_def = MakeServerDef(two, "worker", 1, "grpc+verbs");
  ASSERT_TRUE(explicit_def.ok());
  EXPECT_EQ(explicit_def->protocol(), "grpc+verbs");
  EXPECT_EQ(explicit_def->cluster().job_size(), 2);
}

// TensorFlow's _make_server_def only infers: what the server refuses (an
// address without a port, port 0 among several tasks, a job or task the
// cluster lacks) still makes a ServerDef, so ServerDef.port can supply the
// port; runtime::Server::CheckServerDef refuses the rest (server_test.cc).
TEST(MakeServerDefTest, LeavesAddressesAndExplicitTasksToTheServer) {
  ClusterSpec spec =
      Parse(R"({"worker": ["hostonly", "h:", "h:99999", "localhost:0"]})");
  for (int i = 0; i < 4; ++i) {
    auto def = MakeServerDef(spec, "worker", i);
    ASSERT_TRUE(def.ok()) << def.status();
    EXPECT_EQ(def->task_index(), i);
  }
  auto absent = MakeServerDef(spec, "ps", 7);
  ASSERT_TRUE(absent.ok()) << absent.status();
  EXPECT_EQ(absent->job_name(), "ps");
  EXPECT_EQ(absent->task_index(), 7);
  // Inferring the index needs the job.
  EXPECT_THAT(MakeServerDef(spec, "ps", std::nullopt).status().message(),
              HasSubstr("No such job in cluster: 'ps'"));
}

}  // namespace
}  // namespace cohort
