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
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "bench/common/flags.h"
#include "bench/common/gang.h"
#include "bench/common/peer.h"
#include "cohort/barrier/barrier_task_context.h"
#include "cohort/base/env.h"
#include "cohort/base/json.h"
#include "cohort/launch/launcher.h"

namespace cohort::bench {

std::string GatherMessage(int id) {
  std::string m = absl::StrCat("partition ", id, " ");
  m.resize(64, 's');
  return m;
}

absl::Status CheckGathered(const std::vector<std::vector<std::string>>& all,
                           int world) {
  for (size_t call = 0; call < all.size(); ++call) {
    const std::vector<std::string>& got = all[call];
    if (got.size() != static_cast<size_t>(world)) {
      return absl::DataLossError(
          absl::StrCat("AllGather call ", call, " returned ", got.size(),
                       " messages in a gang of ", world));
    }
    for (int id = 0; id < world; ++id) {
      if (got[id] != GatherMessage(id)) {
        return absl::DataLossError(absl::StrCat(
            "AllGather call ", call, ": slot ", id, " holds \"", got[id],
            "\" where partition ", id, "'s message \"", GatherMessage(id),
            "\" is due; the barrier coordinator mixed up messages"));
      }
    }
  }
  return absl::OkStatus();
}

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
  FlagReader flags(args,
                   "flags: --sizes 2,4,8 --reps 3 --iters 300 --gather-iters "
                   "200 --peer-script PATH --no-peer");
  while (flags.Next()) {
    if (flags.Is("--child")) {
      flags.Switch(f.child);
    } else if (flags.Is("--no-peer")) {
      flags.Switch(f.no_peer);
    } else if (flags.Is("--reps")) {
      flags.PositiveInt(f.reps);
    } else if (flags.Is("--iters")) {
      flags.PositiveInt(f.iters);
    } else if (flags.Is("--gather-iters")) {
      flags.PositiveInt(f.gather_iters);
    } else if (flags.Is("--peer-script")) {
      flags.Value(f.peer_script);
    } else if (flags.Is("--sizes")) {
      flags.PositiveIntList(f.sizes);
    } else {
      flags.Unknown();
    }
  }
  error = flags.error();
  return flags.ok();
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
  // Each task's 64-byte message names it, so that a gather that drops,
  // repeats or reorders a message is caught. Every result of the timed
  // loop is kept (a move, inside the timing) and checked after it.
  const std::string message = GatherMessage(task.partition_id());
  std::vector<std::vector<std::string>> gathered;
  gathered.reserve(f.gather_iters + 10);
  if (s.ok()) {
    s = time_loop(
        f.gather_iters, 10,
        [&]() -> absl::Status {
          absl::StatusOr<std::vector<std::string>> all =
              task.AllGather(message);
          if (!all.ok()) return all.status();
          gathered.push_back(*std::move(all));
          return absl::OkStatus();
        },
        gather_us);
  }
  if (s.ok()) s = CheckGathered(gathered, task.num_tasks());
  if (!s.ok()) {
    std::cerr << "partition " << task.partition_id() << ": " << s.message()
              << std::endl;
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

// The metrics of gloo_peer.py this suite compares against.
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
  PeerRunner peer("gloo", "gloo_peer.py", flags.peer_script);
  peer.set_filter(ComparedGlooMetric);
  const bool use_peer = peer.Use(!flags.no_peer, &rc);
  std::vector<std::string> sizes;
  for (int n : flags.sizes) sizes.push_back(std::to_string(n));
  MeasurementLog ours, gloo;
  // Each repetition: every gang size, then gloo for the same sizes, so that
  // both see the same machine load.
  for (int rep = 0; rep < flags.reps; ++rep) {
    if (RunGangs(flags, rep, ours) != 0) rc = 1;
    if (!use_peer) continue;
    // Only what the ratios compare, with cohort's iteration counts.
    absl::Status s =
        peer.Run({"--world-sizes", absl::StrJoin(sizes, ","), "--reps", "1",
                  "--measure", "barrier,all_gather_object,all_gather",
                  "--iters", std::to_string(flags.iters), "--gather-iters",
                  std::to_string(flags.gather_iters), "--deadline", "60"},
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
