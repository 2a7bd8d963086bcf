// `cohort bench barrier`: latency of barrier execution mode across processes.
//
// For each gang size N (default 2, 4, 8) and repetition, `cohort launch`'s
// library starts N processes (this binary re-executed with --child) against
// a coordinator in this process (its TCP transport), exactly as a user's job
// runs. Partition 0 times back-to-back syncs after a warm-up barrier, like
// bench/peers/gloo_peer.py, and the suite prints JSON lines
// (docs/architecture.md format, suite "barrier") with the peer's metric names
// and params:
//   barrier_p50 / barrier_p99                       (us; world=N)
//   all_gather_object_p50 / all_gather_object_p99   (us; bytes=64, world=N)
//       AllGather of a 64-byte string, the analogue of gloo's
//       all_gather_object(64 B str). Each task's string names it, and every
//       task checks every result of the timed loop (afterwards): each
//       task's string in partition order, or the task fails, and with it
//       the gang.
// Peer: after each repetition (every size), bench/peers/gloo_peer.py (found
// in the source tree, beside the binary, or at --peer-script) runs once for
// the same sizes and iteration counts with /usr/bin/python3; its
// barrier_p*, all_gather_object_p* and
// all_gather_p* lines (all_gather: a 16-element float32 tensor, 64 bytes)
// are passed through (suite "gloo", "rep" set to this repetition). At the
// end, ratio lines (bench/common/peer.h) give median cohort / median gloo for
// barrier_p50/p99, and for AllGather against both all_gather_object
// (pickling, two collectives) and the tensor all_gather (one collective).
//
// Exit status: non-zero when any measurement fails (an error line says
// which): a gang that fails (a wrong gather included; none of its lines is
// printed) or prints nothing, or, unless --no-peer, a peer
// that is missing (torch not installed, script not found), crashes, times
// out or reports an error.
//
//   cohort bench barrier [--sizes 2,4,8] [--reps 3] [--iters 300]
//                        [--gather-iters 200] [--peer-script PATH | --no-peer]
#ifndef COHORT_BENCH_BARRIER_BARRIER_BENCH_H_
#define COHORT_BENCH_BARRIER_BARRIER_BENCH_H_

#include <string>
#include <vector>

#include "absl/status/status.h"

namespace cohort::bench {

// Runs the suite with `args` (the flags above); returns the exit code.
int RunBarrierBench(const std::vector<std::string>& args);

// Partition `id`'s AllGather message in the timed loop: 64 bytes that name
// it.
std::string GatherMessage(int id);

// OK when every result in `all` holds GatherMessage(0..world-1) in
// partition order; DataLoss naming the first call and slot that differ.
absl::Status CheckGathered(const std::vector<std::vector<std::string>>& all,
                           int world);

}  // namespace cohort::bench

#endif  // COHORT_BENCH_BARRIER_BARRIER_BENCH_H_
