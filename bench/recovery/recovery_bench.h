// `cohort bench recovery`: how long a job takes to train again after one of
// its workers is killed, against torchrun in the same run.
//
// cohort's side, two jobs of 4 tasks, each run by `cohort launch`'s library
// with --max-restarts 1, every task logging each step; once the job has
// logged step --kill-step the suite sends SIGKILL to worker:1's process (the
// pid the launcher announced) and reads, from the job's output as it is
// printed:
//   detect_time  ms     from the kill to the job's line saying it knows:
//                       the launcher's restart line (ps job), its line that
//                       worker:1 left the membership (elastic job)
//   rejoin_time  ms     from the kill to the first step completed after it:
//                       the restarted worker's first step (ps job), the
//                       first step of the survivors' new group (elastic)
//   steps_lost   steps  the last step logged before the kill, plus one,
//                       minus that first step (at least 0)
//   member_again_time ms (elastic job) from the kill to the generation in
//                       which the restarted worker:1 trains with the others
//                       again
// The jobs:
//   ps       the main job: train_ps (beside this binary, or --train-ps) as
//            a chief, two workers and a ps under `--restart task`, the chief
//            checkpointing every --checkpoint-every steps (params job "ps",
//            hidden_layers 2);
//   elastic  train_data_parallel (or --train-data-parallel) under `-n 4
//            --elastic 3:4`, 16 -> --hidden -> 4, plain SGD at lr 0.01,
//            --elastic-steps steps (params job "elastic_data_parallel",
//            hidden_layers 1).
// Each job must then reach its last step and succeed, or the repetition is
// an error line.
//
// Peer (bench/peers/torchrun_recovery_peer.py on /usr/bin/python3 with
// torch): torchrun --standalone --nproc_per_node 4 --max_restarts 3 training
// the same model with DistributedDataParallel on gloo, rank 0 checkpointing
// every --checkpoint-every steps; rank 1 killed at --kill-step; torchrun
// restarts every worker from the checkpoint. It runs once per job and rep,
// with that job's model (--hidden-layers 2, then 1). Same three metrics.
// Ratio lines per job (cohort / torchrun, better "lower"): detect_time_ratio,
// rejoin_time_ratio. --no-peer skips it; a peer that cannot run is an error
// line.
//
// Exit status: 0 when every measurement and ratio was printed; non-zero
// otherwise (an error line says which run failed and what to check).
//
//   cohort bench recovery [--reps 3] [--kill-step 120] [--steps 300]
//       [--elastic-steps 4000] [--checkpoint-every 50] [--hidden 1024]
//       [--batch 64] [--train-ps PATH] [--train-data-parallel PATH]
//       [--peer-script PATH] [--no-peer]
#ifndef COHORT_BENCH_RECOVERY_RECOVERY_BENCH_H_
#define COHORT_BENCH_RECOVERY_RECOVERY_BENCH_H_

#include <string>
#include <vector>

namespace cohort::bench {

// Runs the suite with `args` (the flags above); returns the exit code.
int RunRecoveryBench(const std::vector<std::string>& args);

}  // namespace cohort::bench

#endif  // COHORT_BENCH_RECOVERY_RECOVERY_BENCH_H_
