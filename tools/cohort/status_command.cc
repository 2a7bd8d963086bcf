// `cohort status`: shows a job as its coordination service sees it.
//
//   cohort status --coordinator HOST:PORT [--watch] [--format text|json]
//                 [--token-file F] [--tls-ca F]
//
// Prints every task (state, incarnation, heartbeat age, error) and every
// barrier in progress (who arrived, who is missing). `--watch` redraws on
// every change (and each second, for the heartbeat ages) until interrupted
// or the job finishes; with `--format json` it prints one JSON object per
// line instead.
#include <unistd.h>

#include <iostream>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "cohort/base/json.h"
#include "cohort/base/status.h"
#include "cohort/coord/coordination_rpc_handler.h"
#include "cohort/coord/grpc_coordination_client.h"
#include "cohort/coord/job_status_json.h"
#include "tools/cohort/commands.h"
#include "tools/cohort/coord_cli_call.h"
#include "tools/cohort/coord_client_flags.h"

namespace cohort::tools {
namespace {

struct StatusOptions {
  std::string coordinator;
  bool watch = false;
  std::string format = "text";
  CoordSecurityFlags security;
};

std::string ToText(const coord::GetJobStatusResponse& r,
                   const std::string& coordinator) {
  std::string out = absl::StrFormat(
      "job %s at %s (service incarnation %d, version %d)\n\n", r.job_state(),
      coordinator, r.service_incarnation(), r.version_number());
  absl::StrAppendFormat(&out, "%-16s %-15s %-20s %-10s %s\n", "TASK", "STATE",
                        "INCARNATION", "HEARTBEAT", "ERROR");
  for (const auto& t : r.task_state()) {
    const std::string age =
        t.heartbeat_age_ms() < 0
            ? "-"
            : absl::StrFormat("%.1fs ago", t.heartbeat_age_ms() / 1000.0);
    const std::string incarnation =
        t.incarnation() == 0 ? "-" : std::to_string(t.incarnation());
    std::string error;
    if (t.error_code() != 0) {
      error = absl::StrCat(
          StatusCodeName(static_cast<absl::StatusCode>(t.error_code())), ": ",
          t.error_message());
    }
    absl::StrAppendFormat(
        &out, "%-16s %-15s %-20s %-10s %s\n",
        coord::TaskNameOf(t.task()) + (t.recoverable() ? "*" : ""),
        coord::TaskStateName(t), incarnation, age, error);
  }
  if (r.barrier_size() == 0) {
    out += "\nno barriers in progress\n";
  } else {
    out += "\nbarriers in progress:\n";
    for (const auto& b : r.barrier()) {
      std::vector<std::string> arrived, missing;
      for (const auto& t : b.arrived()) arrived.push_back(coord::TaskNameOf(t));
      for (const auto& t : b.missing()) missing.push_back(coord::TaskNameOf(t));
      absl::StrAppendFormat(
          &out,
          "  %s #%d: %d/%d arrived, %.1fs left\n    arrived: %s\n    missing: "
          "%s\n",
          b.barrier_id(), b.counter(), b.arrived_size(),
          b.arrived_size() + b.missing_size(), b.remaining_ms() / 1000.0,
          arrived.empty() ? "-" : absl::StrJoin(arrived, " "),
          missing.empty() ? "-" : absl::StrJoin(missing, " "));
    }
  }
  return out;
}

absl::Status Run(const StatusOptions& o) {
  if (o.format != "text" && o.format != "json") {
    return absl::InvalidArgumentError(
        absl::StrCat("--format: expected text or json, got ", o.format));
  }
  COHORT_ASSIGN_OR_RETURN(rpc::TransportSecurity security,
                          o.security.Security());
  COHORT_ASSIGN_OR_RETURN(
      auto client, coord::NewGrpcCoordinationClient(o.coordinator, security));
  int64_t printed_version = -1;
  const bool tty = isatty(STDOUT_FILENO);
  while (true) {
    coord::GetJobStatusResponse status;
    COHORT_RETURN_IF_ERROR(CallCoordinator(
        *client, &coord::CoordinationClient::GetJobStatusAsync,
        coord::GetJobStatusRequest(), &status, absl::Seconds(10)));
    if (o.format == "json") {
      // One line per change of the job's state.
      if (status.version_number() != printed_version) {
        std::cout << JsonDump(coord::JobStatusJson(status)) << std::endl;
        printed_version = status.version_number();
      }
    } else {
      if (o.watch && tty) std::cout << "\x1b[H\x1b[2J";
      std::cout << ToText(status, o.coordinator) << std::flush;
    }
    if (!o.watch || status.job_state() == "finished") return absl::OkStatus();
    // Wait for a change (or a second, to refresh heartbeat ages).
    coord::WatchJobStateRequest watch;
    watch.set_version_number(status.version_number());
    watch.set_timeout_ms(1000);
    coord::WatchJobStateResponse changed;
    COHORT_RETURN_IF_ERROR(
        CallCoordinator(*client, &coord::CoordinationClient::WatchJobStateAsync,
                        watch, &changed, absl::Seconds(10)));
  }
}

}  // namespace

void RegisterStatusCommand(CLI::App& app, int& exit_code) {
  auto options = std::make_shared<StatusOptions>();
  CLI::App* command =
      app.add_subcommand("status", "show a job's tasks and barriers");
  command
      ->add_option("--coordinator", options->coordinator,
                   "coordination service address HOST:PORT")
      ->required();
  command->add_flag("--watch", options->watch, "redraw on every change");
  command->add_option("--format", options->format, "text or json");
  options->security.Add(command);
  command->callback([options, &exit_code] {
    absl::Status status = Run(*options);
    if (!status.ok()) {
      std::cerr << "cohort status: " << status.message() << "\n";
      exit_code = 1;
    }
  });
}

}  // namespace cohort::tools
