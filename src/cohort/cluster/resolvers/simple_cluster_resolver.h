// SimpleClusterResolver: a fixed ClusterSpec plus fixed task, master and
// accelerator values, for tests and for callers that already know their
// cluster.
//
// Thread safety: not thread-safe (see ClusterResolver).
#ifndef COHORT_CLUSTER_RESOLVERS_SIMPLE_CLUSTER_RESOLVER_H_
#define COHORT_CLUSTER_RESOLVERS_SIMPLE_CLUSTER_RESOLVER_H_

#include <optional>
#include <string>

#include "cohort/cluster/cluster_resolver.h"

namespace cohort {

class SimpleClusterResolver : public ClusterResolverWithTaskAttributes {
 public:
  struct Options {
    // Returned by master() when no task is named ("" by default).
    std::string master;
    std::optional<std::string> task_type;
    std::optional<int64_t> task_id;
    std::string environment;
    // What num_accelerators() returns, whatever its arguments.
    AcceleratorCounts num_accelerators;
    std::optional<std::string> rpc_layer;
  };

  explicit SimpleClusterResolver(ClusterSpec cluster_spec)
      : SimpleClusterResolver(std::move(cluster_spec), Options()) {}
  SimpleClusterResolver(ClusterSpec cluster_spec, Options options);

  std::string name() const override { return "simple"; }
  // Never fails, never blocks.
  absl::StatusOr<ClusterSpec> cluster_spec() override { return spec_; }
  // With both task_type and task_id: that task's address (InvalidArgument
  // when the spec has no such task); otherwise the stored master. Prefixed
  // with `rpc_layer` when non-empty, else with the stored rpc layer.
  absl::StatusOr<std::string> master(
      std::optional<std::string> task_type = std::nullopt,
      std::optional<int64_t> task_id = std::nullopt,
      std::optional<std::string> rpc_layer = std::nullopt) override;
  std::optional<std::string> environment() override { return environment_; }
  // The constructor's value; arguments are ignored (TensorFlow's behaviour).
  absl::StatusOr<AcceleratorCounts> num_accelerators(
      std::optional<std::string> task_type = std::nullopt,
      std::optional<int64_t> task_id = std::nullopt) override {
    return num_accelerators_;
  }

 private:
  ClusterSpec spec_;
  std::string master_;
  std::string environment_;
  AcceleratorCounts num_accelerators_;
};

}  // namespace cohort

#endif  // COHORT_CLUSTER_RESOLVERS_SIMPLE_CLUSTER_RESOLVER_H_
