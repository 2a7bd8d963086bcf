// `cohort bench training`: how synchronous data-parallel training scales
// from one task to two on this machine.
//
// For each repetition and task count (default 1, 2), `cohort launch`'s
// library starts that many processes (this binary with --child), each
// running RunDataParallelTraining (training/data_parallel.h) with one
// session thread and OPENBLAS_NUM_THREADS=1, its gradients averaged by a
// collective all-reduce (shared memory by default). The model has
// features * hidden + hidden + hidden * 4 + 4 parameters (default
// 512 x 2048: 1,059,844). Partition 0 prints (suite "training"):
//   examples_per_second   (params tasks, parameters, batch, transport)
//   steps_per_second
// and the suite ends with a scaling line: median examples/s of the largest
// task count over that of one task (value "x", better "higher"). Every run
// checks that the tasks' parameters are bit-identical at the end (the
// training fails otherwise).
//
// Peer: after each repetition, bench/peers/torch_ddp_peer.py trains the same
// classifier with PyTorch for the same task counts (DistributedDataParallel
// on gloo; one process: the plain model), and the suite ends with one ratio
// line per task count, examples_per_second_ratio (cohort / PyTorch, better
// "higher"). --no-peer skips it; a peer that cannot run is an error.
//
// Exit status: non-zero when any run fails (an error line says which).
//
//   cohort bench training [--tasks 1,2] [--reps 3] [--steps 60]
//       [--batch 256] [--features 512] [--hidden 2048] [--transport shm|tcp]
//       [--peer-script PATH] [--no-peer]
#ifndef COHORT_BENCH_TRAINING_TRAINING_BENCH_H_
#define COHORT_BENCH_TRAINING_TRAINING_BENCH_H_

#include <string>
#include <vector>

namespace cohort::bench {

// Runs the suite with `args` (the flags above); returns the exit code.
int RunTrainingBench(const std::vector<std::string>& args);

}  // namespace cohort::bench

#endif  // COHORT_BENCH_TRAINING_TRAINING_BENCH_H_
