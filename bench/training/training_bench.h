// `cohort bench training`: how fast cohort trains, against PyTorch on the
// same model in the same run: synchronous data-parallel training with 1 and
// 2 tasks, and the main job, asynchronous parameter-server training
// (examples/train/train_ps) with 1 ps and 1 or 2 workers.
//
// Data-parallel: for each repetition and task count (default 1, 2),
// `cohort launch`'s library starts that many processes (this binary with
// --child), each running RunDataParallelTraining (training/data_parallel.h)
// with one session thread and OPENBLAS_NUM_THREADS=1, its gradients
// averaged by a collective all-reduce (shared memory by default). The model
// has features * hidden + hidden + hidden * 4 + 4 parameters (default
// 512 x 2048: 1,058,820). Partition 0 prints (suite "training"):
//   examples_per_second   (params tasks, parameters, batch, transport)
//   steps_per_second
// and the suite ends with a scaling line: median examples/s of the largest
// task count over that of one task (value "x", better "higher"). Every run
// checks that the tasks' parameters are bit-identical at the end (the
// training fails otherwise).
//
// Parameter server (ps_job.h): for each repetition and worker count
// (--ps-workers, default 1, 2), the launch library runs train_ps (beside
// this binary, or --train-ps) as 1 ps and N workers, worker:0 the chief,
// with train_ps's defaults (16 -> 1024 -> 1024 -> 4, 1,071,108 parameters,
// plain SGD lr 0.1, one BLAS thread per task) and --batch 64 until the
// global step reaches --ps-steps. Each worker writes when each of its steps
// ended; the suite skips --ps-warmup steps of each worker and counts every
// worker's examples over the span common to all of them (from the end of
// the last worker's warm-up to the end of the first worker's last step):
//   ps_examples_per_second  (params workers, ps, parameters, batch)
//       also heldout_accuracy (the chief's, at the end), global_step,
//       measured_steps, span_seconds, warmup_steps
// --no-ps skips the job and its peer.
//
// Peers, run after each repetition (bench/peers, /usr/bin/python3 with
// torch):
//  - torch_ddp_peer.py trains the data-parallel classifier with PyTorch for
//    the same task counts (DistributedDataParallel on gloo; one process:
//    the plain model): one ratio line per task count,
//    examples_per_second_ratio (cohort / PyTorch, better "higher");
//  - torch_rpc_ps_peer.py runs the ps job's model as a PyTorch parameter
//    server (1 ps + N worker processes over torch.distributed.rpc, one
//    intra-op thread each), with the same steps and warm-up, measured over
//    the common span the same way: one ratio line per worker count,
//    ps_examples_per_second_ratio (cohort / PyTorch, better "higher").
// --no-peer skips both; a peer that cannot run (script or torch missing, a
// failed run) is an error line.
//
// Exit status: 0 when every measurement and every ratio was printed;
// non-zero when any run fails (an error line says which, naming the task
// count or the job's shape and what to check), including a peer that
// cannot run and a ratio with no measurement on one side.
//
//   cohort bench training [--tasks 1,2] [--reps 3] [--steps 60]
//       [--batch 256] [--features 512] [--hidden 2048] [--transport shm|tcp]
//       [--peer-script PATH] [--no-peer]
//       [--ps-workers 1,2] [--ps-steps 1000] [--ps-warmup 10] [--ps-batch 64]
//       [--ps-hidden 1024] [--train-ps PATH] [--ps-peer-script PATH]
//       [--no-ps]
#ifndef COHORT_BENCH_TRAINING_TRAINING_BENCH_H_
#define COHORT_BENCH_TRAINING_TRAINING_BENCH_H_

#include <string>
#include <vector>

namespace cohort::bench {

// Runs the suite with `args` (the flags above); returns the exit code.
int RunTrainingBench(const std::vector<std::string>& args);

}  // namespace cohort::bench

#endif  // COHORT_BENCH_TRAINING_TRAINING_BENCH_H_
