// `cohort bench barrier`: latency of barrier execution mode across processes.
//
// For each gang size N (default 2, 4, 8) and repetition, `cohort launch`'s
// library starts N processes (this binary re-executed with --child) against
// a coordinator in this process (its TCP transport), exactly as a user's job
// runs. Partition 0 times back-to-back syncs after a warm-up barrier, like
// the peer kit's gloo_bench.py, and the suite prints JSON lines (DESIGN.md
// format, suite "barrier") with the peer kit's metric names and params:
//   barrier_p50 / barrier_p99                       (us; world=N)
//   all_gather_object_p50 / all_gather_object_p99   (us; bytes=64, world=N)
//       AllGather of a 64-byte string, the analogue of gloo's
//       all_gather_object(64 B str)
// Then, when the peer kit and torch are available, it runs
// ../shared/bench-peers/gloo_bench.py for the same sizes in the same run and
// passes its lines through (suite "gloo"); otherwise it prints one line with
// an "error" key saying why.
//
//   cohort bench barrier [--sizes 2,4,8] [--reps 3] [--iters 300]
//                        [--gather-iters 200] [--peer-script PATH | --no-peer]
#ifndef COHORT_BENCH_BARRIER_BARRIER_BENCH_H_
#define COHORT_BENCH_BARRIER_BARRIER_BENCH_H_

#include <string>
#include <vector>

namespace cohort::bench {

// Runs the suite with `args` (the flags above); returns the exit code.
int RunBarrierBench(const std::vector<std::string>& args);

}  // namespace cohort::bench

#endif  // COHORT_BENCH_BARRIER_BARRIER_BENCH_H_
