// TFConfigClusterResolver: the cluster and this task from the TF_CONFIG
// environment variable, TensorFlow's JSON convention:
//   {"cluster": {"chief": ["c:2222"], "worker": ["w0:2222", "w1:2222"]},
//    "task": {"type": "worker", "index": 1},
//    "rpc_layer": "grpc", "session_master": "...", "environment": "cloud"}
//
// TF_CONFIG is read through the Env on every access, so a change takes effect
// at once. Unset (or blank) means {}. As in TensorFlow, "task.type" may be a
// number (123456 becomes "123456") and "task.index" a decimal string ("1").
// Unlike TensorFlow, a malformed TF_CONFIG is rejected up front with
// InvalidArgument naming TF_CONFIG, the field, the value and what is expected:
// bad JSON, wrong types, a task type that is not a job of a non-empty cluster
// (except "evaluator", which may sit outside it), a task index that is not a
// task of its job, a negative index.
//
// Constructor overrides (task_type, task_id, rpc_layer, environment) win over
// TF_CONFIG when set (0 and "" are honoured) and can be changed later.
//
// Thread safety: not thread-safe (see ClusterResolver).
#ifndef COHORT_CLUSTER_RESOLVERS_TF_CONFIG_CLUSTER_RESOLVER_H_
#define COHORT_CLUSTER_RESOLVERS_TF_CONFIG_CLUSTER_RESOLVER_H_

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "cohort/base/env.h"
#include "cohort/cluster/cluster_resolver.h"

namespace cohort {

class ResolverRegistry;

// TF_CONFIG after parsing and validation.
struct TfConfig {
  ClusterSpec cluster;
  std::optional<std::string> task_type;
  std::optional<int64_t> task_index;
  std::optional<std::string> rpc_layer;
  std::optional<std::string> session_master;
  std::optional<std::string> environment;
};

// Parses and validates TF_CONFIG text (see the file comment). `what` names
// the source in messages ("TF_CONFIG"). Blank text gives an empty TfConfig.
// Never crashes on any input (fuzzed).
absl::StatusOr<TfConfig> ParseTfConfig(absl::string_view text,
                                       absl::string_view what = "TF_CONFIG");

class TFConfigClusterResolver : public ClusterResolverWithTaskAttributes {
 public:
  struct Options {
    std::optional<std::string> task_type;
    std::optional<int64_t> task_id;
    std::optional<std::string> rpc_layer;
    std::optional<std::string> environment;
  };

  // `env` is not owned and must outlive the resolver.
  explicit TFConfigClusterResolver(Env* env)
      : TFConfigClusterResolver(env, Options()) {}
  TFConfigClusterResolver(Env* env, Options options);

  std::string name() const override { return "tf_config"; }

  // The validated configuration, read now. Errors as ParseTfConfig.
  virtual absl::StatusOr<TfConfig> LoadConfig();

  // TF_CONFIG's cluster (empty when absent). InvalidArgument for a malformed
  // TF_CONFIG.
  absl::StatusOr<ClusterSpec> cluster_spec() override;
  // 1. TF_CONFIG's session_master, verbatim, when present;
  // 2. "" when the cluster has no jobs, or one job with one task;
  // 3. else the address of (task_type, task_id), each defaulting to this
  //    task, prefixed with rpc_layer (default: this resolver's). Without a
  //    task: InvalidArgument "No such job in cluster: None".
  absl::StatusOr<std::string> master(
      std::optional<std::string> task_type = std::nullopt,
      std::optional<int64_t> task_id = std::nullopt,
      std::optional<std::string> rpc_layer = std::nullopt) override;
  // Override, else TF_CONFIG's value; nullopt when absent or when TF_CONFIG
  // is malformed (cluster_spec() reports why).
  std::optional<std::string> task_type() override;
  std::optional<int64_t> task_id() override;
  std::optional<std::string> rpc_layer() override;
  // The setters (inherited) set the overrides.
  // Only the constructor/override value (nullopt by default); TF_CONFIG's
  // "environment" is for the distribute coordinator.
  std::optional<std::string> environment() override { return environment_; }
  // Devices of (task_type, task_id), defaulting to this task.
  absl::StatusOr<AcceleratorCounts> num_accelerators(
      std::optional<std::string> task_type = std::nullopt,
      std::optional<int64_t> task_id = std::nullopt) override;

 protected:
  Env* env_;

 private:
  std::optional<std::string> environment_;
};

// Registers "tf_config" (priority 10; detected when TF_CONFIG is set and not
// blank).
void RegisterTFConfigResolver(ResolverRegistry* registry);

}  // namespace cohort

#endif  // COHORT_CLUSTER_RESOLVERS_TF_CONFIG_CLUSTER_RESOLVER_H_
