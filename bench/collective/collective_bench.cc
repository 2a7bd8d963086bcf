#include "bench/collective/collective_bench.h"

#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "bench/common/flags.h"
#include "bench/common/gang.h"
#include "bench/common/lab.h"
#include "bench/common/peer.h"
#include "cohort/barrier/barrier_task_context.h"
#include "cohort/base/json.h"
#include "cohort/base/status.h"
#include "cohort/base/subprocess.h"
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
  bool lab = false;            // one member per lab host (docs/lab.md)
  std::string rate = "5gbit";  // each lab host's egress cap
  int chunk_kib = 256;         // the TCP ring's piece size (its default)
};

bool ParseFlags(const std::vector<std::string>& args, Flags& f,
                std::string& error) {
  FlagReader flags(args,
                   "flags: --sizes 2,4 --mib 1,64 --transports shm,tcp "
                   "--reps 3 --peer-script PATH --no-peer --lab --rate 5gbit "
                   "--chunk-kib 256");
  std::set<std::string> transports;
  while (flags.Next()) {
    if (flags.Is("--child")) {
      flags.Switch(f.child);
    } else if (flags.Is("--lab")) {
      flags.Switch(f.lab);
    } else if (flags.Is("--rate")) {
      flags.Value(f.rate);
    } else if (flags.Is("--chunk-kib")) {
      flags.PositiveInt(f.chunk_kib);
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
                           const std::string& transport, int chunk_kib) {
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
  if (transport == "tcp") params["chunk_kib"] = chunk_kib;
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

// This member's host as TF_CONFIG names it (the launchers' agreed address
// of its task), so that other hosts reach its ring endpoint; loopback when
// there is none (a gang on this machine).
std::string TaskHost() {
  std::optional<std::string> text = Env::Default()->GetVar("TF_CONFIG");
  if (!text.has_value()) return "127.0.0.1";
  absl::StatusOr<Json> config = ParseJson(*text, "TF_CONFIG");
  if (!config.ok() || !config->contains("task") ||
      !config->contains("cluster")) {
    return "127.0.0.1";
  }
  const Json& task = (*config)["task"];
  const Json& job = (*config)["cluster"][task.value("type", "")];
  const int index = task.value("index", -1);
  if (!job.is_array() || index < 0 || index >= static_cast<int>(job.size()) ||
      !job[index].is_string()) {
    return "127.0.0.1";
  }
  const std::string address = job[index].get<std::string>();
  std::string host = address.substr(0, address.rfind(':'));
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);  // IPv6
  }
  return host;
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
  o.host = TaskHost();
  o.tcp_chunk_bytes = static_cast<size_t>(f.chunk_kib) << 10;
  o.transport = transport == "tcp" ? collective::Transport::kTcp
                                   : collective::Transport::kSharedMemory;
  COHORT_ASSIGN_OR_RETURN(auto group,
                          collective::CollectiveGroup::Create(
                              o, [task](const std::string& mine, absl::Time) {
                                return task->AllGather(mine);
                              }));
  for (int mib : f.mib) {
    COHORT_RETURN_IF_ERROR(
        TimeAllReduce(*task, *group, mib, transport, f.chunk_kib));
  }
  return absl::OkStatus();
}

// The lab's result lines from host 0's output: the launcher prefixes the
// program's lines with its task, the peer prints bare JSON.
std::vector<Json> ResultLines(const std::string& output,
                              const std::string& prefix) {
  std::vector<Json> lines;
  for (absl::string_view l : absl::StrSplit(output, '\n')) {
    if (!absl::StartsWith(l, prefix)) continue;
    absl::StatusOr<Json> j =
        ParseJson(std::string(l.substr(prefix.size())), "a lab result line");
    if (j.ok() && j->contains("metric")) lines.push_back(*std::move(j));
  }
  return lines;
}

// The cohort binary that launches the lab's members: this one, or the one
// beside it.
std::string CohortBinary() {
  const std::string exe = ExecutablePath();
  if (absl::EndsWith(exe, "/cohort")) return exe;
  return exe.substr(0, exe.rfind('/') + 1) + "cohort";
}

// `cohort bench collective --lab`: the members (and gloo's ranks) one per
// lab host, their links capped at --rate, over TCP across the links. Besides
// the times and the ratio to gloo, each world size gets
//   allreduce_bound_fraction  the physical bound 2(N-1)/N * bytes / rate
//                             over the median p50 (1.0: the links are full)
// for cohort and for gloo.
int RunLabBench(const Flags& f) {
  int rc = 0;
  PrintEnvLine("collective", "start");
  absl::StatusOr<double> bps = Lab::RateBitsPerSecond(f.rate);
  if (!bps.ok()) {
    PrintErrorLine("collective", std::string(bps.status().message()));
    return 1;
  }
  PeerRunner peer("gloo", "gloo_peer.py", f.peer_script);
  const bool use_peer = peer.Use(!f.no_peer, &rc);
  std::vector<std::string> mibs;
  for (int n : f.mib) mibs.push_back(std::to_string(n));
  char dir_template[] = "/tmp/cohort-lab-bench.XXXXXX";
  if (mkdtemp(dir_template) == nullptr) {
    PrintErrorLine("collective", "mkdtemp failed for the lab's token file");
    return 1;
  }
  const std::string dir = dir_template;
  MeasurementLog ours, gloo;
  const Json lab_params = {{"transport", "tcp"}, {"lab", f.rate}};
  for (int world : f.sizes) {
    Lab lab;
    if (absl::Status s = lab.Up(world, f.rate); !s.ok()) {
      PrintErrorLine("collective", std::string(s.message()),
                     {{"params", {{"world", world}}}});
      rc = 1;
      break;
    }
    std::vector<std::string> addresses;
    for (int i = 0; i < world; ++i) {
      addresses.push_back(Lab::Address(i) + ":2222");
    }
    const std::string cluster = JsonDump(Json{{"worker", Json(addresses)}});
    for (int rep = 0; rep < f.reps; ++rep) {
      std::vector<std::vector<std::string>> members, ranks;
      const std::string token = absl::StrCat(dir, "/token-", world, "-", rep);
      for (int i = 0; i < world; ++i) {
        std::vector<std::string> argv = {
            "env",
            absl::StrCat("TF_CONFIG={\"cluster\": ", cluster,
                         ", \"task\": {\"type\": \"worker\", \"index\": ", i,
                         "}}"),
            CohortBinary(),
            "launch",
            "--engine",
            "tf_config",
            "--token-file",
            token,
            "--no-progress",
            "--rendezvous-timeout",
            "60",
            "--"};
        for (const std::string& a : SelfCommand("collective")) {
          argv.push_back(a);
        }
        for (const char* a : {"--child", "--transports", "tcp", "--mib"}) {
          argv.push_back(a);
        }
        argv.push_back(absl::StrJoin(mibs, ","));
        argv.push_back("--chunk-kib");
        argv.push_back(std::to_string(f.chunk_kib));
        members.push_back(std::move(argv));
        ranks.push_back({"env", "GLOO_SOCKET_IFNAME=eth0", "/usr/bin/python3",
                         peer.script_path(), "--rank", std::to_string(i),
                         "--master", Lab::Address(0) + ":29500",
                         "--world-sizes", std::to_string(world), "--measure",
                         "allreduce", "--mib", absl::StrJoin(mibs, ","),
                         "--reps", "1", "--deadline", "100"});
      }
      // Runs one side on every host and keeps host 0's result lines.
      auto run = [&](const std::vector<std::vector<std::string>>& argv,
                     const std::string& suite, const std::string& prefix,
                     const std::string& note, MeasurementLog* log) {
        absl::StatusOr<std::vector<std::string>> out =
            lab.RunOnHosts(argv, absl::Minutes(10));
        std::vector<Json> lines =
            out.ok() ? ResultLines((*out)[0], prefix) : std::vector<Json>{};
        if (lines.empty()) {
          PrintErrorLine(suite,
                         out.ok()
                             ? "lab host 0 printed no measurement: " + (*out)[0]
                             : std::string(out.status().message()),
                         {{"params", {{"world", world}}}, {"rep", rep}});
          rc = 1;
        }
        for (Json& l : lines) {
          l["params"].update(lab_params);
          l["rep"] = rep;
          if (!note.empty()) l["note"] = note;
          log->Print(l);
        }
      };
      run(members, "collective", std::string("[worker:0] ") + kResultTag,
          "one member per lab host (network namespace), links capped by tbf",
          &ours);
      if (use_peer) run(ranks, "gloo", "", "", &gloo);
    }
  }
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
  // The bound, and the ratio to gloo, per world size and size.
  for (int world : f.sizes) {
    for (int mib : f.mib) {
      const double bound_ms =
          2.0 * (world - 1) / world * mib * double(1 << 20) * 8 / *bps * 1e3;
      for (auto [log, suite] :
           {std::pair<MeasurementLog*, const char*>{&ours, "collective"},
            {&gloo, "gloo"}}) {
        std::vector<double> p50;
        for (const Json& l : log->lines()) {
          if (l.value("metric", "") == "allreduce_time_p50" &&
              l["params"].value("world", 0) == world &&
              l["params"].value("MiB", 0) == mib) {
            p50.push_back(l.value("value", 0.0));
          }
        }
        if (p50.empty()) continue;
        const double median = Percentile(p50, 50);
        Json line = {{"suite", suite},
                     {"metric", "allreduce_bound_fraction"},
                     {"params",
                      {{"MiB", mib},
                       {"world", world},
                       {"transport", "tcp"},
                       {"lab", f.rate}}},
                     {"value", Round3(bound_ms / median)},
                     {"unit", "fraction"},
                     {"bound_ms", Round3(bound_ms)},
                     {"median_p50_ms", Round3(median)},
                     {"runs", p50.size()}};
        std::cout << JsonDump(line) << std::endl;
      }
      if (!use_peer) continue;
      RatioSpec spec{"allreduce_time_p50",
                     {{"MiB", mib}, {"world", world}, {"lab", f.rate}},
                     "allreduce_time_p50",
                     Json::object(),
                     true,
                     "cohort AllReduce SUM float32 vs torch.distributed "
                     "all_reduce on gloo, one process per lab host",
                     {{"transport", "tcp"}}};
      if (absl::Status s = PrintRatio("collective", "gloo", ours, gloo, spec);
          !s.ok()) {
        PrintErrorLine("collective", "no ratio for allreduce_time_p50: " +
                                         std::string(s.message()));
        rc = 1;
      }
    }
  }
  PrintEnvLine("collective", "end");
  return rc;
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
  if (flags.lab) return RunLabBench(flags);
  int rc = 0;
  PrintEnvLine("collective", "start");
  PeerRunner peer("gloo", "gloo_peer.py", flags.peer_script);
  peer.set_filter(ComparedGlooMetric);
  const bool use_peer = peer.Use(!flags.no_peer, &rc);
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
        run.child_args = {"--child",
                          "--transports",
                          t,
                          "--mib",
                          absl::StrJoin(mibs, ","),
                          "--chunk-kib",
                          std::to_string(flags.chunk_kib)};
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
