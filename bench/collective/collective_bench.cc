#include "bench/collective/collective_bench.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iostream>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "bench/common/flags.h"
#include "bench/common/gang.h"
#include "bench/common/peer.h"
#include "cohort/barrier/barrier_task_context.h"
#include "cohort/base/json.h"
#include "cohort/base/status.h"
#include "cohort/collective/collective_group.h"
#include "cohort/rpc/transport.h"

namespace cohort::bench {
namespace {

struct Flags {
  std::vector<int> sizes = {2, 4};
  std::vector<int> mib = {1, 64};
  std::vector<std::string> transports = {"shm", "tcp"};
  int reps = 3;
  std::string peer_script;
  bool no_peer = false;
  bool child = false;
};

bool ParseFlags(const std::vector<std::string>& args, Flags& f,
                std::string& error) {
  FlagReader flags(args,
                   "flags: --sizes 2,4 --mib 1,64 --transports shm,tcp "
                   "--reps 3 --peer-script PATH --no-peer");
  std::set<std::string> transports;
  while (flags.Next()) {
    if (flags.Is("--child")) {
      flags.Switch(f.child);
    } else if (flags.Is("--no-peer")) {
      flags.Switch(f.no_peer);
    } else if (flags.Is("--peer-script")) {
      flags.Value(f.peer_script);
    } else if (flags.Is("--reps")) {
      flags.PositiveInt(f.reps);
    } else if (flags.Is("--sizes")) {
      flags.PositiveIntList(f.sizes);
    } else if (flags.Is("--mib")) {
      flags.PositiveIntList(f.mib);
    } else if (flags.Is("--transports")) {
      if (flags.SubsetOf({"shm", "tcp"}, transports)) {
        f.transports.assign(transports.begin(), transports.end());
      }
    } else {
      flags.Unknown();
    }
  }
  error = flags.error();
  return flags.ok();
}

// The iteration counts gloo_peer.py uses too.
int ItersFor(int mib) { return mib >= 16 ? 6 : 50; }

absl::Status TimeAllReduce(barrier::BarrierTaskContext& task,
                           collective::CollectiveGroup& group, int mib,
                           const std::string& transport) {
  const size_t count = static_cast<size_t>(mib) << 18;  // float32 per MiB
  std::vector<float> data(count, 1.0f);
  const absl::Duration timeout = absl::Minutes(2);
  const int warmup = 2, iters = ItersFor(mib);
  for (int i = 0; i < warmup; ++i) {
    COHORT_RETURN_IF_ERROR(group.AllReduce(
        data.data(), count, collective::ReduceOp::kSum, absl::Now() + timeout));
  }
  COHORT_RETURN_IF_ERROR(task.Barrier());
  std::vector<double> ms;
  for (int i = 0; i < iters; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    COHORT_RETURN_IF_ERROR(group.AllReduce(
        data.data(), count, collective::ReduceOp::kSum, absl::Now() + timeout));
    ms.push_back(std::chrono::duration<double, std::milli>(
                     std::chrono::steady_clock::now() - t0)
                     .count());
  }
  // k sums of ones over N members: N^k everywhere.
  const double want = std::pow(group.size(), warmup + iters);
  for (size_t i = 0; i < count; ++i) {
    if (data[i] != data[0] || std::abs(data[i] - want) > want * 1e-5) {
      return absl::DataLossError(absl::StrCat(
          "element ", i, " is ", data[i], " after ", warmup + iters,
          " all-reduces where ", want, " is due (", group.tasks()[group.rank()],
          ", ", mib, " MiB over ", transport, ")"));
    }
  }
  if (group.rank() != 0) return absl::OkStatus();
  const int world = group.size();
  const double p50 = Percentile(ms, 50);
  const double algbw = mib * double(1 << 20) / (p50 / 1e3) / 1e9;
  Json params{{"MiB", mib}, {"world", world}, {"transport", transport}};
  PrintChildResult(Json{{"suite", "collective"},
                        {"metric", "allreduce_time_p50"},
                        {"params", params},
                        {"value", Round3(p50)},
                        {"unit", "ms"}});
  PrintChildResult(Json{{"suite", "collective"},
                        {"metric", "allreduce_busbw"},
                        {"params", params},
                        {"value", Round3(algbw * 2 * (world - 1) / world)},
                        {"unit", "GB/s"},
                        {"algbw", Round3(algbw)}});
  return absl::OkStatus();
}

absl::Status RunChildMeasurements(const Flags& f) {
  COHORT_ASSIGN_OR_RETURN(barrier::BarrierTaskContext * task,
                          barrier::BarrierTaskContext::Get());
  const std::string transport = f.transports.at(0);
  collective::GroupOptions o;
  o.name = "bench";
  o.rank = task->partition_id();
  o.size = task->num_tasks();
  o.task = Env::Default()->GetVar("COHORT_TASK_NAME").value_or("");
  o.job_token = Env::Default()->GetVar(rpc::kJobTokenEnvVar).value_or("");
  o.transport = transport == "tcp" ? collective::Transport::kTcp
                                   : collective::Transport::kSharedMemory;
  COHORT_ASSIGN_OR_RETURN(auto group,
                          collective::CollectiveGroup::Create(
                              o, [task](const std::string& mine, absl::Time) {
                                return task->AllGather(mine);
                              }));
  for (int mib : f.mib) {
    COHORT_RETURN_IF_ERROR(TimeAllReduce(*task, *group, mib, transport));
  }
  return absl::OkStatus();
}

bool ComparedGlooMetric(const Json& line) {
  return absl::StartsWith(line.value("metric", ""), "allreduce_");
}

int PrintRatios(const Flags& f, const MeasurementLog& ours,
                const MeasurementLog& gloo) {
  int rc = 0;
  for (int world : f.sizes) {
    for (int mib : f.mib) {
      for (const std::string& t : f.transports) {
        RatioSpec spec{"allreduce_time_p50",
                       {{"MiB", mib}, {"world", world}},
                       "allreduce_time_p50",
                       Json::object(),
                       true,
                       "cohort AllReduce SUM float32 vs torch.distributed "
                       "all_reduce on gloo (TCP loopback)",
                       {{"transport", t}}};
        absl::Status s = PrintRatio("collective", "gloo", ours, gloo, spec);
        if (!s.ok()) {
          PrintErrorLine("collective", "no ratio for allreduce_time_p50: " +
                                           std::string(s.message()));
          rc = 1;
        }
      }
    }
  }
  return rc;
}

}  // namespace

int RunCollectiveBench(const std::vector<std::string>& args) {
  Flags flags;
  std::string error;
  if (!ParseFlags(args, flags, error)) {
    std::cerr << "cohort bench collective: " << error << std::endl;
    return 1;
  }
  if (flags.child) {
    absl::Status s = RunChildMeasurements(flags);
    if (!s.ok()) std::cerr << s << std::endl;
    return s.ok() ? 0 : 1;
  }
  int rc = 0;
  PrintEnvLine("collective", "start");
  PeerRunner peer("gloo", "gloo_peer.py", flags.peer_script);
  peer.set_filter(ComparedGlooMetric);
  bool use_peer = !flags.no_peer;
  if (use_peer) {
    if (absl::Status s = peer.Check(); !s.ok()) {
      PrintErrorLine("gloo", std::string(s.message()));
      rc = 1;
      use_peer = false;
    }
  }
  std::vector<std::string> sizes, mibs;
  for (int n : flags.sizes) sizes.push_back(std::to_string(n));
  for (int n : flags.mib) mibs.push_back(std::to_string(n));
  MeasurementLog ours, gloo;
  for (int rep = 0; rep < flags.reps; ++rep) {
    for (int world : flags.sizes) {
      for (const std::string& t : flags.transports) {
        GangRun run;
        run.suite = "collective";
        run.world = world;
        run.child_args = {"--child", "--transports", t, "--mib",
                          absl::StrJoin(mibs, ",")};
        run.rep = rep;
        run.note = "processes started by cohort launch, one CPU thread each";
        run.error_params = {{"transport", t}};
        if (!RunGang(run, &ours)) rc = 1;
      }
    }
    if (!use_peer) continue;
    // Only the all-reduce, at cohort's sizes.
    absl::Status s = peer.Run(
        {"--world-sizes", absl::StrJoin(sizes, ","), "--reps", "1", "--measure",
         "allreduce", "--mib", absl::StrJoin(mibs, ","), "--deadline", "100"},
        absl::Minutes(10), rep, &gloo);
    if (!s.ok()) {
      PrintErrorLine("gloo", std::string(s.message()), {{"rep", rep}});
      rc = 1;
    }
  }
  if (use_peer && PrintRatios(flags, ours, gloo) != 0) rc = 1;
  PrintEnvLine("collective", "end");
  return rc;
}

}  // namespace cohort::bench
