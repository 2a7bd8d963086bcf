// SlurmClusterResolver: the cluster of a Slurm job step, from the step's
// environment (TensorFlow's newest, environment-based SlurmClusterResolver;
// no `scontrol` call). See docs/resolvers.md.
//
// Reads (through Env):
//   SLURM_PROCID               this task's rank (always required)
//   SLURM_STEP_NUM_TASKS       total tasks (only when `jobs` is not given)
//   SLURM_STEP_NODELIST        hostlist (unless tasks_per_node is a map)
//   SLURM_STEP_TASKS_PER_NODE  "3(x2),1" (only when tasks_per_node is unset)
//   CUDA_VISIBLE_DEVICES       GPUs per node when gpus_per_node is unset; else
//                              the lines "GPU ..." of `nvidia-smi --list-gpus`
// Writes CUDA_VISIBLE_DEVICES (auto_set_gpu) with this rank's GPUs on every
// cluster_spec() call.
//
// Layout: hosts in ascending text order; task k of a host gets port
// port_base + k and GPUs [k*gpus_per_task, (k+1)*gpus_per_task); jobs sorted
// by name take consecutive slices of that flat list; the job slice holding
// SLURM_PROCID gives task_type/task_id (unset until cluster_spec() or
// master() has run).
//
// Deliberate differences from the Python:
//   - GPU-less nodes: when gpus_per_task is 0 (e.g. no GPUs found), Python
//     crashes in cluster_spec() (range() with step 0). Here every task gets a
//     CPU-only slot: CUDA_VISIBLE_DEVICES is left untouched and
//     num_accelerators() is {"GPU": 0}.
//   - A missing `nvidia-smi` counts as 0 GPUs instead of raising.
//   - Malformed numbers, a rank outside the tasks, or an empty node list are
//     errors naming the variable and the value instead of Python exceptions
//     from int()/max()/indexing.
//
// Thread safety: not thread-safe (see ClusterResolver).
#ifndef COHORT_CLUSTER_RESOLVERS_SLURM_CLUSTER_RESOLVER_H_
#define COHORT_CLUSTER_RESOLVERS_SLURM_CLUSTER_RESOLVER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cohort/base/env.h"
#include "cohort/cluster/cluster_resolver.h"

namespace cohort {

class ResolverRegistry;

class SlurmClusterResolver : public ClusterResolverWithTaskAttributes {
 public:
  struct Options {
    // job name -> task count; default {"worker": SLURM_STEP_NUM_TASKS}.
    std::optional<std::map<std::string, int>> jobs;
    int port_base = 8888;
    std::optional<int> gpus_per_node;
    std::optional<int> gpus_per_task;
    // Either the same count for every node of SLURM_STEP_NODELIST, or a
    // host -> count map used as given. Unset: SLURM_STEP_TASKS_PER_NODE.
    std::optional<int> tasks_per_node;
    std::optional<std::map<std::string, int>> tasks_per_node_map;
    bool auto_set_gpu = true;
    std::optional<std::string> rpc_layer = std::string("grpc");
  };

  // Reads the environment and validates, in this order: GPUs per node
  // (FailedPrecondition "Requested more GPUs per node than available."), then
  // the task count (FailedPrecondition "Requested N tasks but only M were
  // assigned."). A missing variable is FailedPrecondition "SLURM_X not found
  // in environment. Not running inside a SLURM step?"; a malformed one
  // InvalidArgument naming it, its value and the expected grammar.
  // May run `nvidia-smi` (blocking). `env` is not owned.
  static absl::StatusOr<std::unique_ptr<SlurmClusterResolver>> Create(
      Env* env, Options options);

  std::string name() const override { return "slurm"; }

  // Computes the layout above; sets task_type/task_id from the rank and, with
  // auto_set_gpu, CUDA_VISIBLE_DEVICES. FailedPrecondition when SLURM_PROCID
  // is outside every job.
  absl::StatusOr<ClusterSpec> cluster_spec() override;
  // master(): ClusterResolverWithTaskAttributes's rule: "" when task type or
  // id (argument, else attribute) is unknown; otherwise recomputes the spec
  // (resetting the attributes) and formats the task's address with
  // `rpc_layer` or the attribute.

  // {"GPU": gpus_per_task}; arguments ignored (as TensorFlow does).
  absl::StatusOr<AcceleratorCounts> num_accelerators(
      std::optional<std::string> task_type = std::nullopt,
      std::optional<int64_t> task_id = std::nullopt) override;

  int gpus_per_node() const { return gpus_per_node_; }
  int gpus_per_task() const { return gpus_per_task_; }
  int rank() const { return rank_; }
  // Host -> task count, sorted by host.
  const std::map<std::string, int>& task_configuration() const {
    return task_configuration_;
  }

 private:
  SlurmClusterResolver() = default;

  Env* env_ = nullptr;
  int rank_ = 0;
  std::map<std::string, int> jobs_;
  int port_base_ = 8888;
  std::map<std::string, int> task_configuration_;
  int gpus_per_node_ = 0;
  int gpus_per_task_ = 0;
  bool auto_set_gpu_ = true;
};

// Counts GPUs as TensorFlow's Slurm resolver does: entries of
// CUDA_VISIBLE_DEVICES when set ("" counts as 1), else lines starting with
// "GPU " from `nvidia-smi --list-gpus`, else 0.
int CountGpusForSlurm(Env* env);

// Registers "slurm" (detected by SLURM_PROCID) in `registry`.
void RegisterSlurmResolver(ResolverRegistry* registry);

}  // namespace cohort

#endif  // COHORT_CLUSTER_RESOLVERS_SLURM_CLUSTER_RESOLVER_H_
