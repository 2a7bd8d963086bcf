// `cohort bench runtime`: the distributed runtime's benchmark suite (issue
// 10, "Benchmark"): tensors and steps between real `cohort server`
// processes, driven by a GrpcSession client in the benchmark process.
//
// Every server is this binary re-executed as `cohort server` (own process
// group, 127.0.0.1, a random job token in its environment, default thread
// count); the servers are started once per run and serve every repetition.
// Prints JSON lines (docs/architecture.md format, suite "runtime"); each
// measurement line also carries "loadavg_1m", the machine's 1-minute load
// average when it was taken, and "cpu_us_per_step", the CPU time (user +
// system, from /proc/PID/stat) that the benchmark process and its servers used
// per timed step: on a shared machine the wall time also counts waiting for a
// core, the CPU time does not.
//
//   tensor_transfer_throughput (GB/s = 1e9 bytes/s; bytes = 1, 16, 64 MiB,
//       dtype=float32, tasks=2): cluster {ps:0, worker:0}; a float32
//       variable of `bytes` bytes on ps:0 (filled with 1.0 once, on ps:0,
//       so the graph itself stays small); each step reads it on ps:0
//       (ReadVariableOp, no copy) and sums it on worker:0, so the tensor
//       crosses the processes through Send/Recv and the worker's RecvTensor
//       RPC while the client fetches one float (checked: = element count).
//       Callable (MakeCallable once), 2 untimed steps, then steps back to
//       back for --transfer-seconds (at least --transfer-min-steps);
//       value = bytes x steps / elapsed. Nothing is subtracted: the step's
//       control RPCs and the Sum are inside the time. The line also has
//       "steps" and "step_ms_p50".
//   tcp_bw_recv / tcp_bw_recv_bytes (suite "iperf3"; Gbit/s, GB/s): the
//       peer, one iperf3 TCP stream on loopback for --iperf-seconds, run
//       after cohort's transfers in every repetition (iperf3_peer.h).
//   tensor_transfer_throughput_ratio (x; bytes): median cohort GB/s /
//       median iperf3 GB/s over the repetitions (bench/common ratio line;
//       the target is >= 0.9 at 64 MiB). Not printed with --no-peer.
//   remote_step_p50 / remote_step_p99 (us; bytes=4, tasks=2,
//       path=callable): a float32 scalar fed to a Placeholder on ps:0,
//       doubled on worker:0 and fetched (checked); the Send/Recv edge is
//       the only tensor between the tasks. --warmup untimed then --runs
//       timed RunCallables per repetition (target p50 < 300 us).
//   session_run_overhead_p50 / _p99 (us; nodes=10, path=callable,
//       session=local|grpc): the graph suite's 10-node scalar chain (a
//       Placeholder and nine Add/Mul), through a LocalSession in this
//       process and through a GrpcSession to a one-task `cohort server`
//       child process (cluster {"localhost": ["127.0.0.1:P"]}: what
//       Server::CreateLocal builds, in a process of its own, with a port
//       picked beforehand as `cohort server` refuses port 0); every result
//       is checked. --warmup then --runs timed runs each.
//   step_overhead_vs_local (x; nodes=10, path=callable): median grpc p50 /
//       median local p50, with both medians ("grpc_p50_us",
//       "local_p50_us").
// A line {"suite": "env", "when": "during"} summarises the load average
// sampled every 5 s while the suite ran.
//
// Exit status: non-zero when any measurement fails (a server that does not
// start or does not stop cleanly, a step that fails or returns a wrong
// value, iperf3 missing or failing); the suite prints a line {"suite":
// "runtime", "error": ...} saying which, goes on with the other
// measurements, and prints no ratio for what failed. --no-peer runs without
// iperf3.
//
//   cohort bench runtime [--reps 3] [--only transfer,remote,overhead]
//       [--sizes 1M,16M,64M] [--transfer-seconds 3] [--transfer-min-steps 5]
//       [--runs 5000] [--warmup 500] [--iperf-seconds 5]
//       [--server-threads N] [--no-peer] [--quick]
#ifndef COHORT_BENCH_RUNTIME_RUNTIME_BENCH_H_
#define COHORT_BENCH_RUNTIME_RUNTIME_BENCH_H_

#include <string>
#include <vector>

namespace cohort::bench {

// Runs the suite with `args` (the flags above); returns the exit code.
// Must run inside the `cohort` binary (it re-executes itself as `cohort
// server`).
int RunRuntimeBench(const std::vector<std::string>& args);

}  // namespace cohort::bench

#endif  // COHORT_BENCH_RUNTIME_RUNTIME_BENCH_H_
