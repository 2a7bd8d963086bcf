// Fuzzes the Slurm hostlist grammar (SLURM_STEP_NODELIST): any input must give
// a host list or an InvalidArgument naming the value, never a crash or an
// unbounded expansion, and an expanded list written back as a plain
// comma-separated list must expand to itself.
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_join.h"
#include "cohort/base/logging.h"
#include "cohort/cluster/resolvers/slurm_hostlist.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto hosts = cohort::ExpandHostlist(text);
  if (!hosts.ok()) {
    COHORT_CHECK(hosts.status().code() == absl::StatusCode::kInvalidArgument)
        << hosts.status();
    COHORT_CHECK(hosts.status().message().find("Invalid hostlist format") !=
                 absl::string_view::npos)
        << hosts.status();
    return 0;
  }
  COHORT_CHECK(static_cast<int64_t>(hosts->size()) <=
               cohort::kMaxExpandedEntries);
  for (const std::string& host : *hosts) {
    COHORT_CHECK(!host.empty()) << "empty host from \"" << text << "\"";
    COHORT_CHECK(host.find_first_of(",[]") == std::string::npos) << host;
  }
  if (hosts->size() <= 1000) {
    auto again = cohort::ExpandHostlist(absl::StrJoin(*hosts, ","));
    COHORT_CHECK(again.ok() && *again == *hosts)
        << "round trip of \"" << text << "\"";
  }
  return 0;
}
