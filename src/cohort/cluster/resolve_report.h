// ResolveReport: what a resolver says about this process, as one JSON
// object — the output of `cohort resolve --format json` and the result of
// the Python `cohort.resolve()`:
//
//   {"resolver": "slurm", "cluster": {...}, "task_type": "worker",
//    "task_id": 1, "master": "grpc://...", "rpc_layer": "grpc",
//    "num_accelerators": {"GPU": 2}}
//
// task_type, task_id and rpc_layer are null when the resolver has none;
// master and num_accelerators are null when the resolver cannot say (each
// adds a warning naming why, and the report is still OK).
#ifndef COHORT_CLUSTER_RESOLVE_REPORT_H_
#define COHORT_CLUSTER_RESOLVE_REPORT_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "cohort/base/env.h"
#include "cohort/base/json.h"
#include "cohort/cluster/cluster_resolver.h"
#include "cohort/cluster/cluster_spec.h"
#include "cohort/cluster/resolver_registry.h"

namespace cohort {

struct ResolveReport {
  // The registered name of the resolver used ("tf_config", ...).
  std::string resolver;
  // With `auto`: the detector's description of what it found; else "".
  std::string detected_from;
  ClusterSpec cluster;
  Json json;
  // Fields the resolver could not give, one line each.
  std::vector<std::string> warnings;
};

// The report of an existing resolver named `name`. Fails only when the
// resolver cannot give its cluster spec (the error names the resolver).
absl::StatusOr<ResolveReport> DescribeResolver(ClusterResolver& resolver,
                                               absl::string_view name);

// Builds the resolver `name` from `registry` ("auto": the first whose
// environment is present, see ResolverRegistry::Detect) and describes it.
// Errors: those of Detect and Create, and DescribeResolver's.
absl::StatusOr<ResolveReport> ResolveCluster(const ResolverRegistry& registry,
                                             absl::string_view name, Env* env);

}  // namespace cohort

#endif  // COHORT_CLUSTER_RESOLVE_REPORT_H_
