// `cohort bench coord`: the coordination service's benchmark suite, with the
// TCPStore peer (bench/peers/tcpstore_peer.py) in the same run.
//
// Prints JSON lines (docs/architecture.md format, suite "coord") with the
// metric names and params of bench/peers/tcpstore_peer.py where the measurement
// is the same, and the same warm-up:
//   rtt_{set,get,add}_p50/p99, rtt_setget_pair_p50 (us; clients=1,
//       value_bytes=64): one agent, 500 untimed set+get pairs, then --rtt-iters
//       timed rounds of set (InsertKeyValue, overwrite), get (TryGetKeyValue)
//       and add (IncrementKeyValue). Every cohort call waits for its reply;
//       TCPStore's set does not (no reply) and its get is two round trips.
//   throughput (ops/s; clients=8|64, client_mode, op_mix): each client sets
//       its own key once, waits at an untimed start barrier, then alternates
//       set(own key, 64 B) and get(own key) for --seconds; value = all
//       operations / (last client's end - first client's start), the span
//       actually measured (CLOCK_MONOTONIC, comparable across processes).
//       op_mix "set64+get alternating": every set waits for its answer;
//       "set64 pipelined+get alternating": the set is sent without waiting
//       (InsertKeyValueAsync) and its answer, which comes with the get's,
//       is still checked (TCPStore's set gets no answer at all)
//   barrier_release_p50/p99, barrier_cycle_p50 (us; clients=N, client_mode,
//       barrier=cohort, rounds): after an untimed start barrier, N agents
//       pass the named barrier "bench" back to back for rounds =
//       max(20, min(300, 3000 / N)) rounds (the peer's wait-barrier rule);
//       release = last arrival -> last departure of one round, cycle = time
//       between the last departures of consecutive rounds; the first
//       min(2, rounds / 4) rounds are dropped, as the peer does
//   register_barrier_time (s; tasks=1024|16384, client_mode): agents as
//       threads (client_mode=threads, up to 1,024 tasks: two threads per
//       agent) or simulated tasks (client_mode=simulated, every size;
//       simulated_tasks.h: each task makes its agent's calls, with
//       --tasks-per-process tasks per child process on one connection)
//       register and pass one barrier of all tasks (no peer figure)
//   service_cpu_share (cores; tasks, heartbeat_interval_s, window_s): after
//       that barrier, while every simulated task heartbeats each
//       --heartbeat-interval seconds, the CPU time of this process (which
//       runs only the service) over --cpu-window seconds / wall time; then
//       every task must still be connected (no heartbeat missed)
// --backend etcd runs instead (docs/etcd.md):
//   rendezvous_time (s; tasks=4|64|512 (--etcd-launchers), backend=builtin|
//       etcd): n agents (threads) register and pass one barrier of all, first
//       call -> last agent past it, on each control plane in turn
//   barrier_release_p50 (us; clients=--sizes, backend): as above, agents as
//       threads, on each control plane
//   The etcd cluster (3 members, loopback) is started by the run itself
//   with scripts/etcd_local.sh and removed after it; no TCPStore peer runs.
// The service runs in the benchmark process on 127.0.0.1 (port chosen by
// the OS) with a random job token, which every agent presents, as in a real
// job; agents talk to it (over --transport framed, the default, or grpc) as
// threads of this process
// (client_mode=threads) or as child processes (this binary re-executed with
// --child; client_mode=processes), and are compared with TCPStore's threads
// and processes modes respectively.
//
// Peer: after each repetition, bench/peers/tcpstore_peer.py (found in the
// source tree, beside the binary, or at --peer-script) runs once per client
// mode with /usr/bin/python3; its lines are passed through (suite
// "tcpstore", "rep" set to this repetition), and at the end one ratio line
// per compared metric (peer.h) gives median cohort / median TCPStore:
// barriers against both TCPStore barriers (barrier=wait, server-side
// notification; barrier=torch, torch 1.13's 10-ms polling loop).
//
// Exit status: non-zero when any measurement fails (an error line says
// which), including a peer that is missing (torch not installed, script not
// found), crashes or reports an error, unless --no-peer.
//
//   cohort bench coord [--reps 3] [--only rtt,throughput,barrier,register]
//                      [--client-mode threads|processes|both]
//                      [--sizes 2,8,32,128] [--tp-clients 8,64]
//                      [--seconds 3] [--rtt-iters 5000] [--rounds N]
//                      [--register-tasks 1024,16384]
//                      [--tasks-per-process 1024] [--heartbeat-interval 10]
//                      [--cpu-window 10] [--transport framed|grpc] [--quick]
//                      [--peer-script PATH | --no-peer]
#ifndef COHORT_BENCH_COORD_COORD_BENCH_H_
#define COHORT_BENCH_COORD_COORD_BENCH_H_

#include <string>
#include <vector>

namespace cohort::bench {

// Runs the suite with `args` (the flags above); returns the exit code.
int RunCoordBench(const std::vector<std::string>& args);

}  // namespace cohort::bench

#endif  // COHORT_BENCH_COORD_COORD_BENCH_H_
