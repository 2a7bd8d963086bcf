// The two small grammars of Slurm's step environment:
//
//   hostlist        SLURM_STEP_NODELIST,       e.g. "n[01-03,7],gpu5"
//   tasks-per-node  SLURM_STEP_TASKS_PER_NODE, e.g. "3(x2),2,1"
//
// Hostlist grammar (TensorFlow's newest `expand_hostlist`):
//   list   := item ("," item)*            commas inside brackets do not split
//   item   := prefix [ "[" ranges "]" ]   the bracket group must end the item
//   prefix := any characters except , [ ]
//   ranges := range ("," range)*
//   range  := N | A "-" B                 decimal, inclusive, A <= B
// Every number of a range is left-padded with zeros to the width of the lower
// bound's literal text ("o[009-011]" -> o009 o010 o011; "n[8-11]" -> n8..n11).
// Order is kept and duplicates are not removed. "" expands to no hosts.
//
// Tasks-per-node grammar: a comma list of `C` or `C(xR)` (C repeated R times):
// "3(x2),2,1" -> 3 3 2 1.
//
// Deviations from the Python, all on malformed input: a trailing empty item
// ("a,") and a descending range ("n[3-1]") are errors here (Python silently
// drops them), and expansions are capped at kMaxExpandedEntries entries so a
// hostile value cannot exhaust memory.
//
// Thread safety: stateless functions; thread-safe.
#ifndef COHORT_CLUSTER_RESOLVERS_SLURM_HOSTLIST_H_
#define COHORT_CLUSTER_RESOLVERS_SLURM_HOSTLIST_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace cohort {

// Upper bound on hosts (or task counts) one expansion may produce.
inline constexpr int64_t kMaxExpandedEntries = 1 << 20;

// Expands a Slurm hostlist. InvalidArgument "Invalid hostlist format \"...\":
// <reason>; expected ..." on malformed input.
absl::StatusOr<std::vector<std::string>> ExpandHostlist(
    absl::string_view hostlist);

// Expands a tasks-per-node list. InvalidArgument "Invalid tasks-per-node list
// format \"...\": <reason>; expected ..." on malformed input.
absl::StatusOr<std::vector<int>> ExpandTasksPerNode(
    absl::string_view tasks_per_node);

}  // namespace cohort

#endif  // COHORT_CLUSTER_RESOLVERS_SLURM_HOSTLIST_H_
