// Synchronous data-parallel training through the distributed runtime: the
// job of data_parallel.h (same data, shards, model, optimizer and flags), as
// TensorFlow's MultiWorkerMirroredStrategy users run it. Under
// RunDistributeCoordinator (INDEPENDENT_WORKER) with
// CollectiveAllReduceStrategy, every chief and worker task
//  1. builds the same graph on its own task's device: the classifier, its
//     gradients each averaged by a CollectiveReduce op in the graph (group
//     key 1, one instance key per tensor, chained by control dependencies
//     so every task issues them in one order), the optimizer update and
//     global_step += 1;
//  2. runs it through MonitoredTrainingSession on its own server (the
//     strategy names the collective group leader; the runtime forms the
//     group, collective_resolver.h): every task initialises; the chief also
//     restores from and saves to the checkpoint directory;
//  3. after every session creation (recoveries included) copies every
//     variable from the chief to the others (CollectiveBcastSend/Recv), so
//     a chief that restored a checkpoint hands that state to all;
//  4. trains until global_step reaches `steps`, each task on its own shard
//     in the order data_parallel.h uses, so both paths compute the same
//     bits; then all-gathers a crc32c of the parameters (a
//     CollectiveGather) and fails naming the tasks that differ.
// The partition of a task is its rank in the group: chief 0, worker i as
// i + 1 (i without a chief).
//
// Errors are Status values naming the task and step; a failure of another
// task comes back from the collective ops (collective/communicator.h).
//
// Thread safety: thread-compatible; blocks until training ends.
#ifndef COHORT_TRAINING_COLLECTIVE_TRAINING_H_
#define COHORT_TRAINING_COLLECTIVE_TRAINING_H_

#include <cstdint>
#include <functional>
#include <ostream>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cohort/distribute/worker_context.h"
#include "cohort/training/data_parallel.h"

namespace cohort::training {

struct CollectiveTrainOptions {
  TrainOptions train;
  // The chief saves a checkpoint every this many global steps (and at the
  // end) into train.checkpoint_dir; 0: only at the end.
  int64_t save_checkpoint_steps = 100;
};

// Trains as the current worker context's task (distribute/worker_context.h);
// FailedPrecondition outside a chief or worker task of a cluster. Progress
// lines go to `log` on the chief. The report's checksum is the parameters'
// crc32c, equal on every task; its rates count the steps after this task's
// first (which registers the graph and forms the group, set-up that
// RunDataParallelTraining does before its clock starts). The session's
// threads: the coordinator's session config
// (intra_op_parallelism_threads sizes each task's server).
absl::StatusOr<TrainReport> RunCollectiveTraining(
    const CollectiveTrainOptions& options, std::ostream& log);

// The whole program of one task: RunDistributeCoordinator (INDEPENDENT_
// WORKER, from TF_CONFIG) with CollectiveAllReduceStrategy, each task's
// server sized to options.train.threads intra-op threads, running
// RunCollectiveTraining and then `report` with its result in each chief and
// worker task. The first error of either is returned.
using CollectiveReportFn = std::function<absl::Status(
    const TrainReport& report, const distribute::WorkerContext& task)>;
absl::Status RunCollectiveTrainingJob(const CollectiveTrainOptions& options,
                                      std::ostream& log,
                                      const CollectiveReportFn& report);

}  // namespace cohort::training

#endif  // COHORT_TRAINING_COLLECTIVE_TRAINING_H_
