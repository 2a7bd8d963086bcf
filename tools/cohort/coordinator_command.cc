// `cohort coordinator`: runs a job's coordination service on its own.
//
//   cohort coordinator (--cluster JSON | --tf-config) [--port P] [--host H]
//       [--heartbeat-timeout 10s] [--shutdown-barrier-timeout 0s]
//       [--recoverable-jobs a,b] [--allow-reconnect] [--register-with-barrier]
//       [--exit-when-finished] [--token-file F] [--insecure]
//       [--tls-ca F --tls-cert F --tls-key F [--tls-client-certs]]
//
// The job's tasks come from the cluster spec (`--cluster` takes the JSON
// form {"worker": ["h:p", ...], ...}; `--tf-config` reads $TF_CONFIG). The
// first line on stdout is the bound port (useful with --port 0, the
// default); logs go to stderr. Runs until SIGINT/SIGTERM, or, with
// --exit-when-finished, until every task has shut down cleanly.
#include <signal.h>
#include <unistd.h>

#include <iostream>
#include <string>
#include <thread>

#include "absl/strings/str_split.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "cohort/base/env.h"
#include "cohort/base/json.h"
#include "cohort/base/logging.h"
#include "cohort/base/status.h"
#include "cohort/cluster/cluster_spec.h"
#include "cohort/cluster/multi_worker_util.h"
#include "cohort/cluster/resolvers/tf_config_cluster_resolver.h"
#include "cohort/coord/coordination_server.h"
#include "tools/cohort/commands.h"
#include "tools/cohort/coord_client_flags.h"
#include "tools/cohort/stop_signals.h"

namespace cohort::tools {
namespace {

struct CoordinatorOptions {
  std::string cluster_json;
  bool tf_config = false;
  std::string host = "127.0.0.1";
  int port = 0;
  std::string heartbeat_timeout = "10s";
  std::string shutdown_barrier_timeout = "0s";
  std::string register_timeout = "1h";
  std::string recoverable_jobs;
  bool allow_reconnect = false;
  bool register_with_barrier = false;
  bool exit_when_finished = false;
  CoordSecurityFlags security;
};

absl::StatusOr<absl::Duration> ParseDurationFlag(const std::string& text,
                                                 const char* flag) {
  absl::Duration d;
  if (!absl::ParseDuration(text, &d) || d < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        flag, ": expected a duration like 10s or 500ms, got \"", text, "\""));
  }
  return d;
}

absl::StatusOr<ClusterSpec> LoadCluster(const CoordinatorOptions& o) {
  if (!o.cluster_json.empty()) {
    COHORT_ASSIGN_OR_RETURN(Json json, ParseJson(o.cluster_json, "--cluster"));
    return ClusterSpec::FromJson(json, "--cluster");
  }
  TFConfigClusterResolver resolver(Env::Default());
  return resolver.cluster_spec();
}

absl::Status Run(const CoordinatorOptions& o) {
  if (o.cluster_json.empty() == !o.tf_config) {
    return absl::InvalidArgumentError(
        "give exactly one of --cluster JSON and --tf-config");
  }
  COHORT_ASSIGN_OR_RETURN(ClusterSpec cluster, LoadCluster(o));
  coord::CoordinationServerOptions options;
  for (const std::string& job : cluster.jobs()) {
    COHORT_ASSIGN_OR_RETURN(std::vector<int> indices,
                            cluster.task_indices(job));
    if (indices.empty()) continue;
    // Sparse jobs are coordinated as dense 0..max.
    options.service.jobs[job] = indices.back() + 1;
  }
  COHORT_ASSIGN_OR_RETURN(
      options.service.heartbeat_timeout,
      ParseDurationFlag(o.heartbeat_timeout, "--heartbeat-timeout"));
  COHORT_ASSIGN_OR_RETURN(options.service.shutdown_barrier_timeout,
                          ParseDurationFlag(o.shutdown_barrier_timeout,
                                            "--shutdown-barrier-timeout"));
  COHORT_ASSIGN_OR_RETURN(
      options.service.cluster_register_timeout,
      ParseDurationFlag(o.register_timeout, "--register-timeout"));
  for (absl::string_view job :
       absl::StrSplit(o.recoverable_jobs, ',', absl::SkipEmpty())) {
    options.service.recoverable_jobs.insert(std::string(job));
  }
  options.service.allow_new_incarnation_to_reconnect = o.allow_reconnect;
  options.service.register_with_barrier = o.register_with_barrier;
  COHORT_ASSIGN_OR_RETURN(options.security, o.security.Security());
  if (options.security.tls() && (options.security.cert_file.empty() ||
                                 options.security.key_file.empty())) {
    return absl::InvalidArgumentError(
        "TLS needs --tls-cert and --tls-key for the coordinator's identity");
  }
  options.address = absl::StrCat(o.host, ":", o.port);

  // Block the termination signals before any thread starts, so that only
  // sigwait below sees them.
  const sigset_t signals = BlockStopSignals();

  COHORT_ASSIGN_OR_RETURN(auto server,
                          coord::CoordinationServer::Start(options));
  std::cout << server->port() << std::endl;
  COHORT_LOG(INFO) << "coordinating " << cluster.DebugString()
                   << "; leader task per multi_worker_util: "
                   << multi_worker_util::CoordinationLeader(cluster);

  std::thread finisher;
  if (o.exit_when_finished) {
    finisher = std::thread([&server] {
      int64_t version = -1;
      while (true) {
        absl::Notification got;
        absl::StatusOr<coord::JobStatus> result;
        server->service()->WatchJobStateAsync(
            version, absl::InfiniteFuture(),
            [&](absl::StatusOr<coord::JobStatus> r) {
              result = std::move(r);
              got.Notify();
            });
        got.WaitForNotification();
        if (!result.ok()) return;  // stopped
        version = result->version;
        if (result->job_state == "finished") {
          COHORT_LOG(INFO) << "every task shut down cleanly; exiting";
          kill(getpid(), SIGTERM);
          return;
        }
      }
    });
  }
  int signal_number = 0;
  sigwait(&signals, &signal_number);
  COHORT_LOG(INFO) << "stopping the coordination service (signal "
                   << signal_number << ")";
  server->Stop();
  if (finisher.joinable()) finisher.join();
  return absl::OkStatus();
}

}  // namespace

void RegisterCoordinatorCommand(CLI::App& app, int& exit_code) {
  auto options = std::make_shared<CoordinatorOptions>();
  CLI::App* command = app.add_subcommand(
      "coordinator", "run a job's coordination service standalone");
  command->add_option(
      "--cluster", options->cluster_json,
      "cluster spec JSON, e.g. {\"worker\": [\"h:1\", \"h:2\"]}");
  command->add_flag("--tf-config", options->tf_config,
                    "take the cluster from $TF_CONFIG");
  command->add_option("--host", options->host, "address to listen on");
  command->add_option("--port", options->port, "port (0: the OS picks)");
  command->add_option("--heartbeat-timeout", options->heartbeat_timeout,
                      "silence after which a task is dead (10s)");
  command->add_option(
      "--shutdown-barrier-timeout", options->shutdown_barrier_timeout,
      "wait this long for all tasks at shutdown (0: no barrier)");
  command->add_option("--register-timeout", options->register_timeout,
                      "with --register-with-barrier (1h)");
  command->add_option("--recoverable-jobs", options->recoverable_jobs,
                      "comma-separated jobs whose tasks may fail and rejoin");
  command->add_flag("--allow-reconnect", options->allow_reconnect,
                    "a task declared dead may re-register");
  command->add_flag("--register-with-barrier", options->register_with_barrier,
                    "registration waits until every task registered");
  command->add_flag("--exit-when-finished", options->exit_when_finished,
                    "exit once every task shut down cleanly");
  options->security.Add(command, /*server=*/true);
  command->callback([options, &exit_code] {
    absl::Status status = Run(*options);
    if (!status.ok()) {
      std::cerr << "cohort coordinator: " << status.message() << "\n";
      exit_code = 1;
    }
  });
}

}  // namespace cohort::tools
