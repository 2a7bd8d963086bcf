// Replica device setter: places a between-graph replica's graph for
// parameter-server training (TensorFlow's tf.train.replica_device_setter).
//
//   - every VarHandleOp without a device goes to /job:<ps_job>/task:k, k
//     round-robin over the ps tasks in the graph's node order, so every
//     replica places the same variable on the same ps; variables whose
//     handles one node takes together (an optimizer's variable and its
//     slots, e.g. ApplyMomentum's accumulator) count as one and go where
//     the first of them goes;
//   - every node that consumes a variable's handle (reads, assignments,
//     optimizer updates) goes where that variable is, since its kernel
//     needs the variable's memory;
//   - every other node without a device goes to `worker_device`.
// Nodes that already name a device keep it. With ps_tasks = 0 everything
// goes to the worker.
//
// Errors: InvalidArgument for ps_tasks < 0, and naming the node whose
// handle inputs come from variables explicitly placed on different devices.
//
// Thread safety: a function of its arguments.
#ifndef COHORT_TRAINING_REPLICA_DEVICE_SETTER_H_
#define COHORT_TRAINING_REPLICA_DEVICE_SETTER_H_

#include <string>

#include "absl/status/status.h"
#include "cohort/graph.pb.h"
#include "cohort/training/session_factory.h"

namespace cohort::training {

struct ReplicaDeviceSetterOptions {
  int ps_tasks = 0;
  std::string ps_job = "ps";
  // "/job:worker/task:1" (or the chief's); "" leaves other nodes unplaced.
  std::string worker_device;
};

absl::Status ApplyReplicaDeviceSetter(const ReplicaDeviceSetterOptions& options,
                                      GraphDef* graph);

// A factory that places every graph it is given with the setter before
// `inner` opens the session (for MonitoredTrainingSession's
// session_factory).
SessionFactory WithReplicaDeviceSetter(SessionFactory inner,
                                       ReplicaDeviceSetterOptions options);

}  // namespace cohort::training

#endif  // COHORT_TRAINING_REPLICA_DEVICE_SETTER_H_
