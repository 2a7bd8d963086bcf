#include "bench/coord/coord_flags.h"

#include "bench/common/flags.h"

namespace cohort::bench {
namespace {

constexpr char kUsage[] =
    "flags: --reps 3 --only rtt,throughput,barrier,register "
    "--client-mode threads|processes|both --sizes 2,8,32,128 --tp-clients "
    "8,64 --seconds 3 --rtt-iters 5000 --rounds N --register-tasks "
    "1024,16384 --tasks-per-process 1024 --heartbeat-interval 10 "
    "--cpu-window 10 "
    "--transport framed|grpc --backend builtin|etcd --etcd-launchers "
    "4,64,512 --quick --peer-script PATH --no-peer";

}  // namespace

bool ParseCoordFlags(const std::vector<std::string>& args, CoordFlags& f,
                     std::string& error) {
  FlagReader flags(args, kUsage);
  // --quick first, so that explicit flags override what it sets.
  if (flags.Has("--quick")) {
    f.reps = 1;
    f.seconds = 1;
    f.rtt_iters = 500;
    f.round_divisor = 5;
  }
  bool quick = false;
  std::string mode;
  while (flags.Next()) {
    if (flags.Is("--quick")) {
      flags.Switch(quick);  // applied above
    } else if (flags.Is("--no-peer")) {
      flags.Switch(f.no_peer);
    } else if (flags.Is("--pipelined")) {
      flags.Switch(f.pipelined);
    } else if (flags.Is("--reps")) {
      flags.PositiveInt(f.reps);
    } else if (flags.Is("--rtt-iters")) {
      flags.PositiveInt(f.rtt_iters);
    } else if (flags.Is("--rounds")) {
      flags.PositiveInt(f.rounds);
    } else if (flags.Is("--register-tasks")) {
      flags.PositiveIntList(f.register_tasks);
    } else if (flags.Is("--tasks-per-process")) {
      flags.PositiveInt(f.tasks_per_process);
    } else if (flags.Is("--heartbeat-interval")) {
      flags.PositiveInt(f.heartbeat_interval_s);
    } else if (flags.Is("--cpu-window")) {
      flags.PositiveInt(f.cpu_window_s);
    } else if (flags.Is("--sim-count")) {
      flags.PositiveInt(f.sim_count);
    } else if (flags.Is("--hold")) {
      flags.PositiveInt(f.hold_s);
    } else if (flags.Is("--backend")) {
      flags.OneOf({"builtin", "etcd"}, f.backend);
    } else if (flags.Is("--etcd-launchers")) {
      flags.PositiveIntList(f.etcd_launchers);
    } else if (flags.Is("--transport")) {
      flags.OneOf({"framed", "grpc"}, f.transport);
    } else if (flags.Is("--task")) {
      flags.NonNegativeInt(f.task);
    } else if (flags.Is("--sizes")) {
      flags.PositiveIntList(f.sizes);
    } else if (flags.Is("--tp-clients")) {
      flags.PositiveIntList(f.tp_clients);
    } else if (flags.Is("--seconds")) {
      flags.PositiveNumber(f.seconds);
    } else if (flags.Is("--only")) {
      flags.SubsetOf({"rtt", "throughput", "barrier", "register"}, f.only);
    } else if (flags.Is("--client-mode")) {
      if (flags.OneOf({"threads", "processes", "both"}, mode)) {
        f.modes = mode == "threads"     ? std::vector<bool>{false}
                  : mode == "processes" ? std::vector<bool>{true}
                                        : std::vector<bool>{false, true};
      }
    } else if (flags.Is("--peer-script")) {
      flags.Value(f.peer_script);
    } else if (flags.Is("--child")) {
      flags.Value(f.child);
    } else if (flags.Is("--coordinator")) {
      flags.Value(f.coordinator);
    } else {
      flags.Unknown();
    }
  }
  error = flags.error();
  return flags.ok();
}

}  // namespace cohort::bench
