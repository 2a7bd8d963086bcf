// Conformance adapters for the Slurm resolver and its two grammars:
//   "Slurm.expand_hostlist"        input.hostlist       -> list of hosts
//   "Slurm.expand_tasks_per_node"  input.tasks_per_node -> list of counts
//   "Slurm"                        input.env + input.ctor, common script steps
#include <map>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "cohort/base/status.h"
#include "cohort/cluster/resolvers/slurm_cluster_resolver.h"
#include "cohort/cluster/resolvers/slurm_hostlist.h"
#include "tools/conformance/adapters.h"

namespace cohort::conformance {
namespace {

absl::StatusOr<std::string> RequiredString(const Json& input, const char* key) {
  COHORT_ASSIGN_OR_RETURN(std::optional<std::string> v, OptString(input, key));
  if (!v.has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat("case input has no string \"", key, "\""));
  }
  return *v;
}

// One outcome per expected result of a call-less case.
CaseRun Repeat(const Json& test_case, StepOutcome outcome) {
  CaseRun run;
  const Json& results = Field(Field(test_case, "expect"), "results");
  size_t n = results.is_array() ? results.size() : 1;
  for (size_t i = 0; i < n; ++i) run.steps.push_back(outcome);
  return run;
}

class ExpandHostlistAdapter : public Adapter {
 public:
  CaseRun Run(const Json& test_case, CaseContext&) const override {
    auto text = RequiredString(Field(test_case, "input"), "hostlist");
    if (!text.ok()) return Repeat(test_case, StepOutcome::Error(text.status()));
    auto hosts = ExpandHostlist(*text);
    if (!hosts.ok())
      return Repeat(test_case, StepOutcome::Error(hosts.status()));
    return Repeat(test_case, StepOutcome::Value(Json(*hosts)));
  }
};

class ExpandTasksPerNodeAdapter : public Adapter {
 public:
  CaseRun Run(const Json& test_case, CaseContext&) const override {
    auto text = RequiredString(Field(test_case, "input"), "tasks_per_node");
    if (!text.ok()) return Repeat(test_case, StepOutcome::Error(text.status()));
    auto counts = ExpandTasksPerNode(*text);
    if (!counts.ok())
      return Repeat(test_case, StepOutcome::Error(counts.status()));
    return Repeat(test_case, StepOutcome::Value(Json(*counts)));
  }
};

absl::StatusOr<std::map<std::string, int>> CountMap(const Json& v,
                                                    const char* what) {
  if (!v.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " must be a mapping of name to count, got ", JsonPreview(v)));
  }
  std::map<std::string, int> out;
  for (const auto& [name, count] : v.items()) {
    if (!count.is_number_integer()) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, "[\"", name, "\"] must be an integer, got ",
                       JsonPreview(count)));
    }
    out[name] = count.get<int>();
  }
  return out;
}

class SlurmAdapter : public ResolverAdapter {
 public:
  absl::StatusOr<std::unique_ptr<ClusterResolver>> Build(
      const Json& spec, CaseContext& ctx) const override {
    const Json& ctor = Field(spec, "ctor");
    SlurmClusterResolver::Options o;
    if (!Field(ctor, "jobs").is_null()) {
      COHORT_ASSIGN_OR_RETURN(o.jobs, CountMap(ctor["jobs"], "jobs"));
    }
    COHORT_ASSIGN_OR_RETURN(auto port_base, OptInt(ctor, "port_base"));
    if (port_base) o.port_base = static_cast<int>(*port_base);
    COHORT_ASSIGN_OR_RETURN(auto gpn, OptInt(ctor, "gpus_per_node"));
    if (gpn) o.gpus_per_node = static_cast<int>(*gpn);
    COHORT_ASSIGN_OR_RETURN(auto gpt, OptInt(ctor, "gpus_per_task"));
    if (gpt) o.gpus_per_task = static_cast<int>(*gpt);
    const Json& tpn = Field(ctor, "tasks_per_node");
    if (tpn.is_object()) {
      COHORT_ASSIGN_OR_RETURN(o.tasks_per_node_map,
                              CountMap(tpn, "tasks_per_node"));
    } else if (!tpn.is_null()) {
      COHORT_ASSIGN_OR_RETURN(auto n, OptInt(ctor, "tasks_per_node"));
      o.tasks_per_node = static_cast<int>(*n);
    }
    const Json& auto_set = Field(ctor, "auto_set_gpu");
    if (auto_set.is_boolean()) o.auto_set_gpu = auto_set.get<bool>();
    if (ctor.is_object() && ctor.contains("rpc_layer")) {
      COHORT_ASSIGN_OR_RETURN(o.rpc_layer, OptString(ctor, "rpc_layer"));
    }
    COHORT_ASSIGN_OR_RETURN(auto r, SlurmClusterResolver::Create(ctx.env(), o));
    return std::unique_ptr<ClusterResolver>(std::move(r));
  }
};

}  // namespace

void RegisterSlurmAdapters(AdapterRegistry* registry) {
  registry->Register("Slurm.expand_hostlist",
                     std::make_unique<ExpandHostlistAdapter>());
  registry->Register("Slurm.expand_tasks_per_node",
                     std::make_unique<ExpandTasksPerNodeAdapter>());
  registry->Register("Slurm", std::make_unique<SlurmAdapter>());
}

}  // namespace cohort::conformance
