#include "cohort/distribute/distribute_coordinator.h"

#include <cstdint>
#include <limits>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "cohort/base/json.h"
#include "cohort/base/logging.h"
#include "cohort/base/status.h"
#include "cohort/cluster/multi_worker_util.h"
#include "cohort/coord/coordination_agent.h"
#include "google/protobuf/util/message_differencer.h"

namespace cohort::distribute {
namespace {

// --- Inputs (§2.1) -----------------------------------------------------------

// What the coordinator runs with after TF_CONFIG is merged in.
struct Inputs {
  ClusterSpec cluster;
  std::string task_type;
  int task_id = -1;
  std::string rpc_layer;
  std::string environment;
  ConfigProto session_config;
  // The cluster came from TF_CONFIG, which has no (or an empty) "task".
  bool tf_config_without_task = false;
};

absl::StatusOr<Json> ReadTfConfig(Env* env) {
  std::optional<std::string> text = env->GetVar("TF_CONFIG");
  if (!text.has_value() || text->empty()) return Json::object();
  COHORT_ASSIGN_OR_RETURN(Json config, ParseJson(*text, "TF_CONFIG"));
  if (!config.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat("TF_CONFIG must be a JSON object, got ",
                     JsonPreview(config), "; check the TF_CONFIG variable"));
  }
  return config;
}

// TF_CONFIG's task index: a number or a decimal string (TF: int(index)).
absl::StatusOr<int> ParseTaskIndex(const Json& index) {
  int64_t value = -1;
  bool parsed = false;
  if (index.is_number_integer()) {
    value = index.get<int64_t>();
    parsed = true;
  } else if (index.is_string()) {
    parsed = absl::SimpleAtoi(index.get<std::string>(), &value);
  }
  // A negative or huge index would silently make this task another one.
  if (!parsed || value < 0 || value > std::numeric_limits<int>::max()) {
    return absl::InvalidArgumentError(
        absl::StrCat("TF_CONFIG task \"index\" must be an integer >= 0, got ",
                     JsonPreview(index), "; check the TF_CONFIG variable"));
  }
  return static_cast<int>(value);
}

absl::StatusOr<Inputs> ResolveInputs(const DistributeCoordinatorOptions& o,
                                     Env* env) {
  COHORT_ASSIGN_OR_RETURN(Json tf_config, ReadTfConfig(env));
  Inputs in;
  // TF_CONFIG's rpc_layer wins over the argument (TF).
  in.rpc_layer =
      tf_config.contains("rpc_layer") && tf_config["rpc_layer"].is_string()
          ? tf_config["rpc_layer"].get<std::string>()
          : o.rpc_layer;
  if (tf_config.contains("environment") &&
      tf_config["environment"].is_string()) {
    in.environment = tf_config["environment"].get<std::string>();
  }
  in.cluster = o.cluster_spec;
  in.task_type = o.task_type;
  in.task_id = o.task_id;
  // BR-72-03: TF_CONFIG is used only when no cluster_spec is passed.
  if (in.cluster.empty()) {
    const Json cluster =
        tf_config.contains("cluster") ? tf_config["cluster"] : Json::object();
    COHORT_ASSIGN_OR_RETURN(in.cluster,
                            multi_worker_util::NormalizeClusterSpec(cluster));
    const Json task =
        tf_config.contains("task") ? tf_config["task"] : Json::object();
    if (task.is_object() && !task.empty()) {
      if (task.contains("type") && task["type"].is_string()) {
        in.task_type = task["type"].get<std::string>();
      }
      // "index" only ("id" is not read, as in TF); with neither an index
      // nor an argument TF fails on int(None): cohort takes 0, as the
      // TF_CONFIG resolver does.
      if (task.contains("index") && !task["index"].is_null()) {
        COHORT_ASSIGN_OR_RETURN(in.task_id, ParseTaskIndex(task["index"]));
      } else if (in.task_id < 0) {
        in.task_id = 0;
      }
    } else {
      in.tf_config_without_task = !in.cluster.empty();
    }
  }
  if (o.session_config.has_value()) {
    in.session_config = *o.session_config;
  } else {
    in.session_config.set_allow_soft_placement(true);
  }
  return in;
}

std::string TaskTypeRepr(const std::string& task_type) {
  return task_type.empty() ? "None" : absl::StrCat("'", task_type, "'");
}

// --- Standard servers (§2.5) -------------------------------------------------

// The first standard server started on this thread (BR-72-04), with what
// it was started from.
struct ThreadServer {
  std::unique_ptr<StdServer> server;
  StdServerArgs args;
};
thread_local ThreadServer thread_server;

// "" when `a` and `b` would start the same server, else the differing field.
std::string DifferingField(const StdServerArgs& a, const StdServerArgs& b) {
  if (a.cluster != b.cluster) return "cluster_spec";
  if (a.task_type != b.task_type) return "task_type";
  if (a.task_id != b.task_id) return "task_id";
  if (!google::protobuf::util::MessageDifferencer::Equals(a.session_config,
                                                          b.session_config)) {
    return "session_config";
  }
  if (a.rpc_layer != b.rpc_layer) return "rpc_layer";
  if (a.environment != b.environment) return "environment";
  return "";
}

// The evaluator talks to nobody: its server knows only itself. Everyone
// else's server does not know the evaluator (TF _split_cluster_for_evaluator).
ClusterSpec ServerCluster(const ClusterSpec& cluster,
                          const std::string& task_type) {
  ClusterSpec split;
  for (const std::string& job : cluster.jobs()) {
    if ((job == "evaluator") == (task_type == "evaluator")) {
      split.SetJob(job, *cluster.tasks(job));
    }
  }
  return split;
}

absl::StatusOr<StdServer*> StartStdServer(StdServerArgs args, Env* env,
                                          StdServerFactory* factory) {
  if (thread_server.server != nullptr) {
    const std::string field = DifferingField(thread_server.args, args);
    if (!field.empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "this thread already started a standard server (",
          thread_server.server->description(), ") with a different ", field,
          "; a thread runs one server: call RunDistributeCoordinator again "
          "with the same cluster, task, session config, rpc_layer and "
          "environment, or from another thread"));
    }
    COHORT_LOG(INFO) << "Reusing the standard server of this thread, target = "
                     << thread_server.server->target();
    return thread_server.server.get();
  }
  std::unique_ptr<StdServer> server;
  if (args.environment == "google") {
    COHORT_ASSIGN_OR_RETURN(
        std::string address,
        args.cluster.task_address(args.task_type, args.task_id));
    const std::string target =
        args.rpc_layer.empty() ? address
                               : absl::StrCat(args.rpc_layer, "://", address);
    COHORT_LOG(INFO) << "Creating a remote session to start a TensorFlow "
                     << "server, target = " << target << ", session_config="
                     << args.session_config.ShortDebugString();
    server = std::make_unique<GoogleFakeServer>(env, target);
  } else {
    COHORT_ASSIGN_OR_RETURN(server, factory->CreateAndStart(args, env));
    COHORT_LOG(INFO) << "Starting standard TensorFlow server, target = "
                     << server->target() << ", session_config= "
                     << args.session_config.ShortDebugString();
  }
  thread_server.server = std::move(server);
  thread_server.args = std::move(args);
  return thread_server.server.get();
}

// TF _configure_session_config_for_std_servers: the strategy's settings
// for this task, then no device filters, so that a server brought up with
// one strategy can serve others (BR-72-05). Mutates `config` in place: the
// worker context later configures the same config again.
void ConfigureForStdServers(const Strategy* strategy,
                            const Strategy* eval_strategy, ConfigProto* config,
                            const ClusterSpec& cluster,
                            const std::string& task_type, int task_id) {
  if (task_type == "evaluator") {
    if (eval_strategy != nullptr) {
      eval_strategy->Clone()->Configure(config, nullptr, "", -1);
    }
  } else if (strategy != nullptr) {
    strategy->Clone()->Configure(config, &cluster, task_type, task_id);
  }
  config->clear_device_filters();
}

// One coordinator call: its resolved inputs and options.
struct Call {
  const DistributeCoordinatorOptions& options;
  Inputs& in;
  Env* env;
  StdServerFactory* factory;
  WorkerFn eval_fn;

  absl::StatusOr<StdServer*> StartServer(const std::string& task_type,
                                         int task_id) {
    StdServerArgs args;
    args.cluster = ServerCluster(in.cluster, task_type);
    args.task_type = task_type;
    args.task_id = task_id;
    args.session_config = in.session_config;
    args.rpc_layer = in.rpc_layer;
    args.environment = in.environment;
    COHORT_ASSIGN_OR_RETURN(StdServer * server,
                            StartStdServer(std::move(args), env, factory));
    if (options.on_std_server) options.on_std_server(server);
    return server;
  }

  absl::Status ServeAndJoin(const std::string& task_type, int task_id) {
    ConfigureForStdServers(options.strategy, options.eval_strategy,
                           &in.session_config, in.cluster, task_type, task_id);
    COHORT_ASSIGN_OR_RETURN(StdServer * server,
                            StartServer(task_type, task_id));
    return server->Join();
  }

  absl::Status RunLocal();
  absl::Status RunStandaloneClient();
  absl::Status RunBetweenGraphClient();
  absl::Status RunInGraphClient();
  absl::Status RunIndependentWorker();
  std::shared_ptr<WorkerBarrier> IndependentBarrier(StdServer* server);

  // A client's evaluator thread: eval_fn as evaluator 0, when the cluster
  // has an evaluator job.
  void AddEvaluatorThread(std::vector<std::function<absl::Status()>>* fns) {
    if (!in.cluster.HasJob("evaluator")) return;
    fns->push_back([this] {
      return RunSingleWorker(eval_fn, options.eval_strategy, in.cluster,
                             "evaluator", 0, in.session_config, in.rpc_layer,
                             nullptr);
    });
  }
};

bool BetweenGraph(const Strategy* strategy) {
  // No strategy: every task runs its own worker_fn (between-graph).
  return strategy == nullptr || strategy->between_graph();
}

absl::Status Call::RunLocal() {
  COHORT_LOG(INFO) << "Running local Distribute Coordinator.";
  COHORT_RETURN_IF_ERROR(RunSingleWorker(options.worker_fn, options.strategy,
                                         in.cluster, "", -1, in.session_config,
                                         in.rpc_layer, nullptr));
  if (!options.eval_fn) {
    COHORT_LOG(WARNING)
        << "Skipped evaluation since `eval_fn` is not passed in.";
    return absl::OkStatus();
  }
  return RunSingleWorker(options.eval_fn, options.eval_strategy, in.cluster, "",
                         -1, in.session_config, in.rpc_layer, nullptr);
}

// Runs `fns` on one thread each, joins them all, returns the first error
// (in time) of any.
absl::Status RunThreads(const std::vector<std::function<absl::Status()>>& fns) {
  absl::Mutex mu;
  absl::Status first;
  std::vector<std::thread> threads;
  threads.reserve(fns.size());
  for (const auto& fn : fns) {
    threads.emplace_back([&fn, &mu, &first] {
      absl::Status s = fn();
      absl::MutexLock lock(&mu);
      if (first.ok()) first = s;
    });
  }
  for (std::thread& t : threads) t.join();
  absl::MutexLock lock(&mu);
  return first;
}

absl::Status Call::RunBetweenGraphClient() {
  std::vector<std::pair<std::string, int>> tasks;
  for (const char* job : {"chief", "worker"}) {
    const ClusterSpec::TaskMap* job_tasks = in.cluster.tasks(job);
    if (job_tasks == nullptr) continue;
    for (const auto& [index, address] : *job_tasks)
      tasks.push_back({job, index});
  }
  auto barrier = std::make_shared<InProcessBarrier>(
      static_cast<int>(tasks.size()), options.barrier_timeout, env);
  std::vector<std::function<absl::Status()>> fns;
  for (const auto& [type, id] : tasks) {
    fns.push_back([this, barrier, type = type, id = id] {
      absl::Status s =
          RunSingleWorker(options.worker_fn, options.strategy, in.cluster, type,
                          id, in.session_config, in.rpc_layer, barrier);
      // A finished worker never waits again: it must not hold the others.
      barrier->Leave();
      return s;
    });
  }
  AddEvaluatorThread(&fns);
  return RunThreads(fns);
}

absl::Status Call::RunInGraphClient() {
  if (!in.cluster.HasJob("chief") && !in.cluster.HasJob("worker")) {
    return absl::FailedPreconditionError(absl::StrCat(
        "in-graph replication needs a chief or worker job in the cluster (",
        in.cluster.DebugString(),
        "); the client's master is chief 0 or worker 0"));
  }
  std::vector<std::function<absl::Status()>> fns;
  fns.push_back([this] {
    return RunSingleWorker(options.worker_fn, options.strategy, in.cluster, "",
                           -1, in.session_config, in.rpc_layer, nullptr);
  });
  AddEvaluatorThread(&fns);
  return RunThreads(fns);
}

absl::Status Call::RunStandaloneClient() {
  if (!in.task_type.empty() && in.task_type != "client") {
    // A task of the cluster, not the client: serve the client.
    return ServeAndJoin(in.task_type, in.task_id);
  }
  return BetweenGraph(options.strategy) ? RunBetweenGraphClient()
                                        : RunInGraphClient();
}

// The INDEPENDENT_WORKER barrier (§2.4): over every chief and worker task,
// through the injected agent or the task's server's own; none without one
// (TF has none there).
std::shared_ptr<WorkerBarrier> Call::IndependentBarrier(StdServer* server) {
  coord::CoordinationAgent* agent = options.coordination_agent;
  if (agent == nullptr) {
    absl::StatusOr<coord::CoordinationAgent*> from_server =
        server->WaitForCoordinationAgent(options.agent_register_timeout);
    if (!from_server.ok()) {
      if (!absl::IsNotFound(from_server.status())) {
        COHORT_LOG(WARNING) << "no worker barrier: " << from_server.status();
      }
      return nullptr;
    }
    agent = *from_server;
  }
  std::vector<coord::TaskId> tasks;
  for (const char* job : {"chief", "worker"}) {
    const ClusterSpec::TaskMap* job_tasks = in.cluster.tasks(job);
    if (job_tasks == nullptr) continue;
    for (const auto& [index, address] : *job_tasks) {
      tasks.push_back(coord::TaskId{job, index});
    }
  }
  return std::make_shared<CoordinationBarrier>(agent, std::move(tasks),
                                               options.barrier_timeout);
}

absl::Status Call::RunIndependentWorker() {
  if (in.task_type.empty()) {
    if (in.tf_config_without_task) {
      return absl::InvalidArgumentError(
          "TF_CONFIG has a \"cluster\" but no \"task\"; every task of an "
          "INDEPENDENT_WORKER job needs \"task\": {\"type\", \"index\"} in "
          "its TF_CONFIG");
    }
    return absl::InvalidArgumentError(
        "INDEPENDENT_WORKER mode needs this task's type and index: pass "
        "task_type and task_id, or set \"task\" in TF_CONFIG");
  }
  const std::string& type = in.task_type;
  if (type != "chief" && type != "worker" && type != "evaluator" &&
      type != "ps") {
    return absl::InvalidArgumentError(absl::StrCat(
        "Unexpected task_type: ", TaskTypeRepr(type),
        " (INDEPENDENT_WORKER tasks are chief, worker, evaluator or ps)"));
  }
  if (in.task_id < 0) in.task_id = 0;
  // A task that is not in the cluster fails before anything starts (the
  // evaluator may be outside it: the launcher leaves it out).
  if (type != "evaluator" || in.cluster.HasJob("evaluator")) {
    COHORT_RETURN_IF_ERROR(in.cluster.task_address(type, in.task_id).status());
  }
  if (type == "ps") return ServeAndJoin(type, in.task_id);
  ConfigureForStdServers(options.strategy, options.eval_strategy,
                         &in.session_config, in.cluster, type, in.task_id);
  if (type == "evaluator") {
    // cohort rule (reference A6): a server only for an evaluator in the
    // cluster.
    if (in.cluster.HasJob("evaluator")) {
      COHORT_RETURN_IF_ERROR(StartServer(type, in.task_id).status());
    }
    return RunSingleWorker(eval_fn, options.eval_strategy, in.cluster, type,
                           in.task_id, in.session_config, in.rpc_layer,
                           nullptr);
  }
  COHORT_ASSIGN_OR_RETURN(StdServer * server, StartServer(type, in.task_id));
  if (BetweenGraph(options.strategy)) {
    // The server is not joined: the task ends when worker_fn does.
    return RunSingleWorker(options.worker_fn, options.strategy, in.cluster,
                           type, in.task_id, in.session_config, in.rpc_layer,
                           IndependentBarrier(server));
  }
  if (IsChiefTask(&in.cluster, type, in.task_id)) {
    return RunSingleWorker(options.worker_fn, options.strategy, in.cluster, "",
                           -1, in.session_config, in.rpc_layer, nullptr);
  }
  return server->Join();
}

}  // namespace

absl::StatusOr<CoordinatorMode> ParseCoordinatorMode(absl::string_view mode) {
  const std::string lower = absl::AsciiStrToLower(mode);
  if (lower == "standalone_client") return CoordinatorMode::kStandaloneClient;
  if (lower == "independent_worker") return CoordinatorMode::kIndependentWorker;
  return absl::InvalidArgumentError(
      absl::StrCat("Unexpected coordinator mode: '", mode,
                   "' (use standalone_client or independent_worker)"));
}

std::string CoordinatorModeName(CoordinatorMode mode) {
  switch (mode) {
    case CoordinatorMode::kStandaloneClient:
      return "standalone_client";
    case CoordinatorMode::kIndependentWorker:
      return "independent_worker";
  }
  return absl::StrCat(static_cast<int>(mode));
}

absl::Status RunDistributeCoordinator(
    const DistributeCoordinatorOptions& options) {
  if (const WorkerContext* outer = CurrentWorkerContext(); outer != nullptr) {
    return NestedCoordinatorError(outer->DebugString());
  }
  Env* env = options.env != nullptr ? options.env : Env::Default();
  COHORT_ASSIGN_OR_RETURN(Inputs in, ResolveInputs(options, env));
  StdServerFactory* factory = options.server_factory != nullptr
                                  ? options.server_factory
                                  : RealStdServerFactory();
  Call call{options, in, env, factory, options.eval_fn};
  if (in.cluster.empty()) return call.RunLocal();
  COHORT_LOG(INFO) << "Running Distribute Coordinator with mode = "
                   << CoordinatorModeName(options.mode)
                   << ", cluster_spec = " << in.cluster.ToJson().dump()
                   << ", task_type = " << TaskTypeRepr(in.task_type)
                   << ", task_id = "
                   << (in.task_id < 0 ? "None" : std::to_string(in.task_id))
                   << ", environment = "
                   << (in.environment.empty() ? "None" : in.environment)
                   << ", rpc_layer = " << in.rpc_layer;
  if (options.mode != CoordinatorMode::kStandaloneClient &&
      options.mode != CoordinatorMode::kIndependentWorker) {
    return absl::InvalidArgumentError(
        absl::StrCat("Unexpected coordinator mode: '",
                     CoordinatorModeName(options.mode), "'"));
  }
  if (!call.eval_fn) {
    COHORT_LOG(WARNING) << "`eval_fn` is not passed in. The `worker_fn` will "
                           "be used if an \"evaluator\" task exists in the "
                           "cluster.";
    call.eval_fn = options.worker_fn;
  }
  if (options.eval_strategy == nullptr) {
    COHORT_LOG(WARNING) << "`eval_strategy` is not passed in. No distribution "
                           "strategy will be used for evaluation.";
  }
  return options.mode == CoordinatorMode::kStandaloneClient
             ? call.RunStandaloneClient()
             : call.RunIndependentWorker();
}

absl::StatusOr<StdServer*> RunStandardTensorflowServer(
    const StandardServerOptions& options) {
  Env* env = options.env != nullptr ? options.env : Env::Default();
  COHORT_ASSIGN_OR_RETURN(Json tf_config, ReadTfConfig(env));
  if (!tf_config.contains("cluster")) {
    return absl::InvalidArgumentError("\"cluster\" is not found in TF_CONFIG.");
  }
  if (!tf_config.contains("task")) {
    return absl::InvalidArgumentError("\"task\" is not found in TF_CONFIG.");
  }
  const Json& task = tf_config["task"];
  if (!task.is_object() || !task.contains("type") ||
      !task["type"].is_string()) {
    return absl::InvalidArgumentError(
        "\"task_type\" is not found in the `task` part of TF_CONFIG.");
  }
  COHORT_ASSIGN_OR_RETURN(
      ClusterSpec cluster,
      multi_worker_util::NormalizeClusterSpec(tf_config["cluster"]));
  StdServerArgs args;
  args.task_type = task["type"].get<std::string>();
  args.task_id = 0;  // task.index or 0; "id" is not read (TF)
  if (task.contains("index") && !task["index"].is_null()) {
    COHORT_ASSIGN_OR_RETURN(args.task_id, ParseTaskIndex(task["index"]));
  }
  args.rpc_layer = tf_config.contains("rpc_layer") &&
                           tf_config["rpc_layer"].is_string() &&
                           !tf_config["rpc_layer"].get<std::string>().empty()
                       ? tf_config["rpc_layer"].get<std::string>()
                       : "grpc";
  if (tf_config.contains("environment") &&
      tf_config["environment"].is_string()) {
    args.environment = tf_config["environment"].get<std::string>();
  }
  args.session_config = options.session_config.value_or(ConfigProto());
  // Not multi_worker_util::CollectiveLeader: TF raises ValueError here, and
  // that is what callers match on (reference A10).
  if (cluster.HasJob("chief")) {
    args.session_config.mutable_experimental()->set_collective_group_leader(
        "/job:chief/replica:0/task:0");
  } else if (cluster.HasJob("worker")) {
    args.session_config.mutable_experimental()->set_collective_group_leader(
        "/job:worker/replica:0/task:0");
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("You must have `chief` or `worker` jobs in the "
                     "`cluster_spec`. (TF_CONFIG "
                     "cluster: ",
                     cluster.DebugString(), ")"));
  }
  args.cluster = ServerCluster(cluster, args.task_type);
  StdServerFactory* factory = options.server_factory != nullptr
                                  ? options.server_factory
                                  : RealStdServerFactory();
  return StartStdServer(std::move(args), env, factory);
}

}  // namespace cohort::distribute
