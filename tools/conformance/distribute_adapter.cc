// Adapters for the distribute coordinator cases (docs/distribute.md):
// "DistributeCoordinator" and
// "DistributeCoordinator.run_standard_tensorflow_server".
//
// These cases have no `calls` script: the adapter runs the coordinator as
// TensorFlow's distribute_coordinator_test does and returns one step whose
// value is an object of observations, which the runner compares with the
// case's `expect` keys (main.cc, "observation cases"):
//   worker_fn_calls      calls of the recording worker_fn (and of eval_fn,
//                        which defaults to it)
//   contexts             {task_type or "None": [[master_target, num_workers,
//                        is_chief, distributed_mode], ...]} by task id
//   has_barrier          whether any context had a barrier
//   strategy_properties  {type: [[should_init, should_checkpoint,
//                        should_save_summary], ...]} read through the context
//   std_servers          {type: {started, joined: [by task id]}}
//   std_server_session_config, std_server_rpc_layer, server_kind,
//   ps_task_joins_server, session_creator_session_config (the last call's
//   context config), worker_fn_session_config, eval_fn_session_config,
//   std_server_args, server_started
// Input: mode, strategy / eval_strategy ({between_graph, should_init,
// should_checkpoint, should_save_summary}; the `strategy_mock` note's
// "MockStrategy(k=V, ...)" arguments fill what is unset), cluster_spec,
// task_type, task_id, rpc_layer (null = none; absent = "grpc"),
// session_config, worker_fn / eval_fn (null = not passed), env.
// INDEPENDENT_WORKER without a task_type runs one coordinator per task of
// the cluster, each on its own thread; otherwise one coordinator runs.
// Standard servers are RecordingStdServerFactory's (nothing listens).
#include <atomic>
#include <map>
#include <regex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "cohort/cluster/multi_worker_util.h"
#include "cohort/distribute/distribute_coordinator.h"
#include "cohort/distribute/std_server.h"
#include "cohort/distribute/testing.h"
#include "tools/conformance/adapters.h"

namespace cohort::conformance {
namespace {

using distribute::CurrentWorkerContext;
using distribute::DistributeCoordinatorOptions;
using distribute::MockStrategy;
using distribute::RecordingStdServerFactory;
using distribute::StdServer;
using distribute::Strategy;
using distribute::WorkerContext;

Json ConfigToJson(const ConfigProto& config) {
  Json out = Json::object();
  out["intra_op_parallelism_threads"] = config.intra_op_parallelism_threads();
  out["inter_op_parallelism_threads"] = config.inter_op_parallelism_threads();
  out["device_filters"] = Json::array();
  for (const std::string& f : config.device_filters()) {
    out["device_filters"].push_back(f);
  }
  out["allow_soft_placement"] = config.allow_soft_placement();
  out["collective_group_leader"] =
      config.experimental().collective_group_leader();
  return out;
}

absl::StatusOr<ConfigProto> ConfigFromJson(const Json& json) {
  ConfigProto config;
  if (json.is_null()) return config;
  if (!json.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat("case field \"session_config\" must be an object, got ",
                     JsonPreview(json)));
  }
  for (const auto& [key, value] : json.items()) {
    if (key == "intra_op_parallelism_threads" && value.is_number_integer()) {
      config.set_intra_op_parallelism_threads(value.get<int>());
    } else if (key == "inter_op_parallelism_threads" &&
               value.is_number_integer()) {
      config.set_inter_op_parallelism_threads(value.get<int>());
    } else if (key == "allow_soft_placement" && value.is_boolean()) {
      config.set_allow_soft_placement(value.get<bool>());
    } else if (key == "device_filters" && value.is_array()) {
      for (const Json& f : value) {
        if (f.is_string()) config.add_device_filters(f.get<std::string>());
      }
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("session_config field \"", key,
                       "\" is not supported by the adapter"));
    }
  }
  return config;
}

// The MockStrategy of a case: `spec` ({between_graph, should_*}, or null
// for none), unset properties from the note's "MockStrategy(k=V, ...)".
std::unique_ptr<Strategy> BuildStrategy(const Json& spec,
                                        const std::string& mock_note) {
  if (!spec.is_object()) return nullptr;
  std::map<std::string, bool> kwargs;
  std::smatch call;
  if (std::regex_search(mock_note, call,
                        std::regex(R"(MockStrategy\(([^)]*)\))"))) {
    const std::string args = call[1].str();
    std::regex kv(R"((\w+)\s*=\s*(True|False))");
    for (auto it = std::sregex_iterator(args.begin(), args.end(), kv);
         it != std::sregex_iterator(); ++it) {
      kwargs[(*it)[1].str()] = (*it)[2].str() == "True";
    }
  }
  auto prop = [&](const char* key) -> std::optional<bool> {
    if (spec.contains(key) && spec[key].is_boolean())
      return spec[key].get<bool>();
    auto it = kwargs.find(key);
    if (it != kwargs.end()) return it->second;
    return std::nullopt;
  };
  return std::make_unique<MockStrategy>(
      prop("between_graph").value_or(true), prop("should_init"),
      prop("should_checkpoint"), prop("should_save_summary"));
}

// What the recording worker_fn / eval_fn saw.
class Observer {
 public:
  distribute::WorkerFn Fn() {
    return [this](const Strategy*) {
      const WorkerContext* c = CurrentWorkerContext();
      absl::MutexLock lock(&mu_);
      ++calls_;
      const std::string key = c->task_type().empty() ? "None" : c->task_type();
      Json props = Json::array();
      if (c->strategy() == nullptr) {
        props = {nullptr, nullptr, nullptr};
      } else {
        props = {c->experimental_should_init(), c->should_checkpoint(),
                 c->should_save_summary()};
      }
      entries_[key][c->task_id()].push_back(
          {Json::array({c->master_target(), c->num_workers(), c->is_chief(),
                        c->distributed_mode()}),
           props});
      has_barrier_ = has_barrier_ || c->has_barrier();
      last_config_ = ConfigToJson(c->session_config());
      if (c->task_type() == "evaluator") {
        eval_config_ = last_config_;
      } else {
        worker_config_ = last_config_;
      }
      return absl::OkStatus();
    };
  }

  void Report(Json& out) {
    absl::MutexLock lock(&mu_);
    out["worker_fn_calls"] = calls_;
    out["has_barrier"] = has_barrier_;
    Json contexts = Json::object(), properties = Json::object();
    for (const auto& [type, by_id] : entries_) {
      contexts[type] = Json::array();
      properties[type] = Json::array();
      for (const auto& [id, list] : by_id) {
        for (const auto& [tuple, props] : list) {
          contexts[type].push_back(tuple);
          properties[type].push_back(props);
        }
      }
    }
    out["contexts"] = contexts;
    out["strategy_properties"] = properties;
    if (!last_config_.is_null()) {
      out["session_creator_session_config"] = last_config_;
    }
    if (!worker_config_.is_null()) {
      out["worker_fn_session_config"] = worker_config_;
    }
    if (!eval_config_.is_null()) out["eval_fn_session_config"] = eval_config_;
  }

 private:
  absl::Mutex mu_;
  int calls_ ABSL_GUARDED_BY(mu_) = 0;
  bool has_barrier_ ABSL_GUARDED_BY(mu_) = false;
  // type -> task id -> [(context tuple, strategy properties)]
  std::map<std::string, std::map<int, std::vector<std::pair<Json, Json>>>>
      entries_ ABSL_GUARDED_BY(mu_);
  Json last_config_ ABSL_GUARDED_BY(mu_);
  Json worker_config_ ABSL_GUARDED_BY(mu_);
  Json eval_config_ ABSL_GUARDED_BY(mu_);
};

// Servers the coordinators started, for stopping the ones that join
// forever (the Google fake) and for `server_kind`.
class ServerLog {
 public:
  void Add(StdServer* server) {
    absl::MutexLock lock(&mu_);
    servers_.push_back(server);
    if (kind_.empty()) kind_ = server->description();
  }
  void StopAll() {
    absl::MutexLock lock(&mu_);
    for (StdServer* s : servers_) s->Stop();
  }
  std::string kind() {
    absl::MutexLock lock(&mu_);
    return kind_;
  }
  // Whether a task got the Google environment's fake server, whose Join
  // sleeps on the clock until stopped.
  bool HasGoogleFake() {
    absl::MutexLock lock(&mu_);
    for (StdServer* s : servers_) {
      if (dynamic_cast<distribute::GoogleFakeServer*>(s) != nullptr)
        return true;
    }
    return false;
  }

 private:
  absl::Mutex mu_;
  std::vector<StdServer*> servers_ ABSL_GUARDED_BY(mu_);
  std::string kind_ ABSL_GUARDED_BY(mu_);
};

// Runs `fns` on threads. A thread that joined the Google fake server (which
// sleeps on the fake clock in a loop) is recorded in `*slept` once it parks
// there, and its server stopped so that it returns. Other waits on the fake
// clock are left alone (a hung case is ctest's timeout).
absl::Status RunAll(const std::vector<std::function<absl::Status()>>& fns,
                    FakeEnv* env, ServerLog* servers, bool* slept) {
  absl::Mutex mu;
  absl::Status first;
  std::atomic<int> done{0};
  std::vector<std::thread> threads;
  for (const auto& fn : fns) {
    threads.emplace_back([&, fn] {
      absl::Status s = fn();
      absl::MutexLock lock(&mu);
      if (first.ok()) first = s;
      done.fetch_add(1);
    });
  }
  const int n = static_cast<int>(fns.size());
  while (done.load() < n) {
    if (env->BlockUntilParked(1, absl::Milliseconds(20)) &&
        servers->HasGoogleFake()) {
      *slept = true;
      servers->StopAll();
      env->AdvanceTime(absl::Seconds(5));
    }
  }
  for (std::thread& t : threads) t.join();
  absl::MutexLock lock(&mu);
  return first;
}

class DistributeCoordinatorAdapter : public Adapter {
 public:
  CaseRun Run(const Json& test_case, CaseContext& ctx) const override {
    CaseRun run;
    run.steps.push_back(RunCase(Field(test_case, "input"), ctx));
    return run;
  }

 private:
  static StepOutcome RunCase(const Json& input, CaseContext& ctx) {
    const std::string mode_name = Field(input, "mode").is_string()
                                      ? Field(input, "mode").get<std::string>()
                                      : "STANDALONE_CLIENT";
    absl::StatusOr<distribute::CoordinatorMode> mode =
        distribute::ParseCoordinatorMode(mode_name);
    if (!mode.ok()) return StepOutcome::Error(mode.status());
    const std::string note =
        Field(input, "strategy_mock").is_string()
            ? Field(input, "strategy_mock").get<std::string>()
            : "";
    std::unique_ptr<Strategy> strategy =
        BuildStrategy(Field(input, "strategy"), note);
    std::unique_ptr<Strategy> eval_strategy =
        BuildStrategy(Field(input, "eval_strategy"), note);

    RecordingStdServerFactory factory;
    Observer observer;
    ServerLog servers;
    DistributeCoordinatorOptions o;
    o.mode = *mode;
    o.strategy = strategy.get();
    o.eval_strategy = eval_strategy.get();
    o.env = ctx.env();
    o.server_factory = &factory;
    o.on_std_server = [&servers](StdServer* s) { servers.Add(s); };
    if (!(input.contains("worker_fn") && input["worker_fn"].is_null())) {
      o.worker_fn = observer.Fn();
    }
    if (input.contains("eval_fn") && !input["eval_fn"].is_null()) {
      o.eval_fn = observer.Fn();
    }
    const nlohmann::ordered_json& ordered = ctx.ordered_input();
    if (ordered.contains("cluster_spec") &&
        !ordered["cluster_spec"].is_null()) {
      auto cluster =
          ClusterSpec::FromJson(ordered["cluster_spec"], "cluster_spec");
      if (!cluster.ok()) return StepOutcome::Error(cluster.status());
      o.cluster_spec = *cluster;
    }
    if (input.contains("rpc_layer")) {
      o.rpc_layer = input["rpc_layer"].is_string()
                        ? input["rpc_layer"].get<std::string>()
                        : "";
    }
    auto task_type = OptString(input, "task_type");
    auto task_id = OptInt(input, "task_id");
    if (!task_type.ok()) return StepOutcome::Error(task_type.status());
    if (!task_id.ok()) return StepOutcome::Error(task_id.status());
    o.task_type = task_type->value_or("");
    o.task_id = static_cast<int>(task_id->value_or(-1));
    if (input.contains("session_config")) {
      auto config = ConfigFromJson(input["session_config"]);
      if (!config.ok()) return StepOutcome::Error(config.status());
      o.session_config = *config;
    }

    // Threads: one per task (INDEPENDENT_WORKER without a task), else one.
    std::vector<std::function<absl::Status()>> fns;
    if (*mode == distribute::CoordinatorMode::kIndependentWorker &&
        o.task_type.empty() && !o.cluster_spec.empty()) {
      for (const std::string& job : o.cluster_spec.jobs()) {
        for (const auto& [index, address] : *o.cluster_spec.tasks(job)) {
          DistributeCoordinatorOptions task = o;
          task.task_type = job;
          task.task_id = index;
          fns.push_back([task] { return RunDistributeCoordinator(task); });
        }
      }
    } else {
      fns.push_back([&o] { return RunDistributeCoordinator(o); });
    }
    bool slept = false;
    absl::Status status = RunAll(fns, ctx.env(), &servers, &slept);
    if (!status.ok()) return StepOutcome::Error(status);

    Json out = Json::object();
    observer.Report(out);
    Json std_servers = Json::object();
    const auto records = factory.records();
    for (const auto& r : records) {
      const std::string& type = r.args.task_type;
      if (std_servers.contains(type)) continue;
      std_servers[type] = {{"started", factory.started(type)},
                           {"joined", factory.joined(type)}};
    }
    out["std_servers"] = std_servers;
    if (!records.empty()) {
      out["std_server_session_config"] =
          ConfigToJson(records.front().args.session_config);
      out["std_server_rpc_layer"] = records.front().args.rpc_layer;
    }
    if (!servers.kind().empty()) out["server_kind"] = servers.kind();
    std::vector<bool> ps_joined = factory.joined("ps");
    out["ps_task_joins_server"] =
        slept ||
        (!ps_joined.empty() && std::all_of(ps_joined.begin(), ps_joined.end(),
                                           [](bool j) { return j; }));
    return StepOutcome::Value(out);
  }
};

class StandardServerAdapter : public Adapter {
 public:
  CaseRun Run(const Json& test_case, CaseContext& ctx) const override {
    CaseRun run;
    run.steps.push_back(RunCase(Field(test_case, "input"), ctx));
    return run;
  }

 private:
  static StepOutcome RunCase(const Json& input, CaseContext& ctx) {
    RecordingStdServerFactory factory;
    distribute::StandardServerOptions o;
    o.env = ctx.env();
    o.server_factory = &factory;
    if (input.contains("session_config")) {
      auto config = ConfigFromJson(input["session_config"]);
      if (!config.ok()) return StepOutcome::Error(config.status());
      o.session_config = *config;
    }
    absl::Status status;
    // A thread of its own: the coordinator keeps one server per thread.
    std::thread t([&] { status = RunStandardTensorflowServer(o).status(); });
    t.join();
    if (!status.ok()) return StepOutcome::Error(status);
    const auto records = factory.records();
    Json out = Json::object();
    out["server_started"] = !records.empty();
    if (!records.empty()) {
      const auto& args = records.front().args;
      Json a = ConfigToJson(args.session_config);
      a["cluster_spec"] = args.cluster.ToJson();
      a["task_type"] = args.task_type;
      a["task_id"] = args.task_id;
      a["rpc_layer"] = args.rpc_layer;
      out["std_server_args"] = a;
    }
    return StepOutcome::Value(out);
  }
};

}  // namespace

void RegisterDistributeAdapters(AdapterRegistry* registry) {
  registry->Register("DistributeCoordinator",
                     std::make_unique<DistributeCoordinatorAdapter>());
  registry->Register("DistributeCoordinator.run_standard_tensorflow_server",
                     std::make_unique<StandardServerAdapter>());
}

}  // namespace cohort::conformance
