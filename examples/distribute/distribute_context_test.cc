// distribute_context as a real job: `cohort launch` starts every task as a
// process with its TF_CONFIG, each starts a real standard server, and the
// chief and workers pass the coordination-service barrier (the binaries
// next to this test in <build>/bin).

#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "cohort/base/json.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/launch/command_run.h"

namespace cohort {
namespace {

using ::testing::HasSubstr;

using launch::launch_testing::BinDir;

struct Job {
  int exit_code = -1;
  std::string output;
  std::map<std::string, Json> contexts;  // "[chief:0]" -> its JSON line
  int barriers_passed = 0;
};

Job Launch(const std::string& flags, const std::string& program_flags) {
  std::vector<std::string> argv = {BinDir() + "/cohort", "launch",
                                   "--no-progress"};
  for (absl::string_view flag : absl::StrSplit(flags, ' ', absl::SkipEmpty())) {
    argv.emplace_back(flag);
  }
  argv.push_back("--");
  argv.push_back(BinDir() + "/distribute_context");
  for (absl::string_view flag :
       absl::StrSplit(program_flags, ' ', absl::SkipEmpty())) {
    argv.emplace_back(flag);
  }
  launch::launch_testing::CommandRun run =
      launch::launch_testing::RunCommand(argv, {}, absl::Seconds(120));
  Job job;
  job.exit_code = run.exit_code;
  job.output = run.status.ok() || run.exit_code > 0
                   ? run.output
                   : absl::StrCat(run.status.message(), "\n", run.output);
  for (absl::string_view line : absl::StrSplit(job.output, '\n')) {
    const size_t close = line.find("] ");
    if (line.empty() || line[0] != '[' || close == absl::string_view::npos) {
      continue;
    }
    const std::string task(line.substr(0, close + 1));
    absl::string_view rest = line.substr(close + 2);
    if (rest == "barrier passed") ++job.barriers_passed;
    if (!rest.empty() && rest[0] == '{') {
      auto json = ParseJson(rest, task);
      if (json.ok()) job.contexts[task] = *json;
    }
  }
  return job;
}

TEST(DistributeContextTest, IndependentBetweenGraphPassesTheBarrier) {
  Job job = Launch("--chief --workers 2 --ps 1",
                   "--mode independent_worker --between-graph");
  ASSERT_EQ(job.exit_code, 0) << job.output;
  EXPECT_THAT(job.output, HasSubstr("job succeeded"));
  ASSERT_EQ(job.contexts.size(), 3u) << job.output;
  const Json& chief = job.contexts["[chief:0]"];
  EXPECT_EQ(chief["task_type"], "chief");
  EXPECT_EQ(chief["is_chief"], true);
  EXPECT_EQ(chief["num_workers"], 3);
  EXPECT_EQ(chief["has_barrier"], true);
  EXPECT_THAT(chief["master_target"].get<std::string>(),
              HasSubstr("grpc://127.0.0.1:"));
  for (const char* w : {"[worker:0]", "[worker:1]"}) {
    EXPECT_EQ(job.contexts[w]["is_chief"], false) << w;
    EXPECT_EQ(job.contexts[w]["distributed_mode"], true) << w;
    EXPECT_EQ(job.contexts[w]["has_barrier"], true) << w;
  }
  EXPECT_EQ(job.barriers_passed, 3) << job.output;
}

TEST(DistributeContextTest, IndependentInGraphWithEvaluator) {
  Job job = Launch("--chief --workers 2 --ps 1 --evaluator",
                   "--mode independent_worker --in-graph");
  ASSERT_EQ(job.exit_code, 0) << job.output;
  ASSERT_EQ(job.contexts.size(), 2u) << job.output;
  const Json& client = job.contexts["[chief:0]"];
  EXPECT_TRUE(client["task_type"].is_null());
  EXPECT_EQ(client["is_chief"], true);
  EXPECT_EQ(client["has_barrier"], false);
  const Json& evaluator = job.contexts["[evaluator:0]"];
  EXPECT_EQ(evaluator["master_target"], "");  // not in the launcher's cluster
  EXPECT_EQ(evaluator["distributed_mode"], false);
  EXPECT_EQ(evaluator["num_workers"], 3);
  EXPECT_EQ(job.barriers_passed, 0);
}

}  // namespace
}  // namespace cohort
