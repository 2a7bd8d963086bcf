#include "bench/barrier/barrier_bench.h"

#include <stdio.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "bench/common/gang.h"
#include "bench/common/peer.h"
#include "cohort/barrier/barrier_task_context.h"
#include "cohort/base/env.h"
#include "cohort/base/json.h"
#include "cohort/launch/launcher.h"

namespace cohort::bench {
namespace {

struct Flags {
  std::vector<int> sizes = {2, 4, 8};
  int reps = 3;
  int iters = 300;
  int gather_iters = 200;
  std::string peer_script;
  bool no_peer = false;
  bool child = false;
};

bool ParseFlags(const std::vector<std::string>& args, Flags& f,
                std::string& error) {
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&](std::string& out) {
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
    if (a == "--child") {
      f.child = true;
    } else if (a == "--no-peer") {
      f.no_peer = true;
    } else if (a == "--reps") {
      if (!int_value(f.reps)) return false;
    } else if (a == "--iters") {
      if (!int_value(f.iters)) return false;
    } else if (a == "--gather-iters") {
      if (!int_value(f.gather_iters)) return false;
    } else if (a == "--peer-script") {
      if (!value(f.peer_script)) return false;
    } else if (a == "--sizes") {
      std::string v;
      if (!value(v)) return false;
      f.sizes.clear();
      for (absl::string_view s : absl::StrSplit(v, ',')) {
        int n;
        if (!absl::SimpleAtoi(s, &n) || n <= 0) {
          error = "--sizes must be positive integers, got \"" + v + "\"";
          return false;
        }
        f.sizes.push_back(n);
      }
    } else {
      error = "unknown flag \"" + a +
              "\"; flags: --sizes 2,4,8 --reps 3 --iters 300 --gather-iters "
              "200 --peer-script PATH --no-peer";
      return false;
    }
  }
  return true;
}

// One task of the gang: time syncs back to back; partition 0 reports.
int RunChild(const Flags& f) {
  auto ctx = barrier::BarrierTaskContext::Get();
  if (!ctx.ok()) {
    std::cerr << ctx.status().message() << std::endl;
    return 1;
  }
  barrier::BarrierTaskContext& task = **ctx;
  using Clock = std::chrono::steady_clock;
  auto time_loop = [&](int iters, int warmup, auto&& op,
                       std::vector<double>& out) -> absl::Status {
    for (int i = 0; i < warmup; ++i) {
      if (absl::Status s = op(); !s.ok()) return s;
    }
    if (absl::Status s = task.Barrier(); !s.ok()) return s;
    for (int i = 0; i < iters; ++i) {
      const auto t0 = Clock::now();
      if (absl::Status s = op(); !s.ok()) return s;
      out.push_back(
          std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    }
    return absl::OkStatus();
  };
  std::vector<double> barrier_us, gather_us;
  absl::Status s = time_loop(
      f.iters, 20, [&] { return task.Barrier(); }, barrier_us);
  const std::string message(64, 's');
  if (s.ok()) {
    s = time_loop(
        f.gather_iters, 10, [&] { return task.AllGather(message).status(); },
        gather_us);
  }
  if (!s.ok()) {
    std::cerr << s.message() << std::endl;
    return 1;
  }
  if (task.partition_id() != 0) return 0;
  const int world = task.num_tasks();
  auto emit = [&](const char* metric, Json params, double value) {
    params["world"] = world;
    Json line{{"suite", "barrier"},
              {"metric", metric},
              {"params", params},
              {"value", Round3(value)},
              {"unit", "us"}};
    PrintChildResult(line);
  };
  emit("barrier_p50", Json::object(), Percentile(barrier_us, 50));
  emit("barrier_p99", Json::object(), Percentile(barrier_us, 99));
  emit("all_gather_object_p50", Json{{"bytes", 64}}, Percentile(gather_us, 50));
  emit("all_gather_object_p99", Json{{"bytes", 64}}, Percentile(gather_us, 99));
  return 0;
}

// Runs every gang size once for repetition `rep`, printing (and keeping in
// `log`) partition 0's lines. Returns non-zero when a gang failed.
int RunGangs(const Flags& f, int rep, MeasurementLog& log) {
  int rc = 0;
  for (int world : f.sizes) {
    GangRun run;
    run.suite = "barrier";
    run.world = world;
    run.child_args = {"--child", "--iters", std::to_string(f.iters),
                      "--gather-iters", std::to_string(f.gather_iters)};
    run.rep = rep;
    run.note =
        "processes started by cohort launch; TCP transport to the "
        "coordinator in the launcher";
    if (!RunGang(run, &log)) rc = 1;
  }
  return rc;
}

// The metrics of gloo_bench.py this suite compares against.
bool ComparedGlooMetric(const Json& line) {
  const std::string metric = line.value("metric", "");
  return absl::StartsWith(metric, "barrier_p") ||
         absl::StartsWith(metric, "all_gather_object_p") ||
         absl::StartsWith(metric, "all_gather_p");
}

int PrintRatios(const Flags& f, const MeasurementLog& ours,
                const MeasurementLog& gloo) {
  std::vector<RatioSpec> specs;
  for (int world : f.sizes) {
    const Json params = {{"world", world}};
    for (const char* p : {"p50", "p99"}) {
      const std::string barrier = absl::StrCat("barrier_", p);
      const std::string object = absl::StrCat("all_gather_object_", p);
      const std::string tensor = absl::StrCat("all_gather_", p);
      specs.push_back({barrier, params, barrier, Json::object(), true, ""});
      specs.push_back({object,
                       {{"world", world}, {"bytes", 64}},
                       object,
                       Json::object(),
                       true,
                       "cohort AllGather(64-byte string) vs gloo "
                       "all_gather_object(64-byte str): pickling + two "
                       "collectives"});
      specs.push_back({object,
                       {{"world", world}, {"bytes", 64}},
                       tensor,
                       Json::object(),
                       true,
                       "cohort AllGather(64-byte string) vs gloo "
                       "all_gather(16 float32 = 64-byte tensor): one "
                       "collective, no pickling"});
    }
  }
  int rc = 0;
  for (const RatioSpec& spec : specs) {
    absl::Status s = PrintRatio("barrier", "gloo", ours, gloo, spec);
    if (!s.ok()) {
      PrintErrorLine("barrier", "no ratio for " + spec.metric + " vs gloo " +
                                    spec.peer_metric + ": " +
                                    std::string(s.message()));
      rc = 1;
    }
  }
  return rc;
}

}  // namespace

int RunBarrierBench(const std::vector<std::string>& args) {
  Flags flags;
  std::string error;
  if (!ParseFlags(args, flags, error)) {
    std::cerr << "cohort bench barrier: " << error << std::endl;
    return 1;
  }
  if (flags.child) return RunChild(flags);
  int rc = 0;
  PrintEnvLine("barrier", "start");
  PeerRunner peer("gloo", "gloo_bench.py", flags.peer_script);
  peer.set_filter(ComparedGlooMetric);
  bool use_peer = !flags.no_peer;
  if (use_peer) {
    if (absl::Status s = peer.Check(); !s.ok()) {
      PrintErrorLine("gloo", std::string(s.message()));
      rc = 1;
      use_peer = false;
    }
  }
  std::vector<std::string> sizes;
  for (int n : flags.sizes) sizes.push_back(std::to_string(n));
  MeasurementLog ours, gloo;
  // Each repetition: every gang size, then gloo for the same sizes, so that
  // both see the same machine load.
  for (int rep = 0; rep < flags.reps; ++rep) {
    if (RunGangs(flags, rep, ours) != 0) rc = 1;
    if (!use_peer) continue;
    absl::Status s = peer.Run({"--world-sizes", absl::StrJoin(sizes, ","),
                               "--reps", "1", "--deadline", "60"},
                              absl::Minutes(10), rep, &gloo);
    if (!s.ok()) {
      PrintErrorLine("gloo", std::string(s.message()), {{"rep", rep}});
      rc = 1;
    }
  }
  if (use_peer && PrintRatios(flags, ours, gloo) != 0) rc = 1;
  PrintEnvLine("barrier", "end");
  return rc;
}

}  // namespace cohort::bench
