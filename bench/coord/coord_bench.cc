#include "bench/coord/coord_bench.h"

#include <spawn.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "cohort/base/json.h"
#include "cohort/base/logging.h"
#include "cohort/base/status.h"
#include "cohort/coord/coordination_agent.h"
#include "cohort/coord/coordination_server.h"
#include "cohort/coord/grpc_coordination_client.h"

extern char** environ;

namespace cohort::bench {
namespace {

using coord::CoordinationAgent;
using coord::TaskId;

int64_t MonoNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

double Pct(std::vector<double> xs, double p) {
  if (xs.empty()) return 0;
  std::sort(xs.begin(), xs.end());
  size_t k = static_cast<size_t>(p / 100.0 * (xs.size() - 1) + 0.5);
  return xs[std::min(k, xs.size() - 1)];
}

void Emit(const std::string& metric, const Json& params, double value,
          const std::string& unit, int rep) {
  nlohmann::ordered_json line;
  line["suite"] = "coord";
  line["metric"] = metric;
  line["params"] = params;
  line["value"] = std::round(value * 1000.0) / 1000.0;
  line["unit"] = unit;
  line["rep"] = rep;
  std::cout << line.dump() << std::endl;
}

struct Flags {
  std::map<std::string, std::string> values;
  std::string Get(const std::string& key, const std::string& def) const {
    auto it = values.find(key);
    return it == values.end() ? def : it->second;
  }
  int GetInt(const std::string& key, int def) const {
    int v;
    return absl::SimpleAtoi(Get(key, ""), &v) ? v : def;
  }
  bool Has(const std::string& key) const { return values.count(key) > 0; }
};

Flags ParseFlags(const std::vector<std::string>& args) {
  Flags flags;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string arg = args[i];
    if (arg.rfind("--", 0) != 0) continue;
    arg = arg.substr(2);
    const size_t eq = arg.find('=');
    if (eq != std::string::npos) {
      flags.values[arg.substr(0, eq)] = arg.substr(eq + 1);
    } else if (i + 1 < args.size() && args[i + 1].rfind("--", 0) != 0) {
      flags.values[arg] = args[++i];
    } else {
      flags.values[arg] = "true";
    }
  }
  return flags;
}

absl::StatusOr<std::unique_ptr<CoordinationAgent>> NewAgent(
    const std::string& target, int index) {
  coord::CoordinationAgentOptions options;
  options.task = TaskId{"worker", index};
  options.register_timeout = absl::Seconds(60);
  auto client = coord::NewGrpcCoordinationClient(target, {});
  if (!client.ok()) return client.status();
  return CoordinationAgent::Create(options, std::move(*client));
}

// --- per-client work (a thread here, or a child process) -------------------

struct BarrierTimes {
  std::vector<int64_t> arrive, depart;
};

absl::StatusOr<BarrierTimes> BarrierClient(CoordinationAgent& agent,
                                           int rounds) {
  BarrierTimes times;
  for (int r = 0; r < rounds; ++r) {
    const int64_t a = MonoNs();
    absl::Status s = agent.WaitAtBarrier("bench", absl::Seconds(60));
    const int64_t d = MonoNs();
    if (!s.ok()) return s;
    times.arrive.push_back(a);
    times.depart.push_back(d);
  }
  return times;
}

absl::StatusOr<int64_t> ThroughputClient(CoordinationAgent& agent, int index,
                                         double seconds) {
  const std::string key = absl::StrCat("tp/", index);
  const std::string value(64, 'x');
  auto s = agent.WaitAtBarrier("tp_start", absl::Seconds(120));
  if (!s.ok()) return s;
  int64_t ops = 0;
  const int64_t end = MonoNs() + static_cast<int64_t>(seconds * 1e9);
  while (MonoNs() < end) {
    s = agent.InsertKeyValue(key, value, /*allow_overwrite=*/true);
    if (!s.ok()) return s;
    auto v = agent.TryGetKeyValue(key);
    if (!v.ok()) return v.status();
    ops += 2;
  }
  return ops;
}

int RunChild(const Flags& flags) {
  const std::string target = flags.Get("coordinator", "");
  const int index = flags.GetInt("task", 0);
  auto agent = NewAgent(target, index);
  if (!agent.ok() || !(*agent)->Connect().ok()) {
    std::cerr << "child " << index << ": cannot connect to " << target << "\n";
    return 1;
  }
  Json out;
  if (flags.Get("child", "") == "barrier") {
    auto times = BarrierClient(**agent, flags.GetInt("rounds", 10));
    if (!times.ok()) {
      std::cerr << "child " << index << ": " << times.status() << "\n";
      return 1;
    }
    out["arrive"] = times->arrive;
    out["depart"] = times->depart;
  } else {
    double seconds = 3;
    if (!absl::SimpleAtod(flags.Get("seconds", "3"), &seconds)) {
      seconds = 3;
    }
    auto ops = ThroughputClient(**agent, index, seconds);
    if (!ops.ok()) {
      std::cerr << "child " << index << ": " << ops.status() << "\n";
      return 1;
    }
    out["ops"] = *ops;
  }
  (*agent)->Shutdown().IgnoreError();
  std::cout << out.dump() << std::endl;
  return 0;
}

// --- running N clients -------------------------------------------------------

struct Child {
  pid_t pid = -1;
  int out_fd = -1;
};

absl::StatusOr<Child> SpawnChild(const std::vector<std::string>& args) {
  int fds[2];
  if (pipe(fds) != 0) return absl::InternalError("pipe failed");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&actions, fds[0]);
  std::vector<std::string> argv_storage = {"/proc/self/exe", "bench", "coord"};
  argv_storage.insert(argv_storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_storage) argv.push_back(a.data());
  argv.push_back(nullptr);
  Child child;
  int rc = posix_spawn(&child.pid, "/proc/self/exe", &actions, nullptr,
                       argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(fds[1]);
  if (rc != 0) {
    close(fds[0]);
    return absl::InternalError("posix_spawn failed");
  }
  child.out_fd = fds[0];
  return child;
}

absl::StatusOr<Json> CollectChild(Child& child) {
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = read(child.out_fd, buf, sizeof(buf))) > 0) out.append(buf, n);
  close(child.out_fd);
  int status = 0;
  waitpid(child.pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return absl::InternalError("benchmark child failed");
  }
  return ParseJson(out, "benchmark child output");
}

// Runs `n` clients; returns each one's JSON result.
absl::StatusOr<std::vector<Json>> RunClients(
    const std::string& target, int n, bool processes,
    const std::vector<std::string>& child_args,
    const std::function<absl::StatusOr<Json>(CoordinationAgent&, int)>& fn) {
  std::vector<Json> results(n);
  if (processes) {
    std::vector<Child> children;
    for (int i = 0; i < n; ++i) {
      std::vector<std::string> args = child_args;
      args.insert(args.end(),
                  {"--coordinator", target, "--task", std::to_string(i)});
      auto child = SpawnChild(args);
      if (!child.ok()) return child.status();
      children.push_back(*child);
    }
    absl::Status first;
    for (int i = 0; i < n; ++i) {
      auto r = CollectChild(children[i]);
      if (!r.ok() && first.ok()) first = r.status();
      if (r.ok()) results[i] = *r;
    }
    if (!first.ok()) return first;
    return results;
  }
  std::vector<absl::Status> statuses(n);
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      auto agent = NewAgent(target, i);
      if (!agent.ok()) {
        statuses[i] = agent.status();
        return;
      }
      statuses[i] = (*agent)->Connect();
      if (!statuses[i].ok()) return;
      auto r = fn(**agent, i);
      if (r.ok()) {
        results[i] = *r;
      } else {
        statuses[i] = r.status();
      }
      (*agent)->Shutdown().IgnoreError();
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& s : statuses) {
    if (!s.ok()) return s;
  }
  return results;
}

absl::StatusOr<std::unique_ptr<coord::CoordinationServer>> StartService(int n) {
  coord::CoordinationServerOptions options;
  options.service.jobs = {{"worker", n}};
  return coord::CoordinationServer::Start(options);
}

absl::Status BenchBarrier(int n, bool processes, int rounds, int rep) {
  COHORT_ASSIGN_OR_RETURN(auto server, StartService(n));
  auto barrier_fn = [rounds](CoordinationAgent& agent,
                             int) -> absl::StatusOr<Json> {
    COHORT_ASSIGN_OR_RETURN(BarrierTimes t, BarrierClient(agent, rounds));
    Json out;
    out["arrive"] = t.arrive;
    out["depart"] = t.depart;
    return out;
  };
  const std::vector<std::string> child_args = {"--child", "barrier", "--rounds",
                                               std::to_string(rounds)};
  auto run = RunClients(server->target(), n, processes, child_args, barrier_fn);
  if (!run.ok()) return run.status();
  std::vector<Json> results = std::move(*run);
  std::vector<double> release, cycle;
  int64_t prev_last_depart = 0;
  for (int r = 0; r < rounds; ++r) {
    int64_t last_arrive = 0, last_depart = 0;
    for (const Json& res : results) {
      last_arrive =
          std::max<int64_t>(last_arrive, res["arrive"][r].get<int64_t>());
      last_depart =
          std::max<int64_t>(last_depart, res["depart"][r].get<int64_t>());
    }
    if (r >= 2) {
      release.push_back((last_depart - last_arrive) / 1e3);
      cycle.push_back((last_depart - prev_last_depart) / 1e3);
    }
    prev_last_depart = last_depart;
  }
  Json params = {{"barrier", "cohort"},
                 {"client_mode", processes ? "processes" : "threads"},
                 {"clients", n},
                 {"rounds", rounds}};
  Emit("barrier_release_p50", params, Pct(release, 50), "us", rep);
  Emit("barrier_release_p99", params, Pct(release, 99), "us", rep);
  Emit("barrier_cycle_p50", params, Pct(cycle, 50), "us", rep);
  server->Stop();
  return absl::OkStatus();
}

absl::Status BenchThroughput(int n, bool processes, double seconds, int rep) {
  COHORT_ASSIGN_OR_RETURN(auto server, StartService(n));
  auto tp_fn = [seconds](CoordinationAgent& agent,
                         int i) -> absl::StatusOr<Json> {
    COHORT_ASSIGN_OR_RETURN(int64_t ops, ThroughputClient(agent, i, seconds));
    Json out;
    out["ops"] = ops;
    return out;
  };
  const std::vector<std::string> child_args = {
      "--child", "throughput", "--seconds", absl::StrCat(seconds)};
  auto run = RunClients(server->target(), n, processes, child_args, tp_fn);
  if (!run.ok()) return run.status();
  std::vector<Json> results = std::move(*run);
  int64_t total = 0;
  for (const Json& r : results) total += r["ops"].get<int64_t>();
  Emit("throughput",
       {{"client_mode", processes ? "processes" : "threads"},
        {"clients", n},
        {"op_mix", "set64+get alternating"},
        {"seconds", seconds}},
       total / seconds, "ops/s", rep);
  server->Stop();
  return absl::OkStatus();
}

absl::Status BenchRtt(int rep, int ops) {
  COHORT_ASSIGN_OR_RETURN(auto server, StartService(1));
  COHORT_ASSIGN_OR_RETURN(auto agent, NewAgent(server->target(), 0));
  COHORT_RETURN_IF_ERROR(agent->Connect());
  const std::string value(64, 'x');
  std::vector<double> add, set, get;
  for (int i = 0; i < ops; ++i) {
    int64_t t0 = MonoNs();
    COHORT_RETURN_IF_ERROR(agent->IncrementKeyValue("counter", 1).status());
    int64_t t1 = MonoNs();
    COHORT_RETURN_IF_ERROR(agent->InsertKeyValue("k", value, true));
    int64_t t2 = MonoNs();
    COHORT_RETURN_IF_ERROR(agent->TryGetKeyValue("k").status());
    int64_t t3 = MonoNs();
    add.push_back((t1 - t0) / 1e3);
    set.push_back((t2 - t1) / 1e3);
    get.push_back((t3 - t2) / 1e3);
  }
  Json params = {{"clients", 1}, {"value_bytes", 64}};
  Emit("rtt_add_p50", params, Pct(add, 50), "us", rep);
  Emit("rtt_add_p99", params, Pct(add, 99), "us", rep);
  Emit("rtt_set_p50", params, Pct(set, 50), "us", rep);
  Emit("rtt_get_p50", params, Pct(get, 50), "us", rep);
  agent->Shutdown().IgnoreError();
  return absl::OkStatus();
}

absl::Status BenchRegister(int n, int rep) {
  COHORT_ASSIGN_OR_RETURN(auto server, StartService(n));
  const int64_t start = MonoNs();
  std::atomic<int64_t> passed_at{0};
  auto fn = [&](CoordinationAgent& agent, int) -> absl::StatusOr<Json> {
    COHORT_RETURN_IF_ERROR(agent.WaitAtBarrier("all", absl::Seconds(120)));
    int64_t now = MonoNs();
    int64_t prev = passed_at.load();
    while (now > prev && !passed_at.compare_exchange_weak(prev, now)) {
    }
    return Json();
  };
  auto run = RunClients(server->target(), n, /*processes=*/false, {}, fn);
  if (!run.ok()) return run.status();
  Emit("register_barrier_time", {{"tasks", n}, {"client_mode", "threads"}},
       (passed_at.load() - start) / 1e9, "s", rep);
  return absl::OkStatus();
}

}  // namespace

int RunCoordBench(const std::vector<std::string>& args) {
  const Flags flags = ParseFlags(args);
  SetMinLogLevel(LogLevel::kWarning);
  if (flags.Has("child")) return RunChild(flags);
  const bool quick = flags.Has("quick");
  const int reps = flags.GetInt("reps", quick ? 1 : 3);
  double seconds = quick ? 1 : 3;
  if (flags.Has("seconds") &&
      !absl::SimpleAtod(flags.Get("seconds", "3"), &seconds)) {
    seconds = 3;
  }
  const std::string only = flags.Get("only", "barrier,throughput,rtt,register");
  const std::string mode = flags.Get("client-mode", "both");
  std::vector<int> sizes;
  for (absl::string_view s :
       absl::StrSplit(flags.Get("sizes", "2,8,32,128"), ',')) {
    int v;
    if (absl::SimpleAtoi(s, &v)) sizes.push_back(v);
  }
  std::vector<bool> modes;
  if (mode == "threads" || mode == "both") modes.push_back(false);
  if (mode == "processes" || mode == "both") modes.push_back(true);
  auto wants = [&](const char* what) {
    return only.find(what) != std::string::npos;
  };
  auto check = [](const absl::Status& s, const std::string& what) {
    if (!s.ok()) {
      Json line = {{"suite", "coord"},
                   {"metric", what},
                   {"error", std::string(s.message())}};
      std::cout << line.dump() << std::endl;
    }
  };
  for (int rep = 0; rep < reps; ++rep) {
    if (wants("rtt")) check(BenchRtt(rep, quick ? 500 : 5000), "rtt");
    if (wants("throughput")) {
      for (bool processes : modes) {
        for (int n : {8, 64}) {
          check(BenchThroughput(n, processes, seconds, rep), "throughput");
        }
      }
    }
    if (wants("barrier")) {
      for (bool processes : modes) {
        for (int n : sizes) {
          int rounds = n <= 8 ? 300 : n <= 32 ? 100 : 30;
          if (quick) rounds = std::max(10, rounds / 5);
          check(BenchBarrier(n, processes, rounds, rep), "barrier");
        }
      }
    }
    if (wants("register")) {
      check(BenchRegister(flags.GetInt("register-tasks", 1024), rep),
            "register");
    }
  }
  return 0;
}

}  // namespace cohort::bench
