#include "bench/coord/coord_flags.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"

namespace cohort::bench {
namespace {

constexpr char kUsage[] =
    "flags: --reps 3 --only rtt,throughput,barrier,register "
    "--client-mode threads|processes|both --sizes 2,8,32,128 --tp-clients "
    "8,64 --seconds 3 --rtt-iters 5000 --rounds N --register-tasks "
    "1024,16384 --tasks-per-process 1024 --heartbeat-interval 10 "
    "--cpu-window 10 "
    "--transport framed|grpc --quick --peer-script PATH --no-peer";

bool ParseIntList(const std::string& v, std::vector<int>& out) {
  out.clear();
  for (absl::string_view s : absl::StrSplit(v, ',', absl::SkipEmpty())) {
    int n;
    if (!absl::SimpleAtoi(s, &n) || n <= 0) return false;
    out.push_back(n);
  }
  return !out.empty();
}

}  // namespace

bool ParseCoordFlags(const std::vector<std::string>& args, CoordFlags& f,
                     std::string& error) {
  // --quick first, so that explicit flags override what it sets.
  if (std::find(args.begin(), args.end(), "--quick") != args.end()) {
    f.reps = 1;
    f.seconds = 1;
    f.rtt_iters = 500;
    f.round_divisor = 5;
  }
  for (size_t i = 0; i < args.size(); ++i) {
    std::string a = args[i];
    std::string inline_value;
    bool has_inline = false;
    if (const size_t eq = a.find('=');
        absl::StartsWith(a, "--") && eq != std::string::npos) {
      inline_value = a.substr(eq + 1);
      a = a.substr(0, eq);
      has_inline = true;
    }
    auto value = [&](std::string& out) {
      if (has_inline) {
        out = inline_value;
        return true;
      }
      if (i + 1 >= args.size()) {
        error = a + " needs a value";
        return false;
      }
      out = args[++i];
      return true;
    };
    auto int_value = [&](int& out) {
      std::string v;
      if (!value(v)) return false;
      if (!absl::SimpleAtoi(v, &out) || out <= 0) {
        error = a + " must be a positive integer, got \"" + v + "\"";
        return false;
      }
      return true;
    };
    auto list_value = [&](std::vector<int>& out) {
      std::string v;
      if (!value(v)) return false;
      if (!ParseIntList(v, out)) {
        error = a + " must be positive integers separated by commas, got \"" +
                v + "\"";
        return false;
      }
      return true;
    };
    std::string v;
    if (a == "--quick") {
      // Handled above.
    } else if (a == "--no-peer") {
      f.no_peer = true;
    } else if (a == "--pipelined") {
      f.pipelined = true;
    } else if (a == "--reps") {
      if (!int_value(f.reps)) return false;
    } else if (a == "--rtt-iters") {
      if (!int_value(f.rtt_iters)) return false;
    } else if (a == "--rounds") {
      if (!int_value(f.rounds)) return false;
    } else if (a == "--register-tasks") {
      if (!list_value(f.register_tasks)) return false;
    } else if (a == "--tasks-per-process") {
      if (!int_value(f.tasks_per_process)) return false;
    } else if (a == "--heartbeat-interval") {
      if (!int_value(f.heartbeat_interval_s)) return false;
    } else if (a == "--cpu-window") {
      if (!int_value(f.cpu_window_s)) return false;
    } else if (a == "--sim-count") {
      if (!int_value(f.sim_count)) return false;
    } else if (a == "--hold") {
      if (!int_value(f.hold_s)) return false;
    } else if (a == "--transport") {
      if (!value(v)) return false;
      if (v != "framed" && v != "grpc") {
        error = "--transport is framed or grpc, got \"" + v + "\"";
        return false;
      }
      f.transport = v;
    } else if (a == "--task") {
      if (!value(v) || !absl::SimpleAtoi(v, &f.task)) return false;
    } else if (a == "--sizes") {
      if (!list_value(f.sizes)) return false;
    } else if (a == "--tp-clients") {
      if (!list_value(f.tp_clients)) return false;
    } else if (a == "--seconds") {
      if (!value(v)) return false;
      if (!absl::SimpleAtod(v, &f.seconds) || !(f.seconds > 0)) {
        error = "--seconds must be a positive number, got \"" + v + "\"";
        return false;
      }
    } else if (a == "--only") {
      if (!value(v)) return false;
      f.only.clear();
      for (absl::string_view s : absl::StrSplit(v, ',', absl::SkipEmpty())) {
        if (s != "rtt" && s != "throughput" && s != "barrier" &&
            s != "register") {
          error = "--only takes rtt, throughput, barrier, register; got \"" +
                  std::string(s) + "\"";
          return false;
        }
        f.only.insert(std::string(s));
      }
    } else if (a == "--client-mode") {
      if (!value(v)) return false;
      if (v == "threads") {
        f.modes = {false};
      } else if (v == "processes") {
        f.modes = {true};
      } else if (v == "both") {
        f.modes = {false, true};
      } else {
        error = "--client-mode must be threads, processes or both, got \"" + v +
                "\"";
        return false;
      }
    } else if (a == "--peer-script") {
      if (!value(f.peer_script)) return false;
    } else if (a == "--child") {
      if (!value(f.child)) return false;
    } else if (a == "--coordinator") {
      if (!value(f.coordinator)) return false;
    } else {
      error = "unknown flag \"" + a + "\"; " + kUsage;
      return false;
    }
  }
  return true;
}

}  // namespace cohort::bench
