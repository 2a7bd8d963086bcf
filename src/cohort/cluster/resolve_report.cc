#include "cohort/cluster/resolve_report.h"

#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "cohort/base/status.h"

namespace cohort {
namespace {

template <typename T>
Json OrNull(const std::optional<T>& v) {
  return v.has_value() ? Json(*v) : Json(nullptr);
}

}  // namespace

absl::StatusOr<ResolveReport> DescribeResolver(ClusterResolver& resolver,
                                               absl::string_view name) {
  ResolveReport report;
  report.resolver = std::string(name);
  absl::StatusOr<ClusterSpec> spec = resolver.cluster_spec();
  if (!spec.ok()) {
    return absl::Status(
        spec.status().code(),
        absl::StrCat("resolver ", name, ": ", spec.status().message()));
  }
  report.cluster = *std::move(spec);
  Json& json = report.json;
  json = Json::object();
  json["resolver"] = report.resolver;
  json["cluster"] = report.cluster.ToJson();
  json["task_type"] = OrNull(resolver.task_type());
  json["task_id"] = OrNull(resolver.task_id());
  json["rpc_layer"] = OrNull(resolver.rpc_layer());
  // A cluster without a task for this process (an in-graph client, say) has
  // no master of its own: unknown, with the reason as a warning.
  absl::StatusOr<std::string> master = resolver.master();
  if (master.ok()) {
    json["master"] = *master;
  } else {
    json["master"] = nullptr;
    report.warnings.push_back(
        absl::StrCat("no master: ", master.status().message()));
  }
  auto accelerators = resolver.num_accelerators();
  if (accelerators.ok()) {
    Json counts = Json::object();
    for (const auto& [type, count] : *accelerators) counts[type] = count;
    json["num_accelerators"] = std::move(counts);
  } else {
    json["num_accelerators"] = nullptr;
    report.warnings.push_back(absl::StrCat("accelerators unknown: ",
                                           accelerators.status().message()));
  }
  return report;
}

absl::StatusOr<ResolveReport> ResolveCluster(const ResolverRegistry& registry,
                                             absl::string_view name, Env* env) {
  std::string chosen(name);
  std::string detected_from;
  if (chosen == "auto") {
    COHORT_ASSIGN_OR_RETURN(const ResolverRegistration* detected,
                            registry.Detect(env));
    chosen = detected->name;
    detected_from = detected->description;
  }
  COHORT_ASSIGN_OR_RETURN(std::unique_ptr<ClusterResolver> resolver,
                          registry.Create(chosen, env));
  COHORT_ASSIGN_OR_RETURN(ResolveReport report,
                          DescribeResolver(*resolver, chosen));
  report.detected_from = std::move(detected_from);
  return report;
}

}  // namespace cohort
