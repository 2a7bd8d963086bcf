// --engine slurm: one launcher per task of a Slurm job step (`srun -n N
// cohort launch --engine slurm -- PROGRAM`). The step's environment, read by
// SlurmClusterResolver, gives this task's rank, the task count and the hosts;
// task 0's launcher listens on its host at the resolver's port for task 0
// (8888, TensorFlow's port base) unless --rendezvous says otherwise.
#include "absl/strings/str_cat.h"
#include "cohort/base/status.h"
#include "cohort/cluster/resolvers/slurm_cluster_resolver.h"
#include "cohort/launch/engine.h"

namespace cohort::launch {

absl::StatusOr<EngineTask> ResolveSlurmTask(Env* env,
                                            const EngineFlags& flags) {
  SlurmClusterResolver::Options options;
  options.port_base = kDefaultRendezvousPort;
  options.rpc_layer = std::nullopt;
  absl::StatusOr<std::unique_ptr<SlurmClusterResolver>> resolver =
      SlurmClusterResolver::Create(env, options);
  if (!resolver.ok()) {
    return Annotate(resolver.status(), "--engine slurm");
  }
  absl::StatusOr<ClusterSpec> spec = (*resolver)->cluster_spec();
  if (!spec.ok()) return Annotate(spec.status(), "--engine slurm");
  absl::StatusOr<std::vector<std::optional<std::string>>> workers =
      spec->job_tasks("worker");
  if (!workers.ok()) return Annotate(workers.status(), "--engine slurm");

  EngineTask task;
  task.engine = "slurm";
  task.index = (*resolver)->rank();
  task.count = static_cast<int>(workers->size());
  for (const std::optional<std::string>& address : *workers) {
    COHORT_ASSIGN_OR_RETURN(
        auto host_port,
        SplitHostPort(address.value_or(""), "the Slurm resolver's address"));
    task.hosts.push_back(host_port.first);
  }
  COHORT_ASSIGN_OR_RETURN(auto first,
                          SplitHostPort(workers->front().value_or(""),
                                        "the Slurm resolver's address"));
  COHORT_ASSIGN_OR_RETURN(
      task.rendezvous,
      ApplyRendezvousFlag(first.first, first.second, flags.rendezvous));
  task.source = absl::StrCat(
      "SLURM_PROCID=", task.index, " of ", task.count,
      ", SLURM_STEP_NODELIST=", env->GetVar("SLURM_STEP_NODELIST").value_or(""),
      ", SLURM_JOB_ID=", env->GetVar("SLURM_JOB_ID").value_or("?"));
  return task;
}

}  // namespace cohort::launch
