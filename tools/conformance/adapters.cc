#include "tools/conformance/adapters.h"

namespace cohort::conformance {

void RegisterAllAdapters(AdapterRegistry* registry) {
  RegisterClusterAdapters(registry);
  RegisterSlurmAdapters(registry);
  RegisterKubernetesAdapters(registry);
  RegisterGceAdapters(registry);
  RegisterTpuAdapters(registry);
  RegisterDistributeAdapters(registry);
  RegisterServerAdapters(registry);
  // One call per further adapter file, e.g. RegisterSlurmAdapters(registry);
}

}  // namespace cohort::conformance
