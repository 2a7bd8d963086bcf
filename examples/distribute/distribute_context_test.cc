// distribute_context as a real job: `cohort launch` starts every task as a
// process with its TF_CONFIG, each starts a real standard server, and the
// chief and workers pass the coordination-service barrier (the binaries
// next to this test in <build>/bin).
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "cohort/base/json.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort {
namespace {

using ::testing::HasSubstr;

std::string BinDir() {
  char self[4096];
  const ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
  std::string path(self, len > 0 ? static_cast<size_t>(len) : 0);
  return path.substr(0, path.rfind('/'));
}

struct Job {
  int exit_code = -1;
  std::string output;
  std::map<std::string, Json> contexts;  // "[chief:0]" -> its JSON line
  int barriers_passed = 0;
};

Job Launch(const std::string& flags, const std::string& program_flags) {
  const std::string command = absl::StrCat(
      "timeout 120 ", BinDir(), "/cohort launch --quiet ", flags, " -- ",
      BinDir(), "/distribute_context ", program_flags, " 2>&1");
  Job job;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return job;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof(buf), pipe)) > 0;) {
    job.output.append(buf, n);
  }
  const int status = pclose(pipe);
  job.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
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
