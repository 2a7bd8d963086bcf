// ResolverRegistry: the named cluster resolvers `cohort resolve --resolver X`
// can build, and how `--resolver auto` finds the one whose environment is
// present.
//
// Registration is explicit (no static initialisers): RegisterBuiltinResolvers
// calls one Register*Resolver function per resolver. Each registration has
//   - a name ("tf_config", "slurm", ...),
//   - a factory building the resolver from an Env (environment variables,
//     files), and
//   - optionally a detector telling whether this process runs in that
//     resolver's environment, plus a priority: `auto` asks detectors in
//     ascending priority and picks the first that says yes.
//
// To add a resolver: write `void RegisterXResolver(ResolverRegistry*)` in
// resolvers/x_cluster_resolver.{h,cc} and add one call to
// RegisterBuiltinResolvers in resolver_registry.cc. Priorities in use:
// tf_config 10, slurm 20, sagemaker 30, kubernetes 40, gce 50, tpu 60.
//
// Thread safety: registration is not thread-safe (do it at start-up); lookups
// on a registry that is no longer modified are thread-safe.
#ifndef COHORT_CLUSTER_RESOLVER_REGISTRY_H_
#define COHORT_CLUSTER_RESOLVER_REGISTRY_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "cohort/base/env.h"
#include "cohort/cluster/cluster_resolver.h"

namespace cohort {

// Builds a resolver reading its configuration through `env` (never null).
// Errors name the variable/endpoint, the value and what was expected.
using ResolverFactory =
    std::function<absl::StatusOr<std::unique_ptr<ClusterResolver>>(Env*)>;
// True when the resolver's environment is present (e.g. TF_CONFIG is set).
// Must be cheap and must not block on the network.
using EnvironmentDetector = std::function<bool(Env*)>;

struct ResolverRegistration {
  std::string name;
  // One line for `--help` and error messages: what it reads.
  std::string description;
  ResolverFactory factory;
  // Null: never picked by `auto` (e.g. GCE, TPU need explicit choice).
  EnvironmentDetector detector;
  // Lower is asked first by Detect.
  int priority = 100;
};

class ResolverRegistry {
 public:
  ResolverRegistry() = default;
  ResolverRegistry(const ResolverRegistry&) = delete;
  ResolverRegistry& operator=(const ResolverRegistry&) = delete;

  // AlreadyExists when the name is taken; InvalidArgument for an empty name
  // or a missing factory.
  absl::Status Register(ResolverRegistration registration);

  // nullptr when no resolver has that name.
  const ResolverRegistration* Find(absl::string_view name) const;
  // Registered names in priority order.
  std::vector<std::string> names() const;

  // Builds the named resolver. NotFound (listing the known names) for an
  // unknown name; otherwise whatever the factory returns.
  absl::StatusOr<std::unique_ptr<ClusterResolver>> Create(
      absl::string_view name, Env* env) const;

  // The first registration, in priority order, whose detector says its
  // environment is present. NotFound naming every environment checked when
  // none is.
  absl::StatusOr<const ResolverRegistration*> Detect(Env* env) const;

 private:
  std::vector<ResolverRegistration> registrations_;  // sorted by priority
};

// Registers every resolver cohort ships (see the file comment).
void RegisterBuiltinResolvers(ResolverRegistry* registry);

// A registry with the built-in resolvers, built on first use.
const ResolverRegistry& BuiltinResolverRegistry();

}  // namespace cohort

#endif  // COHORT_CLUSTER_RESOLVER_REGISTRY_H_
