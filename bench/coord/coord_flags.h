// The flags of `cohort bench coord` (coord_bench.h lists them) and of its
// child processes.
//
// Thread safety: ParseCoordFlags is reentrant.
#ifndef COHORT_BENCH_COORD_COORD_FLAGS_H_
#define COHORT_BENCH_COORD_COORD_FLAGS_H_

#include <set>
#include <string>
#include <vector>

namespace cohort::bench {

struct CoordFlags {
  int reps = 3;
  std::set<std::string> only = {"rtt", "throughput", "barrier", "register"};
  std::vector<bool> modes = {false, true};  // threads, processes
  std::vector<int> sizes = {2, 8, 32, 128};
  std::vector<int> tp_clients = {8, 64};
  double seconds = 3;
  int rtt_iters = 5000;
  int rounds = 0;  // 0: the peer's rule for each size
  int round_divisor = 1;
  std::vector<int> register_tasks = {1024, 16384};
  // Simulated tasks (simulated_tasks.h) per client process, their heartbeat
  // interval, and the window over which the service's CPU is measured.
  int tasks_per_process = 1024;
  int heartbeat_interval_s = 10;
  int cpu_window_s = 10;
  // "framed" (the fast path, framed_coordination.h) or "grpc".
  std::string transport = "framed";
  // "builtin": the suite above. "etcd": the control plane in a 3-member
  // etcd cluster this run starts (scripts/etcd_local.sh) against the
  // built-in one in the same run: rendezvous of --etcd-launchers launchers
  // and barrier release at --sizes.
  std::string backend = "builtin";
  std::vector<int> etcd_launchers = {4, 64, 512};
  bool no_peer = false;
  std::string peer_script;
  // A child process (client_mode=processes): "barrier" or "throughput".
  std::string child;
  std::string coordinator;
  int task = 0;
  int sim_count = 0;
  bool pipelined = false;
  int hold_s = 0;
};

// Parses `args` into `f` (defaults as above; --quick first lowers reps,
// seconds, iterations and rounds, and explicit flags override it). False
// with `error` set on an unknown flag or a malformed value.
bool ParseCoordFlags(const std::vector<std::string>& args, CoordFlags& f,
                     std::string& error);

}  // namespace cohort::bench

#endif  // COHORT_BENCH_COORD_COORD_FLAGS_H_
