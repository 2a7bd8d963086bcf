// `cohort bench collective`: all-reduce time across processes, against
// gloo's in the same run.
//
// For each repetition, world size N (default 2, 4) and transport (shm,
// tcp), `cohort launch`'s library starts N processes (this binary with
// --child); they form a CollectiveGroup (collective/collective_group.h; the
// group resolves through the gang's allGather) and time back-to-back
// AllReduce SUM of float32 buffers of each size after a barrier, exactly
// as bench/peers/gloo_peer.py times torch.distributed.all_reduce: 50
// iterations below 16 MiB and 6 from 16 MiB up, after 2 warm-ups. Partition 0
// prints (suite "collective"):
//   allreduce_time_p50   (ms; MiB, world, transport)
//   allreduce_busbw      (GB/s; algbw * 2(N-1)/N, as the peer)
// Every member checks the result (world^k after k sums of ones) and the
// gang fails if one differs. Then bench/peers/gloo_peer.py runs for the
// same world sizes and MiB; its allreduce lines are passed through (suite
// "gloo"),
// and ratio lines give median cohort / median gloo time for each transport.
//
// Exit status: non-zero when any measurement fails (an error line says
// which), including a missing or failing peer unless --no-peer.
//
//   cohort bench collective [--sizes 2,4] [--mib 1,64] [--transports shm,tcp]
//                           [--reps 3] [--peer-script PATH | --no-peer]
#ifndef COHORT_BENCH_COLLECTIVE_COLLECTIVE_BENCH_H_
#define COHORT_BENCH_COLLECTIVE_COLLECTIVE_BENCH_H_

#include <string>
#include <vector>

namespace cohort::bench {

// Runs the suite with `args` (the flags above); returns the exit code.
int RunCollectiveBench(const std::vector<std::string>& args);

}  // namespace cohort::bench

#endif  // COHORT_BENCH_COLLECTIVE_COLLECTIVE_BENCH_H_
