// `cohort server`: runs one task of a cluster: its master and its worker
// (src/cohort/runtime/server.h).
//
//   cohort server (--cluster JSON --job NAME --task I | --resolver NAME)
//       [--port P] [--session-gc-seconds S] [--threads N]
//       [--max-step-memory BYTES] [--max-server-memory BYTES]
//       [--heartbeat-timeout SEC] [--no-coordination]
//       [--token-file F] [--insecure]
//       [--tls-ca F --tls-cert F --tls-key F [--tls-client-certs]]
//
// The job token (COHORT_JOB_TOKEN or --token-file) is required: without
// one, or TLS, it refuses to start unless --insecure is given.
//
// Prints exactly one line on stdout, `serving grpc://HOST:PORT` (the bound
// port), once it serves; logs go to stderr. SIGINT/SIGTERM stop it cleanly
// and it exits 0. Configuration errors exit 2 with the message on stderr,
// and nothing listens.
#include <signal.h>
#include <unistd.h>

#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "cohort/base/env.h"
#include "cohort/base/json.h"
#include "cohort/base/logging.h"
#include "cohort/base/status.h"
#include "cohort/cluster/cluster_resolver.h"
#include "cohort/cluster/cluster_spec.h"
#include "cohort/cluster/resolver_registry.h"
#include "cohort/graph/memory_budget.h"
#include "cohort/runtime/server.h"
#include "tools/cohort/commands.h"
#include "tools/cohort/coord_client_flags.h"
#include "tools/cohort/flag_checks.h"
#include "tools/cohort/stop_signals.h"

namespace cohort::tools {
namespace {

struct ServerFlags {
  std::string cluster_json;
  std::string job;
  int task = -1;
  std::string resolver;
  int port = 0;
  int64_t session_gc_seconds = 0;
  int threads = 0;
  // Memory budgets of the graphs this server runs (graph/memory_budget.h);
  // 0: the defaults.
  int64_t max_step_memory = 0;
  int64_t max_server_memory = 0;
  double heartbeat_timeout = 10;
  double step_timeout = absl::ToDoubleSeconds(runtime::kDefaultStepTimeout);
  bool no_coordination = false;
  CoordSecurityFlags security;
};

// The ServerDef from --cluster/--job/--task or from a resolver.
absl::StatusOr<ServerDef> LoadServerDef(const ServerFlags& f) {
  if (f.cluster_json.empty() == f.resolver.empty()) {
    return absl::InvalidArgumentError(
        "give either --cluster JSON --job NAME --task I, or --resolver NAME");
  }
  ClusterSpec cluster;
  std::optional<std::string> job;
  std::optional<int> task;
  if (!f.cluster_json.empty()) {
    COHORT_ASSIGN_OR_RETURN(Json json, ParseJson(f.cluster_json, "--cluster"));
    COHORT_ASSIGN_OR_RETURN(cluster, ClusterSpec::FromJson(json, "--cluster"));
    if (!f.job.empty()) job = f.job;
    if (f.task >= 0) task = f.task;
  } else {
    Env* env = Env::Default();
    const ResolverRegistry& registry = BuiltinResolverRegistry();
    std::string name = f.resolver;
    if (name == "auto") {
      COHORT_ASSIGN_OR_RETURN(auto detected, registry.Detect(env));
      name = detected->name;
    }
    COHORT_ASSIGN_OR_RETURN(auto resolver, registry.Create(name, env));
    auto spec = resolver->cluster_spec();
    if (!spec.ok()) {
      return absl::Status(
          spec.status().code(),
          absl::StrCat("resolver ", name, ": ", spec.status().message()));
    }
    cluster = *spec;
    job = f.job.empty() ? resolver->task_type() : f.job;
    if (f.task >= 0) {
      task = f.task;
    } else if (resolver->task_id().has_value()) {
      task = static_cast<int>(*resolver->task_id());
    }
  }
  COHORT_ASSIGN_OR_RETURN(ServerDef def, MakeServerDef(cluster, job, task));
  if (f.port != 0) def.set_port(f.port);
  ConfigProto* config = def.mutable_default_session_config();
  config->set_session_gc_seconds(f.session_gc_seconds);
  if (!f.no_coordination) {
    CoordinationServiceConfig* c =
        config->mutable_experimental()->mutable_coordination_config();
    c->set_service_type("standalone");
    c->set_heartbeat_timeout_in_ms(
        static_cast<int64_t>(f.heartbeat_timeout * 1000));
  }
  return def;
}

int RunServer(const ServerFlags& f) {
  auto def = LoadServerDef(f);
  if (!def.ok()) {
    std::cerr << "cohort server: " << def.status().message() << "\n";
    return 2;
  }
  runtime::ServerOptions options;
  auto security = f.security.Security();
  if (!security.ok()) {
    std::cerr << "cohort server: " << security.status().message() << "\n";
    return 2;
  }
  options.security = *security;
  // Every cohort endpoint checks the job token, loopback included: any local
  // user could otherwise run graphs or Reset the cluster's variables.
  if (options.security.job_token.empty() && !options.security.tls() &&
      !options.security.insecure) {
    std::cerr << "cohort server: no job token: set COHORT_JOB_TOKEN or give "
                 "--token-file (every task and client of the cluster uses "
                 "the same one), use TLS client certificates, or pass "
                 "--insecure to serve without authentication\n";
    return 2;
  }
  options.num_threads = f.threads;
  options.default_step_timeout = f.step_timeout > 0
                                     ? absl::Seconds(f.step_timeout)
                                     : absl::InfiniteDuration();
  // The server's device uses the process budget (one server per process),
  // so the flags set the process-wide limits before the device exists.
  if (f.max_step_memory < 0 || f.max_server_memory < 0) {
    std::cerr << "cohort server: --max-step-memory and --max-server-memory "
                 "take a byte count (0 for the default)\n";
    return 2;
  }
  MemoryLimits memory;
  memory.per_step_bytes = f.max_step_memory;
  memory.per_server_bytes = f.max_server_memory;
  SetProcessMemoryLimits(memory);
  // Under `cohort launch` the task joins the launcher's coordination
  // service instead of hosting one.
  if (!f.no_coordination) {
    options.launcher_coordination_address =
        Env::Default()
            ->GetVar("COHORT_COORDINATION_SERVICE_ADDRESS")
            .value_or("");
  }

  // Block the termination signals before any thread starts, so that only
  // sigwait below sees them.
  const sigset_t signals = BlockStopSignals();
  // One thread takes the signals from here on. While the server is still
  // starting there is nothing to stop cleanly, so a signal then ends the
  // process at once instead of waiting, unseen, for the start to finish.
  // The thread is detached (it outlives RunServer when a start fails and
  // the process is on its way out), so what it shares lives on the heap.
  struct SignalState {
    absl::Mutex mu;
    bool serving ABSL_GUARDED_BY(mu) = false;
    int number ABSL_GUARDED_BY(mu) = 0;
  };
  auto state = std::make_shared<SignalState>();
  std::thread([state, signals] {
    int number = 0;
    sigwait(&signals, &number);
    absl::MutexLock lock(&state->mu);
    if (!state->serving) {
      COHORT_LOG(WARNING) << "signal " << number
                          << " while the server was starting: exiting";
      _exit(128 + number);
    }
    state->number = number;
  }).detach();

  auto server = runtime::Server::Create(*def, options);
  if (!server.ok()) {
    std::cerr << "cohort server: " << server.status().message() << "\n";
    return absl::IsUnavailable(server.status()) ? 1 : 2;
  }
  absl::Status started = (*server)->Start();
  if (!started.ok()) {
    std::cerr << "cohort server: " << started.message() << "\n";
    return 1;
  }
  int signal_number = 0;
  {
    // Serving from here: a signal now stops the server cleanly below.
    absl::MutexLock lock(&state->mu);
    state->serving = true;
  }
  std::cout << "serving " << (*server)->target() << std::endl;
  {
    absl::MutexLock lock(&state->mu);
    state->mu.Await(absl::Condition(
        +[](int* number) { return *number != 0; }, &state->number));
    signal_number = state->number;
  }
  COHORT_LOG(INFO) << "stopping " << (*server)->task_name() << " (signal "
                   << signal_number << ")";
  (void)(*server)->Stop();
  return 0;
}

}  // namespace

void RegisterServerCommand(CLI::App& app, int& exit_code) {
  auto flags = std::make_shared<ServerFlags>();
  CLI::App* command = app.add_subcommand(
      "server", "run one task of a cluster: its master and its worker");
  command->add_option(
      "--cluster", flags->cluster_json,
      "cluster spec JSON, e.g. {\"ps\": [\"h:2222\"], \"worker\": [...]}");
  command->add_option("--job", flags->job, "this task's job");
  command->add_option("--task", flags->task, "this task's index in its job");
  command->add_option(
      "--resolver", flags->resolver,
      "take cluster, job and task from a resolver: auto, tf_config, slurm, "
      "sagemaker, kubernetes, gce, tpu");
  command->add_option("--port", flags->port,
                      "port to bind instead of the cluster address's");
  command->add_option("--session-gc-seconds", flags->session_gc_seconds,
                      "close master sessions idle this long (0: never)");
  command
      ->add_option("--heartbeat-timeout", flags->heartbeat_timeout,
                   "seconds of silence after which a task is lost (10)")
      ->check(Seconds(/*allow_zero=*/false));
  command
      ->add_option("--step-timeout", flags->step_timeout,
                   "seconds a step may run when its session sets no "
                   "operation_timeout_in_ms (1800; 0: no limit)")
      ->check(Seconds(/*allow_zero=*/true));
  command->add_flag("--no-coordination", flags->no_coordination,
                    "run no coordination service or agent (failures are then "
                    "found only by transport errors and step deadlines)");
  command
      ->add_option("--threads", flags->threads,
                   "threads of the task's device (0: one per core; at most "
                   "1024)")
      ->check(CLI::Range(0, runtime::kMaxServerThreads));
  command->add_option("--max-step-memory", flags->max_step_memory,
                      "bytes the kernels of one step may hold at once; more "
                      "fails the step with ResourceExhausted (0: 4 GiB, at "
                      "most the server's)");
  command->add_option("--max-server-memory", flags->max_server_memory,
                      "bytes all graph tensors and variables of this server "
                      "may hold (0: 8 GiB, or half the physical memory if "
                      "less)");
  flags->security.Add(command, /*server=*/true);
  command->callback([flags, &exit_code] { exit_code = RunServer(*flags); });
}

}  // namespace cohort::tools
