// `cohort ui`: the job's page (launch/job_page.h) for a job whose launcher
// does not serve one: a job under an engine (`cohort launch --engine`), or
// one coordinated by `cohort coordinator`.
//
//   cohort ui --coordinator HOST:PORT --token-file F [--ui [HOST:]PORT]
//
// Prints the page's URL (with the token) and serves until interrupted. It
// reads what the coordination service knows: tasks, barriers and the
// training metrics; attempts and task logs are kept by the launchers, so
// the page names where to find them instead.
#include <signal.h>

#include <iostream>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "cohort/base/env.h"
#include "cohort/base/status.h"
#include "cohort/coord/grpc_coordination_client.h"
#include "cohort/coord/job_status_json.h"
#include "cohort/coord/task_metrics.h"
#include "cohort/launch/job_page.h"
#include "tools/cohort/commands.h"
#include "tools/cohort/coord_cli_call.h"
#include "tools/cohort/coord_client_flags.h"
#include "tools/cohort/stop_signals.h"

namespace cohort::tools {
namespace {

struct UiOptions {
  std::string coordinator;
  std::string ui = "127.0.0.1:8265";
  CoordSecurityFlags security;
};

// Each call to the service: short, so a page poll never hangs on it.
constexpr absl::Duration kCallTimeout = absl::Seconds(5);

absl::Status Run(const UiOptions& o) {
  COHORT_ASSIGN_OR_RETURN(rpc::TransportSecurity security,
                          o.security.Security());
  if (security.job_token.empty()) {
    return absl::InvalidArgumentError(
        "the job page needs the job token (--token-file, or "
        "$COHORT_JOB_TOKEN): it never serves without one");
  }
  // Block the termination signals before any thread starts (gRPC's too),
  // so that only sigwait below sees them.
  const sigset_t signals = BlockStopSignals();
  COHORT_ASSIGN_OR_RETURN(
      std::shared_ptr<coord::CoordinationClient> client,
      coord::NewGrpcCoordinationClient(o.coordinator, security));

  launch::MetricsSampler sampler(
      Env::Default(),
      [client]()
          -> absl::StatusOr<std::vector<std::pair<std::string, std::string>>> {
        coord::GetKeyValueDirRequest request;
        request.set_directory_key(coord::kMetricsDir);
        coord::GetKeyValueDirResponse response;
        COHORT_RETURN_IF_ERROR(CallCoordinator(
            *client, &coord::CoordinationClient::GetKeyValueDirAsync, request,
            &response, kCallTimeout));
        std::vector<std::pair<std::string, std::string>> out;
        for (const auto& kv : response.kv())
          out.emplace_back(kv.key(), kv.value());
        return out;
      },
      absl::Seconds(1), nullptr, absl::InfiniteDuration());
  launch::JobPageSource source;
  source.status = [client]() -> absl::StatusOr<Json> {
    coord::GetJobStatusResponse status;
    COHORT_RETURN_IF_ERROR(
        CallCoordinator(*client, &coord::CoordinationClient::GetJobStatusAsync,
                        coord::GetJobStatusRequest(), &status, kCallTimeout));
    Json j = coord::JobStatusJson(status);
    launch::MergeTaskProcesses(Json::object(), j);
    return j;
  };
  source.metrics = &sampler.history();
  COHORT_ASSIGN_OR_RETURN(
      auto page,
      launch::JobPage::Start(o.ui, security.job_token, std::move(source)));
  std::cout << "job page: " << page->url() << std::endl;
  int signal_number = 0;
  sigwait(&signals, &signal_number);
  return absl::OkStatus();
}

}  // namespace

void RegisterUiCommand(CLI::App& app, int& exit_code) {
  auto options = std::make_shared<UiOptions>();
  CLI::App* command = app.add_subcommand(
      "ui", "serve a job's live page from its coordination service");
  command
      ->add_option("--coordinator", options->coordinator,
                   "coordination service address HOST:PORT")
      ->required();
  command->add_option("--ui", options->ui,
                      "[HOST:]PORT to serve the page on (default "
                      "127.0.0.1:8265; loopback unless HOST is given)");
  options->security.Add(command);
  command->callback([options, &exit_code] {
    absl::Status status = Run(*options);
    if (!status.ok()) {
      std::cerr << "cohort ui: " << status.message() << "\n";
      exit_code = 1;
    }
  });
}

}  // namespace cohort::tools
