// `cohort bench recovery`: how long a job takes to train again after one of
// its workers is killed, against torchrun in the same run.
//
// cohort's side, the main job: for each repetition `cohort launch`'s
// library runs train_ps (beside this binary, or --train-ps) as a chief, two
// workers and a ps (4 tasks) under the task restart rule (`--restart task
// --max-restarts 1`), the chief checkpointing every --checkpoint-every
// steps, every task logging each step. Once worker:1 has logged global step
// --kill-step the suite sends SIGKILL to its process (the pid the launcher
// announced) and reads, from the job's output as it is printed:
//   detect_time  ms     from the kill to the launcher's line saying it
//                       restarted the worker alone
//   rejoin_time  ms     from the kill to the restarted worker's first
//                       logged step
//   steps_lost   steps  the last global step logged before the kill, plus
//                       one, minus the restarted worker's first global step
//                       (at least 0): the training the job lost
// (params tasks 4, job "ps", kill_step). The job must then reach --steps
// and succeed, or the repetition is an error line.
//
// Peer (bench/peers/torchrun_recovery_peer.py on /usr/bin/python3 with
// torch): torchrun --standalone --nproc_per_node 4 --max_restarts 3 training
// the same model with DistributedDataParallel on gloo, rank 0 checkpointing
// every --checkpoint-every steps; rank 1 killed at --kill-step; torchrun
// restarts every worker from the checkpoint. Same three metrics. Ratio
// lines (cohort / torchrun, better "lower"): detect_time_ratio,
// rejoin_time_ratio. --no-peer skips it; a peer that cannot run is an error
// line.
//
// Exit status: 0 when every measurement and ratio was printed; non-zero
// otherwise (an error line says which run failed and what to check).
//
//   cohort bench recovery [--reps 3] [--kill-step 120] [--steps 300]
//       [--checkpoint-every 50] [--hidden 1024] [--batch 64]
//       [--train-ps PATH] [--peer-script PATH] [--no-peer]
#ifndef COHORT_BENCH_RECOVERY_RECOVERY_BENCH_H_
#define COHORT_BENCH_RECOVERY_RECOVERY_BENCH_H_

#include <string>
#include <vector>

namespace cohort::bench {

// Runs the suite with `args` (the flags above); returns the exit code.
int RunRecoveryBench(const std::vector<std::string>& args);

}  // namespace cohort::bench

#endif  // COHORT_BENCH_RECOVERY_RECOVERY_BENCH_H_
