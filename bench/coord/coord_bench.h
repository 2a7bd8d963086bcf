// `cohort bench coord`: the coordination service's benchmark suite.
//
// Prints JSON lines (DESIGN.md format, suite "coord") with the metric names
// and params of ../shared/bench-peers/tcpstore_bench.py where the
// measurement is the same:
//   barrier_release_p50/p99, barrier_cycle_p50   (us; clients=N,
//       client_mode=threads|processes, barrier=cohort): release = last
//       arrival -> last departure of one barrier round (CLOCK_MONOTONIC)
//   throughput (ops/s; clients=8|64): each client alternates set(own key,
//       64 B) and get(own key) for `seconds`
//   rtt_add_p50/p99, rtt_set_p50, rtt_get_p50 (us; clients=1)
//   register_barrier_time (s; tasks=1024): 1,024 agents (threads) register
//       and pass one barrier
// The service runs in the benchmark process on 127.0.0.1 (port chosen by
// the OS); agents talk to it over gRPC, as threads of this process or as
// child processes (this binary re-executed with --child).
//
//   cohort bench coord [--reps 3] [--only barrier,throughput,rtt,register]
//                      [--client-mode threads|processes|both]
//                      [--sizes 2,8,32,128] [--seconds 3] [--quick]
#ifndef COHORT_BENCH_COORD_COORD_BENCH_H_
#define COHORT_BENCH_COORD_COORD_BENCH_H_

#include <string>
#include <vector>

namespace cohort::bench {

// Runs the suite with `args` (the flags above); returns the exit code.
int RunCoordBench(const std::vector<std::string>& args);

}  // namespace cohort::bench

#endif  // COHORT_BENCH_COORD_COORD_BENCH_H_
