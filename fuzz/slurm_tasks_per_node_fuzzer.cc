// Fuzzes the Slurm tasks-per-node grammar (SLURM_STEP_TASKS_PER_NODE) and the
// Slurm resolver on top of it: any input must give counts or an
// InvalidArgument naming the value; small valid layouts must resolve to a
// cluster with exactly one address per task, or fail with a clear error.
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cohort/base/fake_env.h"
#include "cohort/base/logging.h"
#include "cohort/cluster/resolvers/slurm_cluster_resolver.h"
#include "cohort/cluster/resolvers/slurm_hostlist.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto counts = cohort::ExpandTasksPerNode(text);
  if (!counts.ok()) {
    COHORT_CHECK(counts.status().code() == absl::StatusCode::kInvalidArgument)
        << counts.status();
    COHORT_CHECK(
        counts.status().message().find("Invalid tasks-per-node list format") !=
        absl::string_view::npos)
        << counts.status();
    return 0;
  }
  COHORT_CHECK(static_cast<int64_t>(counts->size()) <=
               cohort::kMaxExpandedEntries);
  int64_t total = 0;
  for (int c : *counts) {
    COHORT_CHECK(c >= 0);
    total += c;
  }
  if (!counts->empty()) {  // "C(x0)" repeats C zero times
    auto again = cohort::ExpandTasksPerNode(absl::StrJoin(*counts, ","));
    COHORT_CHECK(again.ok() && *again == *counts);
  }

  if (counts->empty() || counts->size() > 64 || total > 4096) return 0;
  cohort::FakeEnv env;
  env.SetVar("SLURM_PROCID", "0");
  env.SetVar("SLURM_STEP_NUM_TASKS", absl::StrCat(total));
  env.SetVar("SLURM_STEP_NODELIST", absl::StrCat("n[1-", counts->size(), "]"));
  env.SetVar("SLURM_STEP_TASKS_PER_NODE", text);
  env.SetVar("CUDA_VISIBLE_DEVICES", "0,1,2,3");
  auto resolver = cohort::SlurmClusterResolver::Create(&env, {});
  if (!resolver.ok()) {
    COHORT_CHECK(resolver.status().code() ==
                     absl::StatusCode::kFailedPrecondition ||
                 resolver.status().code() == absl::StatusCode::kInvalidArgument)
        << resolver.status();
    return 0;
  }
  auto spec = (*resolver)->cluster_spec();
  if (!spec.ok()) {
    COHORT_CHECK(spec.status().code() == absl::StatusCode::kFailedPrecondition)
        << spec.status();
    return 0;
  }
  auto n = spec->num_tasks("worker");
  COHORT_CHECK(n.ok() && *n == total) << text;
  return 0;
}
