// Registration of every conformance adapter (see adapter.h). One function per
// area; RegisterAllAdapters calls each once, explicitly.
#ifndef COHORT_TOOLS_CONFORMANCE_ADAPTERS_H_
#define COHORT_TOOLS_CONFORMANCE_ADAPTERS_H_

#include "tools/conformance/adapter.h"

namespace cohort::conformance {

// ClusterSpec, ServerDef, multi_worker_util, ClusterResolverBase, Simple,
// Union, TFConfig, SageMaker (cluster_adapters.cc).
void RegisterClusterAdapters(AdapterRegistry* registry);

// Slurm, Slurm.expand_hostlist, Slurm.expand_tasks_per_node (slurm_adapter.cc).
void RegisterSlurmAdapters(AdapterRegistry* registry);
// Kubernetes (kubernetes_adapter.cc).
void RegisterKubernetesAdapters(AdapterRegistry* registry);
// GCE, also nested in Union+GCE (gce_adapter.cc).
void RegisterGceAdapters(AdapterRegistry* registry);
// TPU, TPU.device_dict, TPUClient, TPUClient.endpoints (tpu_adapter.cc).
void RegisterTpuAdapters(AdapterRegistry* registry);

// DistributeCoordinator, DistributeCoordinator.run_standard_tensorflow_server
// (distribute_adapter.cc).
void RegisterDistributeAdapters(AdapterRegistry* registry);

// Server: tf.distribute.Server as runtime::Server (server_adapter.cc).
void RegisterServerAdapters(AdapterRegistry* registry);

// Registers all of the above.
void RegisterAllAdapters(AdapterRegistry* registry);

}  // namespace cohort::conformance

#endif  // COHORT_TOOLS_CONFORMANCE_ADAPTERS_H_
