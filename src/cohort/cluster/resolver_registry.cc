#include "cohort/cluster/resolver_registry.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cohort/base/logging.h"
#include "cohort/cluster/resolvers/gce_cluster_resolver.h"
#include "cohort/cluster/resolvers/kubernetes_cluster_resolver.h"
#include "cohort/cluster/resolvers/sagemaker_cluster_resolver.h"
#include "cohort/cluster/resolvers/slurm_cluster_resolver.h"
#include "cohort/cluster/resolvers/tf_config_cluster_resolver.h"
#include "cohort/cluster/resolvers/tpu_cluster_resolver.h"

namespace cohort {

absl::Status ResolverRegistry::Register(ResolverRegistration registration) {
  if (registration.name.empty()) {
    return absl::InvalidArgumentError("a resolver registration needs a name");
  }
  if (!registration.factory) {
    return absl::InvalidArgumentError(absl::StrCat(
        "resolver '", registration.name, "' is registered without a factory"));
  }
  if (Find(registration.name) != nullptr) {
    return absl::AlreadyExistsError(
        absl::StrCat("resolver '", registration.name, "' is registered twice"));
  }
  auto pos = std::upper_bound(registrations_.begin(), registrations_.end(),
                              registration.priority,
                              [](int priority, const ResolverRegistration& r) {
                                return priority < r.priority;
                              });
  registrations_.insert(pos, std::move(registration));
  return absl::OkStatus();
}

const ResolverRegistration* ResolverRegistry::Find(
    absl::string_view name) const {
  for (const auto& r : registrations_) {
    if (r.name == name) return &r;
  }
  return nullptr;
}

std::vector<std::string> ResolverRegistry::names() const {
  std::vector<std::string> out;
  for (const auto& r : registrations_) out.push_back(r.name);
  return out;
}

absl::StatusOr<std::unique_ptr<ClusterResolver>> ResolverRegistry::Create(
    absl::string_view name, Env* env) const {
  const ResolverRegistration* r = Find(name);
  if (r == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("unknown resolver '", name,
                     "'; known resolvers: ", absl::StrJoin(names(), ", ")));
  }
  return r->factory(env);
}

absl::StatusOr<const ResolverRegistration*> ResolverRegistry::Detect(
    Env* env) const {
  std::vector<std::string> checked;
  for (const auto& r : registrations_) {
    if (!r.detector) continue;
    if (r.detector(env)) return &r;
    checked.push_back(absl::StrCat(r.name, " (", r.description, ")"));
  }
  return absl::NotFoundError(
      absl::StrCat("no cluster environment detected; checked: ",
                   checked.empty() ? "nothing" : absl::StrJoin(checked, "; "),
                   ". Set one of these up or pass --resolver explicitly."));
}

void RegisterBuiltinResolvers(ResolverRegistry* registry) {
  // One call per resolver; each resolver's own file defines its function.
  // The priorities they register with decide `auto`'s order, not the order
  // of these calls.
  RegisterTFConfigResolver(registry);
  RegisterSageMakerResolver(registry);
  RegisterSlurmResolver(registry);
  RegisterKubernetesResolver(registry);
  RegisterGceResolver(registry);
  RegisterTpuResolver(registry);
}

const ResolverRegistry& BuiltinResolverRegistry() {
  static const ResolverRegistry* registry = [] {
    auto* r = new ResolverRegistry();
    RegisterBuiltinResolvers(r);
    return r;
  }();
  return *registry;
}

}  // namespace cohort
