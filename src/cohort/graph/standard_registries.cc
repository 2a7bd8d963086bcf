#include "cohort/graph/standard_registries.h"

#include "cohort/base/logging.h"
#include "cohort/graph/gradients.h"
#include "cohort/graph/gradients/all_gradients.h"
#include "cohort/graph/kernel.h"
#include "cohort/graph/kernels/all_kernels.h"
#include "cohort/graph/kernels/collective_ops.h"
#include "cohort/graph/kernels/sendrecv_ops.h"
#include "cohort/graph/kernels/state_ops.h"
#include "cohort/graph/op_registry.h"

namespace cohort {

const OpRegistry* StandardOpRegistry() {
  static const OpRegistry* registry = [] {
    auto* r = new OpRegistry();
    absl::Status s = RegisterAllOps(r);
    // The engine's own families (variables, Send/Recv, collectives) are
    // registered here.
    if (s.ok()) s = RegisterStateOps(r);
    if (s.ok()) s = RegisterSendRecvOps(r);
    if (s.ok()) s = RegisterCollectiveOps(r);
    COHORT_CHECK(s.ok()) << "registering the standard ops: " << s;
    return r;
  }();
  return registry;
}

const KernelRegistry* StandardKernelRegistry() {
  static const KernelRegistry* registry = [] {
    auto* r = new KernelRegistry();
    absl::Status s = RegisterAllKernels(r);
    if (s.ok()) s = RegisterStateKernels(r);
    if (s.ok()) s = RegisterSendRecvKernels(r);
    if (s.ok()) s = RegisterCollectiveKernels(r);
    COHORT_CHECK(s.ok()) << "registering the standard kernels: " << s;
    return r;
  }();
  return registry;
}

const GradientRegistry* StandardGradientRegistry() {
  static const GradientRegistry* registry = [] {
    auto* r = new GradientRegistry();
    absl::Status s = RegisterAllGradients(r);
    COHORT_CHECK(s.ok()) << "registering the standard gradients: " << s;
    return r;
  }();
  return registry;
}

}  // namespace cohort
