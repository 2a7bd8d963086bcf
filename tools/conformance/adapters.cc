#include "tools/conformance/adapters.h"

namespace cohort::conformance {

void RegisterAllAdapters(AdapterRegistry* registry) {
  RegisterClusterAdapters(registry);
  // One call per further adapter file, e.g. RegisterSlurmAdapters(registry);
}

}  // namespace cohort::conformance
