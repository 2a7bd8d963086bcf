// Runs `cohort resolve` as a child process with a prepared environment and
// checks its output, exit code and error messages.
#include <stdlib.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "cohort/base/json.h"
#include "cohort/base/subprocess.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort {
namespace {

using ::testing::HasSubstr;

struct Result {
  int exit_code = -1;
  std::string out;
  std::string err;
};

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Runs `cohort <args>` (space-separated words) with exactly the variables
// in `env` from the cluster environments the resolvers detect (everything
// else of ours is cleared), stdout and stderr apart: a shell sends stderr
// to a file, as stdout alone must parse as JSON.
Result RunCohort(const std::string& args,
                 const std::vector<std::pair<std::string, std::string>>& env) {
  std::vector<std::string> overrides;
  for (const char* var :
       {"TF_CONFIG", "SM_HOSTS", "SM_CURRENT_HOST", "SLURM_PROCID",
        "SLURM_STEP_NUM_TASKS", "SLURM_STEP_NODELIST",
        "SLURM_STEP_TASKS_PER_NODE", "KUBERNETES_SERVICE_HOST",
        "KUBERNETES_SERVICE_PORT"}) {
    overrides.push_back(var);
  }
  for (const auto& [name, value] : env) {
    overrides.push_back(absl::StrCat(name, "=", value));
  }
  char err_path[] = "/tmp/cohort_resolve_cli_XXXXXX";
  int fd = mkstemp(err_path);
  close(fd);
  std::vector<std::string> argv = {
      "/bin/sh", "-c", absl::StrCat("exec \"$0\" \"$@\" 2>", err_path),
      COHORT_BINARY};
  for (absl::string_view arg : absl::StrSplit(args, ' ', absl::SkipEmpty())) {
    argv.emplace_back(arg);
  }
  RunProgramOptions options;
  options.env_overrides = overrides;
  options.deadline = absl::Seconds(30);
  ProgramRun run = RunProgram(argv, options);
  Result result;
  result.exit_code = run.exit.has_value() ? run.exit->ShellCode() : -1;
  result.out = std::move(run.output);
  result.err = ReadAll(err_path);
  if (!run.exit.has_value()) {
    result.err = absl::StrCat(run.status.message(), "\n", result.err);
  }
  unlink(err_path);
  return result;
}

constexpr char kTfConfig[] =
    R"({"cluster": {"chief": ["localhost:2222"], "worker": ["localhost:2223", "localhost:2224"]},
        "task": {"type": "worker", "index": 1}, "rpc_layer": "grpc"})";

TEST(ResolveCliTest, JsonOutputFromTfConfig) {
  Result r = RunCohort("resolve --resolver tf_config --format json",
                       {{"TF_CONFIG", kTfConfig}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto json = ParseJson(r.out, "cohort resolve output");
  ASSERT_TRUE(json.ok()) << r.out;
  EXPECT_EQ(*json, Json::parse(R"({
      "cluster": {"chief": ["localhost:2222"], "worker": ["localhost:2223", "localhost:2224"]},
      "task_type": "worker", "task_id": 1, "master": "grpc://localhost:2224",
      "rpc_layer": "grpc", "num_accelerators": {}, "resolver": "tf_config"})"));
}

TEST(ResolveCliTest, AutoDetectsTfConfigAndSaysSo) {
  Result r = RunCohort("resolve", {{"TF_CONFIG", kTfConfig}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("tf_config (auto-detected: the TF_CONFIG"));
  EXPECT_THAT(r.out, HasSubstr("worker: 0=localhost:2223 1=localhost:2224"));
  EXPECT_THAT(r.out, HasSubstr("master:            grpc://localhost:2224"));
  Result json = RunCohort("resolve --format json", {{"TF_CONFIG", kTfConfig}});
  ASSERT_EQ(json.exit_code, 0) << json.err;
  EXPECT_EQ(Json::parse(json.out)["resolver"], "tf_config");
  EXPECT_THAT(json.err, HasSubstr("auto-detected tf_config"));
}

TEST(ResolveCliTest, AutoDetectsSageMaker) {
  Result r = RunCohort(
      "resolve --format json",
      {{"SM_HOSTS", R"(["algo-2","algo-1"])"}, {"SM_CURRENT_HOST", "algo-2"}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  Json json = Json::parse(r.out);
  EXPECT_EQ(json["resolver"], "sagemaker");
  EXPECT_EQ(json["cluster"],
            Json::parse(R"({"worker": ["algo-1:2223", "algo-2:2223"]})"));
  EXPECT_EQ(json["task_id"], 1);
}

TEST(ResolveCliTest, ExampleTfConfigOfTheMainJobResolves) {
  std::string example =
      ReadAll(std::string(COHORT_EXAMPLES_DIR) + "/tf_config_example.json");
  ASSERT_FALSE(example.empty());
  Result r =
      RunCohort("resolve --resolver tf_config", {{"TF_CONFIG", example}});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("master:"));
}

TEST(ResolveCliTest, BadTfConfigFailsWithANamedError) {
  struct Bad {
    const char* tf_config;
    const char* mention;
  } cases[] = {
      {R"({"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 7}})",
       "\"task.index\" is 7"},
      {R"({"cluster": {"worker": ["a:1"]}, "task": {"type": "wrker"}})",
       "\"task.type\" is \"wrker\""},
      {R"({"cluster": )", "TF_CONFIG is not valid JSON"},
      {R"({"cluster": {"worker": "a:1"}})", "must be a list"},
  };
  for (const Bad& c : cases) {
    Result r = RunCohort("resolve --resolver tf_config --format json",
                         {{"TF_CONFIG", c.tf_config}});
    EXPECT_EQ(r.exit_code, 1) << c.tf_config;
    EXPECT_THAT(r.err, HasSubstr("TF_CONFIG")) << c.tf_config;
    EXPECT_THAT(r.err, HasSubstr(c.mention)) << c.tf_config;
    EXPECT_EQ(r.out, "") << c.tf_config;
  }
}

TEST(ResolveCliTest, NothingDetectedOrUnknownResolverFails) {
  Result none = RunCohort("resolve", {});
  EXPECT_NE(none.exit_code, 0);
  EXPECT_THAT(none.err, HasSubstr("no cluster environment detected"));
  EXPECT_THAT(none.err, HasSubstr("TF_CONFIG"));
  Result unknown = RunCohort("resolve --resolver nosuch", {});
  EXPECT_NE(unknown.exit_code, 0);
  EXPECT_THAT(unknown.err, HasSubstr("unknown resolver 'nosuch'"));
  Result format =
      RunCohort("resolve --format yaml", {{"TF_CONFIG", kTfConfig}});
  EXPECT_NE(format.exit_code, 0);
}

}  // namespace
}  // namespace cohort
