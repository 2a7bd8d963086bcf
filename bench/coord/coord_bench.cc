#include "bench/coord/coord_bench.h"

#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <functional>
#include <iostream>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "bench/common/peer.h"
#include "bench/coord/child_clients.h"
#include "bench/coord/coord_flags.h"
#include "bench/coord/simulated_tasks.h"
#include "cohort/base/json.h"
#include "cohort/base/logging.h"
#include "cohort/base/status.h"
#include "cohort/base/subprocess.h"
#include "cohort/coord/coordination_agent.h"
#include "cohort/coord/coordination_server.h"
#include "cohort/coord/etcd_coordination_client.h"
#include "cohort/coord/framed_coordination.h"
#include "cohort/coord/grpc_coordination_client.h"
#include "cohort/rpc/frame.h"
#include "cohort/rpc/socket.h"
#include "cohort/rpc/transport.h"

namespace cohort::bench {
namespace {

using coord::CoordinationAgent;
using coord::TaskId;

constexpr char kSuite[] = "coord";
constexpr int kRttWarmup = 500;  // tcpstore_peer.py warms up as much

int64_t MonoNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

std::string ModeName(bool processes) {
  return processes ? "processes" : "threads";
}

// The peer's rounds for its wait barrier: max(20, min(300, 3000 // n)).
int RoundsFor(const CoordFlags& f, int n) {
  if (f.rounds > 0) return f.rounds;
  const int rounds = std::max(20, std::min(300, 3000 / n));
  return std::max(10, rounds / f.round_divisor);
}

// --- the run's context
// ---------------------------------------------------------

struct Bench {
  CoordFlags flags;
  rpc::TransportSecurity security;  // job_token: random, per run
  MeasurementLog ours;
  MeasurementLog peer;
};

void Emit(Bench& b, const std::string& metric, const Json& params, double value,
          const std::string& unit, int rep,
          const Json& extra = Json::object()) {
  Json tagged = params;
  tagged["transport"] = b.flags.transport;
  Json line = {{"suite", kSuite},        {"metric", metric}, {"params", tagged},
               {"value", Round3(value)}, {"unit", unit},     {"rep", rep}};
  for (auto it = extra.begin(); it != extra.end(); ++it) {
    line[it.key()] = it.value();
  }
  b.ours.Print(line);
}

// The target agents use: the framed fast path or the gRPC service.
std::string Target(const Bench& b, const coord::CoordinationServer& server) {
  return b.flags.transport == "framed" ? server.framed_target()
                                       : server.target();
}

absl::StatusOr<std::unique_ptr<CoordinationAgent>> NewAgent(
    const std::string& target, int index,
    const rpc::TransportSecurity& security) {
  coord::CoordinationAgentOptions options;
  options.task = TaskId{"worker", index};
  options.register_timeout = absl::Seconds(60);
  COHORT_ASSIGN_OR_RETURN(auto client,
                          coord::NewCoordinationClient(target, security));
  return CoordinationAgent::Create(options, std::move(client));
}

// --- per-client work (a thread here, or a child process) ---------------------

absl::StatusOr<Json> BarrierClient(CoordinationAgent& agent, int rounds) {
  // Untimed start, like the peer's multiprocessing barrier before its rounds.
  COHORT_RETURN_IF_ERROR(
      agent.WaitAtBarrier("bench_start", absl::Seconds(120)));
  std::vector<int64_t> arrive, depart;
  for (int r = 0; r < rounds; ++r) {
    const int64_t a = MonoNs();
    COHORT_RETURN_IF_ERROR(agent.WaitAtBarrier("bench", absl::Seconds(60)));
    const int64_t d = MonoNs();
    arrive.push_back(a);
    depart.push_back(d);
  }
  return Json{{"arrive", arrive}, {"depart", depart}};
}

// The answers of pipelined sets: how many are outstanding, the first error.
class PipelinedSets {
 public:
  coord::StatusCallback Started() {
    absl::MutexLock lock(&mu_);
    ++outstanding_;
    return [this](absl::Status s) {
      absl::MutexLock lock(&mu_);
      --outstanding_;
      if (error_.ok()) error_ = std::move(s);
    };
  }
  absl::Status error() {
    absl::MutexLock lock(&mu_);
    return error_;
  }
  // Waits for every answer (bounded).
  absl::Status Drain() {
    absl::MutexLock lock(&mu_);
    auto none = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      return outstanding_ == 0;
    };
    if (!mu_.AwaitWithTimeout(absl::Condition(&none), absl::Seconds(30))) {
      return absl::DeadlineExceededError(absl::StrCat(
          outstanding_, " pipelined sets were not answered within 30 s"));
    }
    return error_;
  }

 private:
  absl::Mutex mu_;
  int outstanding_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
};

absl::StatusOr<Json> ThroughputClient(CoordinationAgent& agent, int index,
                                      double seconds, bool pipelined) {
  const std::string key = absl::StrCat("tp/", index);
  const std::string value(64, 'x');
  // The peer's warm-up: one set of the client's key before the start barrier.
  COHORT_RETURN_IF_ERROR(agent.InsertKeyValue(key, value, true));
  COHORT_RETURN_IF_ERROR(agent.WaitAtBarrier("tp_start", absl::Seconds(120)));
  PipelinedSets sets;
  int64_t ops = 0;
  const int64_t t0 = MonoNs();
  const int64_t end = t0 + static_cast<int64_t>(seconds * 1e9);
  int64_t t1 = t0;
  while (t1 < end) {
    if (pipelined) {
      // The set's answer is checked, but not waited for: it comes with the
      // get's.
      agent.InsertKeyValueAsync(key, value, /*allow_overwrite=*/true,
                                sets.Started());
    } else {
      COHORT_RETURN_IF_ERROR(
          agent.InsertKeyValue(key, value, /*allow_overwrite=*/true));
    }
    COHORT_RETURN_IF_ERROR(agent.TryGetKeyValue(key).status());
    COHORT_RETURN_IF_ERROR(sets.error());
    ops += 2;
    t1 = MonoNs();
  }
  COHORT_RETURN_IF_ERROR(sets.Drain());
  // t0: start of this client's first operation; t1: end of its last.
  return Json{{"t0", t0}, {"t1", t1}, {"ops", ops}};
}

// A child of simulated tasks: prints {"passed_ns"} once all passed the
// barrier, then {"heartbeats"} after holding for --hold seconds.
int RunSimChild(const CoordFlags& f, const rpc::TransportSecurity& security) {
  SimulatedTasksOptions options;
  options.target = f.coordinator;
  options.security = security;
  options.first_task = f.task;
  options.num_tasks = f.sim_count;
  options.heartbeat_interval = absl::Seconds(f.heartbeat_interval_s);
  options.hold = absl::Seconds(f.hold_s);
  absl::StatusOr<SimulatedTasksResult> r =
      RunSimulatedTasks(options, [](int64_t passed_ns) {
        std::cout << JsonDump(Json{{"passed_ns", passed_ns}}) << std::endl;
      });
  if (!r.ok()) {
    std::cerr << "coord bench simulated tasks " << f.task << ".."
              << f.task + f.sim_count - 1 << ": " << r.status() << "\n";
    return 1;
  }
  std::cout << JsonDump(Json{{"heartbeats", r->heartbeats}}) << std::endl;
  return 0;
}

int RunChild(const CoordFlags& f) {
  rpc::TransportSecurity security;
  if (const char* token = getenv(rpc::kJobTokenEnvVar)) {
    security.job_token = token;
  }
  if (f.child == "sim") return RunSimChild(f, security);
  auto agent = NewAgent(f.coordinator, f.task, security);
  absl::Status s = agent.ok() ? (*agent)->Connect() : agent.status();
  if (!s.ok()) {
    std::cerr << "coord bench child " << f.task << ": cannot connect to "
              << f.coordinator << ": " << s << "\n";
    return 1;
  }
  absl::StatusOr<Json> out =
      f.child == "barrier"
          ? BarrierClient(**agent, f.rounds)
          : ThroughputClient(**agent, f.task, f.seconds, f.pipelined);
  if (!out.ok()) {
    std::cerr << "coord bench child " << f.task << ": " << out.status() << "\n";
    return 1;
  }
  (*agent)->Shutdown().IgnoreError();
  std::cout << JsonDump(*out) << std::endl;
  return 0;
}

// --- running N clients
// ---------------------------------------------------------

// Runs `n` clients against `server` (threads running `fn`, or child
// processes given `child_args`); returns each one's JSON result. On the
// first failure the server is stopped, so that clients parked at a barrier
// fail at once instead of at their timeout.
absl::StatusOr<std::vector<Json>> RunClients(
    Bench& b, coord::CoordinationServer& server, int n, bool processes,
    const std::vector<std::string>& child_args,
    const std::function<absl::StatusOr<Json>(CoordinationAgent&, int)>& fn) {
  std::vector<Json> results(n);
  const std::string target = Target(b, server);
  if (processes) {
    std::vector<Child> children;
    absl::Status first;
    for (int i = 0; i < n && first.ok(); ++i) {
      std::vector<std::string> args = child_args;
      args.insert(args.end(),
                  {"--coordinator", target, "--task", std::to_string(i)});
      auto child = SpawnChild(args, b.security.job_token);
      if (child.ok()) {
        children.push_back(*std::move(child));
      } else {
        first = child.status();
        server.Stop();
      }
    }
    for (size_t i = 0; i < children.size(); ++i) {
      auto r = CollectChild(children[i], static_cast<int>(i));
      if (r.ok()) {
        results[i] = *r;
      } else if (first.ok()) {
        first = r.status();
        server.Stop();
      }
    }
    if (!first.ok()) return first;
    return results;
  }
  std::vector<absl::Status> statuses(n);
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      auto agent = NewAgent(target, i, b.security);
      absl::Status s = agent.ok() ? (*agent)->Connect() : agent.status();
      if (s.ok()) {
        auto r = fn(**agent, i);
        if (r.ok()) {
          results[i] = *r;
        } else {
          s = r.status();
        }
      }
      if (!s.ok()) {
        statuses[i] = s;
        server.Stop();
        return;
      }
      (*agent)->Shutdown().IgnoreError();
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < n; ++i) {
    if (!statuses[i].ok()) {
      return absl::Status(
          statuses[i].code(),
          absl::StrCat("client thread ", i, ": ", statuses[i].message()));
    }
  }
  return results;
}

absl::StatusOr<std::unique_ptr<coord::CoordinationServer>> StartService(
    const Bench& b, int n,
    absl::Duration heartbeat_timeout = absl::Seconds(10)) {
  coord::CoordinationServerOptions options;
  options.service.jobs = {{"worker", n}};
  options.service.heartbeat_timeout = heartbeat_timeout;
  options.security = b.security;
  options.serve_framed = b.flags.transport == "framed";
  return coord::CoordinationServer::Start(options);
}

// --- the measurements
// ----------------------------------------------------------

absl::Status BenchBarrier(Bench& b, int n, bool processes, int rep) {
  const int rounds = RoundsFor(b.flags, n);
  COHORT_ASSIGN_OR_RETURN(auto server, StartService(b, n));
  auto fn = [rounds](CoordinationAgent& agent, int) {
    return BarrierClient(agent, rounds);
  };
  const std::vector<std::string> child_args = {"--child", "barrier", "--rounds",
                                               std::to_string(rounds)};
  auto run = RunClients(b, *server, n, processes, child_args, fn);
  server->Stop();
  if (!run.ok()) return run.status();
  std::vector<double> release, cycle;  // cycle[r - 1]: round r
  int64_t prev_last_depart = 0;
  for (int r = 0; r < rounds; ++r) {
    int64_t last_arrive = 0, last_depart = 0;
    for (const Json& res : *run) {
      last_arrive = std::max(last_arrive, res["arrive"][r].get<int64_t>());
      last_depart = std::max(last_depart, res["depart"][r].get<int64_t>());
    }
    release.push_back((last_depart - last_arrive) / 1e3);
    if (r > 0) cycle.push_back((last_depart - prev_last_depart) / 1e3);
    prev_last_depart = last_depart;
  }
  // The peer drops min(2, rounds // 4) rounds of start-up skew from both.
  const size_t skip = static_cast<size_t>(std::min(2, rounds / 4));
  release.erase(release.begin(), release.begin() + skip);
  cycle.erase(cycle.begin(), cycle.begin() + std::min(skip, cycle.size()));
  const Json params = {{"barrier", "cohort"},
                       {"client_mode", ModeName(processes)},
                       {"clients", n},
                       {"rounds", rounds}};
  Emit(b, "barrier_release_p50", params, Percentile(release, 50), "us", rep,
       {{"note", "last arrival -> last departure"}});
  Emit(b, "barrier_release_p99", params, Percentile(release, 99), "us", rep);
  Emit(b, "barrier_cycle_p50", params, Percentile(cycle, 50), "us", rep,
       {{"note", "back-to-back barrier period"}});
  return absl::OkStatus();
}

// The two op mixes: each set waits for its answer, or is pipelined with
// the get that follows (InsertKeyValueAsync).
constexpr char kOpMix[] = "set64+get alternating";
constexpr char kPipelinedOpMix[] = "set64 pipelined+get alternating";

absl::Status BenchThroughput(Bench& b, int n, bool processes, bool pipelined,
                             int rep) {
  const double seconds = b.flags.seconds;
  COHORT_ASSIGN_OR_RETURN(auto server, StartService(b, n));
  auto fn = [seconds, pipelined](CoordinationAgent& agent, int i) {
    return ThroughputClient(agent, i, seconds, pipelined);
  };
  std::vector<std::string> child_args = {"--child", "throughput", "--seconds",
                                         absl::StrCat(seconds)};
  if (pipelined) child_args.push_back("--pipelined");
  auto run = RunClients(b, *server, n, processes, child_args, fn);
  server->Stop();
  if (!run.ok()) return run.status();
  int64_t ops = 0, t0 = INT64_MAX, t1 = 0;
  for (const Json& r : *run) {
    ops += r["ops"].get<int64_t>();
    t0 = std::min(t0, r["t0"].get<int64_t>());
    t1 = std::max(t1, r["t1"].get<int64_t>());
  }
  const double span = (t1 - t0) / 1e9;
  if (!(span > 0) || ops == 0) {
    return absl::InternalError(absl::StrCat("throughput with ", n,
                                            " clients measured ", ops,
                                            " operations in ", span, " s"));
  }
  Emit(b, "throughput",
       {{"client_mode", ModeName(processes)},
        {"clients", n},
        {"op_mix", pipelined ? kPipelinedOpMix : kOpMix},
        {"seconds", seconds}},
       ops / span, "ops/s", rep,
       {{"per_client_ops_s", Round3(ops / span / n)},
        {"span_s", Round3(span)},
        {"note",
         "all operations / (last client's end - first client's "
         "start)"}});
  return absl::OkStatus();
}

absl::Status BenchRtt(Bench& b, int rep) {
  const int iters = b.flags.rtt_iters;
  COHORT_ASSIGN_OR_RETURN(auto server, StartService(b, 1));
  COHORT_ASSIGN_OR_RETURN(auto agent,
                          NewAgent(Target(b, *server), 0, b.security));
  COHORT_RETURN_IF_ERROR(agent->Connect());
  const std::string value(64, 'x');
  for (int i = 0; i < kRttWarmup; ++i) {
    COHORT_RETURN_IF_ERROR(agent->InsertKeyValue("rtt", value, true));
    COHORT_RETURN_IF_ERROR(agent->TryGetKeyValue("rtt").status());
  }
  std::vector<double> set, get, add, pair;
  for (int i = 0; i < iters; ++i) {
    const int64_t t0 = MonoNs();
    COHORT_RETURN_IF_ERROR(agent->InsertKeyValue("rtt", value, true));
    const int64_t t1 = MonoNs();
    COHORT_RETURN_IF_ERROR(agent->TryGetKeyValue("rtt").status());
    const int64_t t2 = MonoNs();
    COHORT_RETURN_IF_ERROR(agent->IncrementKeyValue("rtt_ctr", 1).status());
    const int64_t t3 = MonoNs();
    set.push_back((t1 - t0) / 1e3);
    get.push_back((t2 - t1) / 1e3);
    add.push_back((t3 - t2) / 1e3);
    pair.push_back((t2 - t0) / 1e3);
  }
  agent->Shutdown().IgnoreError();
  server->Stop();
  const Json params = {{"clients", 1}, {"value_bytes", 64}, {"iters", iters}};
  Emit(b, "rtt_set_p50", params, Percentile(set, 50), "us", rep);
  Emit(b, "rtt_set_p99", params, Percentile(set, 99), "us", rep);
  Emit(b, "rtt_get_p50", params, Percentile(get, 50), "us", rep);
  Emit(b, "rtt_get_p99", params, Percentile(get, 99), "us", rep);
  Emit(b, "rtt_add_p50", params, Percentile(add, 50), "us", rep);
  Emit(b, "rtt_add_p99", params, Percentile(add, 99), "us", rep);
  Emit(b, "rtt_setget_pair_p50", params, Percentile(pair, 50), "us", rep,
       {{"note", "set then get, summed per iteration"}});
  return absl::OkStatus();
}

absl::Status BenchRegister(Bench& b, int n, int rep) {
  COHORT_ASSIGN_OR_RETURN(auto server, StartService(b, n));
  const int64_t start = MonoNs();
  std::atomic<int64_t> passed_at{0};
  auto fn = [&](CoordinationAgent& agent, int) -> absl::StatusOr<Json> {
    COHORT_RETURN_IF_ERROR(agent.WaitAtBarrier("all", absl::Seconds(120)));
    const int64_t now = MonoNs();
    int64_t prev = passed_at.load();
    while (now > prev && !passed_at.compare_exchange_weak(prev, now)) {
    }
    return Json();
  };
  auto run = RunClients(b, *server, n, /*processes=*/false, {}, fn);
  server->Stop();
  if (!run.ok()) return run.status();
  Emit(b, "register_barrier_time", {{"tasks", n}, {"client_mode", "threads"}},
       (passed_at.load() - start) / 1e9, "s", rep,
       {{"note",
         "start of the first agent thread -> last agent past the "
         "barrier"}});
  return absl::OkStatus();
}

double SelfCpuSeconds() {
  rusage r;
  getrusage(RUSAGE_SELF, &r);
  return r.ru_utime.tv_sec + r.ru_stime.tv_sec +
         (r.ru_utime.tv_usec + r.ru_stime.tv_usec) / 1e6;
}

// `n` simulated tasks (simulated_tasks.h) in child processes of
// --tasks-per-process each register and pass one barrier; then, while all
// heartbeat every --heartbeat-interval, this process (which runs nothing
// but the service) measures its own CPU time over --cpu-window.
absl::Status BenchRegisterSimulated(Bench& b, int n, int rep) {
  const CoordFlags& f = b.flags;
  const absl::Duration interval = absl::Seconds(f.heartbeat_interval_s);
  COHORT_ASSIGN_OR_RETURN(auto server, StartService(b, n, 2 * interval));
  const int per = f.tasks_per_process;
  const int processes = (n + per - 1) / per;
  const int64_t start = MonoNs();
  std::vector<Child> children;
  absl::Status first;
  auto fail = [&](absl::Status s) {
    if (first.ok()) first = std::move(s);
    server->Stop();
  };
  for (int p = 0; p < processes && first.ok(); ++p) {
    const int from = p * per;
    auto child = SpawnChild(
        {"--child", "sim", "--coordinator", Target(b, *server), "--task",
         std::to_string(from), "--sim-count",
         std::to_string(std::min(per, n - from)), "--heartbeat-interval",
         std::to_string(f.heartbeat_interval_s), "--hold",
         std::to_string(f.cpu_window_s + 2)},
        b.security.job_token);
    if (child.ok()) {
      children.push_back(*std::move(child));
    } else {
      fail(child.status());
    }
  }
  std::vector<std::string> buffers(children.size());
  int64_t passed_ns = 0;
  for (size_t i = 0; i < children.size() && first.ok(); ++i) {
    absl::StatusOr<Json> line =
        ParseJson(ReadChildLine(children[i], buffers[i]), "passed line");
    if (!line.ok() || !line->contains("passed_ns")) {
      fail(absl::InternalError(absl::StrCat(
          "simulated-task process ", i,
          " ended before its tasks passed the barrier; its stderr says why")));
      break;
    }
    passed_ns = std::max(passed_ns, (*line)["passed_ns"].get<int64_t>());
  }
  double cpu_share = 0;
  if (first.ok()) {
    const double cpu0 = SelfCpuSeconds();
    const int64_t t0 = MonoNs();
    absl::SleepFor(absl::Seconds(f.cpu_window_s));
    cpu_share = (SelfCpuSeconds() - cpu0) / ((MonoNs() - t0) / 1e9);
  }
  int64_t heartbeats = 0;
  for (size_t i = 0; i < children.size(); ++i) {
    absl::StatusOr<Json> r =
        CollectChild(children[i], static_cast<int>(i), buffers[i]);
    if (!r.ok()) {
      fail(r.status());
    } else if (r->contains("heartbeats")) {
      heartbeats += (*r)["heartbeats"].get<int64_t>();
    }
  }
  // Every task must still be alive: heartbeats kept up for all of them.
  if (first.ok()) {
    std::vector<TaskId> all;
    for (int i = 0; i < n; ++i) all.push_back(TaskId{"worker", i});
    auto states = server->service()->GetTaskState(all);
    if (!states.ok()) {
      fail(states.status());
    } else {
      int dead = 0;
      for (const auto& t : *states)
        dead += t.state != coord::TaskState::kConnected;
      if (dead > 0) {
        fail(absl::InternalError(absl::StrCat(
            dead, " of ", n,
            " simulated tasks were not connected after the heartbeat window "
            "(missed heartbeats?)")));
      }
    }
  }
  server->Stop();
  if (!first.ok()) return first;
  const Json params = {
      {"tasks", n}, {"client_mode", "simulated"}, {"processes", processes}};
  Emit(b, "register_barrier_time", params, (passed_ns - start) / 1e9, "s", rep,
       {{"note",
         "spawn of the first client process -> last simulated task past the "
         "barrier; each task makes its agent's calls (register, error poll, "
         "barrier, heartbeats)"}});
  Emit(b, "service_cpu_share",
       {{"tasks", n},
        {"heartbeat_interval_s", f.heartbeat_interval_s},
        {"window_s", f.cpu_window_s}},
       cpu_share, "cores", rep,
       {{"heartbeats_total", heartbeats},
        {"note",
         "CPU time of the process serving the coordination service / wall "
         "time, while every task heartbeats"}});
  return absl::OkStatus();
}

// --- the peer
// ------------------------------------------------------------------

// Runs tcpstore_peer.py once per client mode for repetition `rep` (rtt,
// which has one client and no mode, only with the first).
int RunPeerRep(Bench& b, PeerRunner& peer, int rep) {
  const CoordFlags& f = b.flags;
  int rc = 0;
  bool first = true;
  for (bool processes : f.modes) {
    std::vector<std::string> only;
    if (first && f.only.count("rtt")) only.push_back("rtt");
    if (f.only.count("throughput")) only.push_back("throughput");
    if (f.only.count("barrier")) only.push_back("barrier");
    first = false;
    if (only.empty()) continue;
    std::vector<std::string> args = {"--reps",
                                     "1",
                                     "--client-mode",
                                     ModeName(processes),
                                     "--only",
                                     absl::StrJoin(only, ","),
                                     "--rtt-iters",
                                     std::to_string(f.rtt_iters),
                                     "--tp-clients",
                                     absl::StrJoin(f.tp_clients, ","),
                                     "--tp-seconds",
                                     absl::StrCat(f.seconds),
                                     "--barrier-clients",
                                     absl::StrJoin(f.sizes, ","),
                                     "--barrier-modes",
                                     "torch,wait"};
    // An explicit --rounds holds for the peer's barriers too; otherwise it
    // uses the same per-size rule as RoundsFor.
    if (f.rounds > 0) {
      args.push_back("--barrier-rounds");
      args.push_back(std::to_string(f.rounds));
    }
    absl::Status s = peer.Run(args, absl::Minutes(15), rep, &b.peer);
    if (!s.ok()) {
      PrintErrorLine("tcpstore", std::string(s.message()),
                     {{"rep", rep}, {"client_mode", ModeName(processes)}});
      rc = 1;
    }
  }
  return rc;
}

int PrintRatios(Bench& b) {
  const CoordFlags& f = b.flags;
  std::vector<RatioSpec> specs;
  if (f.only.count("rtt")) {
    const Json params = {{"clients", 1}, {"value_bytes", 64}};
    const std::string set_note =
        "TCPStore's set sends and returns without a reply; cohort's waits "
        "for the service's answer";
    const std::string get_note =
        "TCPStore's get is two round trips (wait for the key, then get)";
    for (const char* m : {"rtt_set_p50", "rtt_set_p99"}) {
      specs.push_back({m, params, m, Json::object(), true, set_note});
    }
    for (const char* m : {"rtt_get_p50", "rtt_get_p99"}) {
      specs.push_back({m, params, m, Json::object(), true, get_note});
    }
    for (const char* m :
         {"rtt_add_p50", "rtt_add_p99", "rtt_setget_pair_p50"}) {
      specs.push_back({m, params, m, Json::object(), true, ""});
    }
  }
  for (bool processes : f.modes) {
    const std::string mode = ModeName(processes);
    if (f.only.count("throughput")) {
      for (int n : f.tp_clients) {
        for (const char* mix : {kOpMix, kPipelinedOpMix}) {
          specs.push_back({"throughput",
                           {{"clients", n}, {"client_mode", mode}},
                           "throughput",
                           Json::object(),
                           false,
                           mix == kOpMix ? ""
                                         : "cohort's sets are pipelined with "
                                           "the next get and still checked; "
                                           "TCPStore's sets get no answer",
                           {{"op_mix", mix}}});
        }
      }
    }
    if (f.only.count("barrier")) {
      for (int n : f.sizes) {
        for (const char* m : {"barrier_release_p50", "barrier_release_p99",
                              "barrier_cycle_p50"}) {
          for (const char* variant : {"wait", "torch"}) {
            specs.push_back({m,
                             {{"clients", n}, {"client_mode", mode}},
                             m,
                             {{"barrier", variant}},
                             true,
                             ""});
          }
        }
      }
    }
  }
  int rc = 0;
  for (const RatioSpec& spec : specs) {
    absl::Status s = PrintRatio(kSuite, "tcpstore", b.ours, b.peer, spec);
    if (!s.ok()) {
      PrintErrorLine(kSuite, "no ratio for " + spec.metric + ": " +
                                 std::string(s.message()));
      rc = 1;
    }
  }
  return rc;
}

// --- the etcd backend (--backend etcd) ---------------------------------------

// A 3-member etcd cluster for this run (scripts/etcd_local.sh on six free
// loopback ports, in a directory of its own), stopped and removed with it.
class EtcdCluster {
 public:
  static absl::StatusOr<std::unique_ptr<EtcdCluster>> Start() {
    auto c = std::unique_ptr<EtcdCluster>(new EtcdCluster);
    char dir[] = "/tmp/cohort-bench-etcd-XXXXXX";
    if (mkdtemp(dir) == nullptr) return absl::InternalError("mkdtemp failed");
    c->dir_ = dir;
    std::vector<int> ports;
    while (ports.size() < 6) {
      COHORT_ASSIGN_OR_RETURN(int port, rpc::PickFreePort("127.0.0.1"));
      if (std::find(ports.begin(), ports.end(), port) == ports.end()) {
        ports.push_back(port);
      }
    }
    c->ports_ = absl::StrJoin(ports, ",");
    ProgramRun run = c->Script("start");
    if (!run.status.ok()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the benchmark's etcd cluster did not start (", run.status.message(),
          "); scripts/setup.sh installs etcd-server"));
    }
    c->url_ = absl::StrCat("etcd://127.0.0.1:", ports[0],
                           ",127.0.0.1:", ports[1], ",127.0.0.1:", ports[2]);
    return c;
  }
  ~EtcdCluster() { Script("stop"); }
  // A client whose prefix is `prefix` (a fresh one per measurement).
  absl::StatusOr<std::shared_ptr<coord::EtcdClient>> Client(
      const std::string& prefix) const {
    coord::EtcdClientOptions o;
    COHORT_ASSIGN_OR_RETURN(o.target, coord::ParseEtcdUrl(url_ + prefix));
    o.call_timeout = absl::Seconds(30);
    COHORT_ASSIGN_OR_RETURN(std::unique_ptr<coord::EtcdClient> c,
                            coord::EtcdClient::Connect(std::move(o)));
    return std::shared_ptr<coord::EtcdClient>(std::move(c));
  }

 private:
  EtcdCluster() = default;
  ProgramRun Script(const std::string& command) const {
    RunProgramOptions o;
    o.deadline = absl::Seconds(60);
    return RunProgram({"bash", FindRepoFile("scripts/etcd_local.sh"), command,
                       "--dir", dir_, "--ports", ports_},
                      o);
  }
  std::string dir_, ports_, url_;
};

using ClientFactory =
    std::function<absl::StatusOr<std::unique_ptr<coord::CoordinationClient>>()>;

// `n` agents (threads; task worker:i) from `make`, each connecting and then
// running `fn`; their results, or the first error naming its thread.
absl::StatusOr<std::vector<Json>> RunAgents(
    int n, const ClientFactory& make,
    const std::function<absl::StatusOr<Json>(CoordinationAgent&)>& fn) {
  std::vector<Json> results(n);
  std::vector<absl::Status> statuses(n);
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      coord::CoordinationAgentOptions o;
      o.task = TaskId{"worker", i};
      o.register_timeout = absl::Seconds(120);
      absl::Status s;
      absl::StatusOr<std::unique_ptr<coord::CoordinationClient>> client =
          make();
      if (!client.ok()) {
        statuses[i] = client.status();
        return;
      }
      auto agent = CoordinationAgent::Create(o, *std::move(client));
      s = agent.ok() ? (*agent)->Connect() : agent.status();
      if (s.ok()) {
        auto r = fn(**agent);
        if (r.ok()) results[i] = *r;
        s = r.status();
      }
      statuses[i] = s;
      if (agent.ok()) (*agent)->Shutdown().IgnoreError();
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < n; ++i) {
    if (!statuses[i].ok()) {
      return absl::Status(
          statuses[i].code(),
          absl::StrCat("agent thread ", i, ": ", statuses[i].message()));
    }
  }
  return results;
}

// Both control planes, one after the other: the built-in service in this
// process (framed transport) and the etcd cluster.
struct Backends {
  Bench& b;
  const EtcdCluster& etcd;
  // Runs `measure` with a fresh control plane of `n` workers for each
  // backend, naming it.
  absl::Status ForEach(
      int n, const std::string& tag,
      const std::function<absl::Status(const std::string&,
                                       const ClientFactory&)>& measure) {
    {
      COHORT_ASSIGN_OR_RETURN(auto server, StartService(b, n));
      const std::string target = server->framed_target();
      absl::Status s = measure("builtin", [&] {
        return coord::NewCoordinationClient(target, b.security);
      });
      server->Stop();
      COHORT_RETURN_IF_ERROR(s);
    }
    COHORT_ASSIGN_OR_RETURN(
        std::shared_ptr<coord::EtcdClient> client,
        etcd.Client(absl::StrCat("/bench/", tag, "-", MonoNs())));
    coord::EtcdCoordinationOptions o;
    o.space = "launchers/";
    o.jobs = {{"worker", n}};
    o.job_id = coord::JobIdOf(b.security.job_token);
    absl::Status s = measure(
        "etcd", [&] { return coord::NewEtcdCoordinationClient(client, o); });
    client->DeleteDir("").IgnoreError();
    return s;
  }
};

// A launcher's rendezvous, as `cohort launch --engine` makes it: `n` agents
// register and pass the start barrier of all of them; first registration
// call -> last agent past it.
absl::Status BenchEtcdRendezvous(Bench& b, Backends& backends, int n, int rep) {
  return backends.ForEach(
      n, absl::StrCat("rendezvous-", n, "-", rep),
      [&](const std::string& backend, const ClientFactory& make) {
        const int64_t start = MonoNs();
        std::atomic<int64_t> last{0};
        COHORT_RETURN_IF_ERROR(
            RunAgents(n, make,
                      [&](CoordinationAgent& agent) -> absl::StatusOr<Json> {
                        COHORT_RETURN_IF_ERROR(agent.WaitAtBarrier(
                            "cohort/launch/start", absl::Seconds(120)));
                        const int64_t now = MonoNs();
                        int64_t seen = last.load();
                        while (now > seen &&
                               !last.compare_exchange_weak(seen, now)) {
                        }
                        return Json::object();
                      })
                .status());
        Emit(b, "rendezvous_time", {{"tasks", n}, {"backend", backend}},
             (last.load() - start) / 1e9, "s", rep,
             {{"note",
               "n agents (threads) register and pass one barrier of all; "
               "first call -> last agent past it"}});
        return absl::OkStatus();
      });
}

// Barrier release p50 as BenchBarrier measures it, agents as threads.
absl::Status BenchEtcdBarrier(Bench& b, Backends& backends, int n, int rep) {
  const int rounds = RoundsFor(b.flags, n);
  return backends.ForEach(
      n, absl::StrCat("barrier-", n, "-", rep),
      [&](const std::string& backend, const ClientFactory& make) {
        COHORT_ASSIGN_OR_RETURN(
            std::vector<Json> run,
            RunAgents(n, make, [rounds](CoordinationAgent& agent) {
              return BarrierClient(agent, rounds);
            }));
        std::vector<double> release;
        for (int r = std::min(2, rounds / 4); r < rounds; ++r) {
          int64_t last_arrive = 0, last_depart = 0;
          for (const Json& res : run) {
            last_arrive =
                std::max(last_arrive, res["arrive"][r].get<int64_t>());
            last_depart =
                std::max(last_depart, res["depart"][r].get<int64_t>());
          }
          release.push_back((last_depart - last_arrive) / 1e3);
        }
        Emit(b, "barrier_release_p50",
             {{"clients", n},
              {"backend", backend},
              {"rounds", rounds},
              {"client_mode", "threads"}},
             Percentile(release, 50), "us", rep,
             {{"note", "last arrival -> last departure"}});
        return absl::OkStatus();
      });
}

// --backend etcd: both control planes, every repetition.
int RunEtcdComparison(Bench& b) {
  const CoordFlags& f = b.flags;
  int rc = 0;
  absl::StatusOr<std::unique_ptr<EtcdCluster>> etcd = EtcdCluster::Start();
  if (!etcd.ok()) {
    PrintErrorLine(kSuite, std::string(etcd.status().message()));
    return 1;
  }
  Backends backends{b, **etcd};
  for (int rep = 0; rep < f.reps; ++rep) {
    for (int n : f.etcd_launchers) {
      absl::Status s = BenchEtcdRendezvous(b, backends, n, rep);
      if (!s.ok()) {
        PrintErrorLine(kSuite, absl::StrCat("rendezvous: ", s.message()),
                       {{"params", {{"tasks", n}}}, {"rep", rep}});
        rc = 1;
      }
    }
    for (int n : f.sizes) {
      absl::Status s = BenchEtcdBarrier(b, backends, n, rep);
      if (!s.ok()) {
        PrintErrorLine(kSuite, absl::StrCat("barrier: ", s.message()),
                       {{"params", {{"clients", n}}}, {"rep", rep}});
        rc = 1;
      }
    }
  }
  return rc;
}

}  // namespace

int RunCoordBench(const std::vector<std::string>& args) {
  Bench b;
  std::string error;
  if (!ParseCoordFlags(args, b.flags, error)) {
    std::cerr << "cohort bench coord: " << error << std::endl;
    return 2;
  }
  SetMinLogLevel(LogLevel::kWarning);
  const CoordFlags& f = b.flags;
  if (!f.child.empty()) return RunChild(f);

  // Every server of a real job requires a job token; so does this one.
  b.security.job_token = absl::BytesToHexString(rpc::RandomNonce());

  int rc = 0;
  PrintEnvLine(kSuite, "start");
  if (f.backend == "etcd") {
    rc = RunEtcdComparison(b);
    PrintEnvLine(kSuite, "end");
    return rc;
  }
  PeerRunner peer("tcpstore", "tcpstore_peer.py", f.peer_script);
  const bool use_peer = peer.Use(!f.no_peer, &rc);
  auto check = [&](const absl::Status& s, const std::string& what,
                   const Json& params, int rep) {
    if (s.ok()) return;
    PrintErrorLine(kSuite, what + ": " + std::string(s.message()),
                   {{"params", params}, {"rep", rep}});
    rc = 1;
  };
  for (int rep = 0; rep < f.reps; ++rep) {
    if (f.only.count("rtt")) {
      check(BenchRtt(b, rep), "rtt", {{"clients", 1}}, rep);
    }
    if (f.only.count("throughput")) {
      for (bool processes : f.modes) {
        for (int n : f.tp_clients) {
          for (bool pipelined : {false, true}) {
            check(BenchThroughput(b, n, processes, pipelined, rep),
                  "throughput",
                  {{"clients", n},
                   {"client_mode", ModeName(processes)},
                   {"op_mix", pipelined ? kPipelinedOpMix : kOpMix}},
                  rep);
          }
        }
      }
    }
    if (f.only.count("barrier")) {
      for (bool processes : f.modes) {
        for (int n : f.sizes) {
          check(BenchBarrier(b, n, processes, rep), "barrier",
                {{"clients", n}, {"client_mode", ModeName(processes)}}, rep);
        }
      }
    }
    if (f.only.count("register")) {
      for (int n : f.register_tasks) {
        // Agents as threads while threads last (two per agent); simulated
        // tasks in child processes at every size.
        if (n <= 1024) {
          check(BenchRegister(b, n, rep), "register",
                {{"tasks", n}, {"client_mode", "threads"}}, rep);
        }
        check(BenchRegisterSimulated(b, n, rep), "register",
              {{"tasks", n}, {"client_mode", "simulated"}}, rep);
      }
    }
    if (use_peer && RunPeerRep(b, peer, rep) != 0) rc = 1;
  }
  if (use_peer && PrintRatios(b) != 0) rc = 1;
  PrintEnvLine(kSuite, "end");
  return rc;
}

}  // namespace cohort::bench
