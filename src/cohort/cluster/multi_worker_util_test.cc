#include "cohort/cluster/multi_worker_util.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort::multi_worker_util {
namespace {

using ::testing::HasSubstr;

ClusterSpec Spec(const char* text) {
  auto spec = NormalizeClusterSpec(Json::parse(text));
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.ok() ? *spec : ClusterSpec();
}

const char* kFull =
    R"({"chief": ["c:1"], "worker": ["w0:1", "w1:1"], "ps": ["p0:1", "p1:1"]})";

std::string Message(const absl::Status& s) { return std::string(s.message()); }

TEST(NormalizeTest, AcceptsObjectClusterDefAndSpec) {
  ClusterSpec spec = Spec(kFull);
  auto from_def = NormalizeClusterSpec(spec.ToClusterDef());
  ASSERT_TRUE(from_def.ok());
  EXPECT_EQ(*from_def, spec);
  EXPECT_EQ(NormalizeClusterSpec(spec), spec);
  auto bad = NormalizeClusterSpec(Json::parse(R"(["a:1"])"));
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(
      Message(bad.status()),
      HasSubstr("`cluster_spec' should be dict or a `tf.train.ClusterSpec`"));
}

TEST(ValidateTest, RulesApplyInOrder) {
  // Rule 1 wins over rule 2: both the job and the type are bad.
  EXPECT_THAT(Message(ValidateClusterSpec(Spec(R"({"master": ["a:1"]})"),
                                          std::string("foo"), 0)),
              HasSubstr("Disallowed task type found in cluster spec"));
  ClusterSpec workers = Spec(R"({"worker": ["b:1"]})");
  EXPECT_THAT(Message(ValidateClusterSpec(workers, std::string("foo"), 0)),
              HasSubstr("Unrecognized task_type"));
  EXPECT_THAT(Message(ValidateClusterSpec(workers, std::string("chief"), 0)),
              HasSubstr("`task_type` 'chief' not found in cluster_spec."));
  // An evaluator outside the cluster is valid, whatever its id.
  EXPECT_TRUE(ValidateClusterSpec(workers, std::string("evaluator"), 5).ok());
  EXPECT_TRUE(ValidateClusterSpec(workers, std::nullopt, std::nullopt).ok());
  // Rule 4 before rule 5.
  ClusterSpec two_evals =
      Spec(R"({"worker": ["a:1"], "evaluator": ["e:1", "f:1"]})");
  EXPECT_THAT(Message(ValidateClusterSpec(two_evals, std::string("worker"), 9)),
              HasSubstr("There must be at most one 'evaluator' job."));
  EXPECT_THAT(Message(ValidateClusterSpec(workers, std::string("worker"), 1)),
              HasSubstr("The `task_id` 1 exceeds the maximum id of worker."));
  EXPECT_THAT(Message(ValidateClusterSpec(workers, std::string("worker"), -1)),
              HasSubstr("negative"));
  // The padded size of a sparse job bounds the id.
  ClusterSpec sparse = Spec(R"({"worker": {"3": "w3:1"}})");
  EXPECT_TRUE(ValidateClusterSpec(sparse, std::string("worker"), 3).ok());
  EXPECT_FALSE(ValidateClusterSpec(sparse, std::string("worker"), 4).ok());
}

TEST(IsChiefTest, ChiefEvaluatorAndWorkerZeroWithoutChief) {
  ClusterSpec full = Spec(kFull);
  EXPECT_TRUE(*IsChief(full, std::string("chief"), 0));
  EXPECT_FALSE(*IsChief(full, std::string("worker"), 0));
  ClusterSpec workers =
      Spec(R"({"worker": ["a:1", "b:1"], "evaluator": ["e:1"]})");
  EXPECT_TRUE(*IsChief(workers, std::string("worker"), 0));
  EXPECT_FALSE(*IsChief(workers, std::string("worker"), 1));
  EXPECT_TRUE(*IsChief(workers, std::string("evaluator"), 0));
  EXPECT_FALSE(IsChief(workers, std::string("worker"), 2).ok());
}

TEST(WorkerCountTest, CountsChiefAndWorkersOrEvaluators) {
  ClusterSpec spec = Spec(R"({"chief": ["c:1"], "worker": ["a:1", "b:1"],
                              "evaluator": ["e:1"], "ps": ["p:1"]})");
  EXPECT_EQ(*WorkerCount(spec, std::string("worker")), 3);
  EXPECT_EQ(*WorkerCount(spec, std::string("chief")), 3);
  EXPECT_EQ(*WorkerCount(spec, std::string("evaluator")), 1);
  EXPECT_EQ(
      *WorkerCount(Spec(R"({"worker": ["a:1"]})"), std::string("evaluator")),
      0);
  EXPECT_THAT(Message(WorkerCount(spec, std::string("ps")).status()),
              HasSubstr("Unexpected `task_type` 'ps'"));
}

TEST(IdInClusterTest, ChiefFirstThenWorkers) {
  ClusterSpec spec = Spec(R"({"chief": ["c:1"], "worker": ["a:1", "b:1"],
                              "evaluator": ["e:1"], "ps": ["p:1"]})");
  EXPECT_EQ(*IdInCluster(spec, std::string("chief"), 0), 0);
  EXPECT_EQ(*IdInCluster(spec, std::string("worker"), 1), 2);
  EXPECT_EQ(*IdInCluster(spec, std::string("evaluator"), 0), 0);
  EXPECT_THAT(Message(IdInCluster(spec, std::string("ps"), 0).status()),
              HasSubstr("There is no id for task_type 'ps'"));
  EXPECT_THAT(Message(IdInCluster(Spec(R"({"chief": ["a:1", "b:1"]})"),
                                  std::string("chief"), 0)
                          .status()),
              HasSubstr("There must be at most one 'chief' job."));
}

TEST(LeaderTest, CollectiveAndCoordinationLeaders) {
  EXPECT_EQ(*CollectiveLeader(ClusterSpec(), std::nullopt, 0), "");
  EXPECT_EQ(*CollectiveLeader(Spec(kFull), std::string("worker"), 0),
            "/job:chief/replica:0/task:0");
  EXPECT_EQ(*CollectiveLeader(Spec(R"({"worker": ["a:1"]})"),
                              std::string("worker"), 0),
            "/job:worker/replica:0/task:0");
  EXPECT_EQ(
      *CollectiveLeader(Spec(R"({"worker": ["a:1"], "evaluator": ["e:1"]})"),
                        std::string("evaluator"), 0),
      "");
  EXPECT_EQ(CollectiveLeader(Spec(R"({"ps": ["p:1"]})"), std::string("ps"), 0)
                .status()
                .code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(CoordinationLeader(Spec(kFull)), "/job:ps/replica:0/task:0");
  EXPECT_EQ(
      CoordinationLeader(Spec(R"({"chief": ["c:1"], "worker": ["w:1"]})")),
      "/job:chief/replica:0/task:0");
  EXPECT_EQ(CoordinationLeader(Spec(R"({"worker": ["w:1", "w:2"]})")),
            "/job:worker/replica:0/task:0");
  EXPECT_EQ(CoordinationLeader(ClusterSpec()), "");
}

}  // namespace
}  // namespace cohort::multi_worker_util
