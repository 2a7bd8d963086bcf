// cohort: resolve a cluster, run a server, launch a job, show its state,
// benchmark. See README.md for a tour.
#include <iostream>

#include "CLI/CLI.hpp"
#include "absl/synchronization/mutex.h"
#include "cohort/base/logging.h"
#include "tools/cohort/commands.h"

int main(int argc, char** argv) {
#ifdef NDEBUG
  // Debian's Abseil keeps absl::Mutex's lock-order graph on; its bookkeeping
  // was 1-2% of a server's CPU per step. The unit-test binaries keep it.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
#endif
  CLI::App app{"cohort: a runtime for distributed machine-learning training"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "cohort 0.1.0");
  std::string log_level = "info";
  app.add_option("--log-level", log_level, "debug, info, warning or error")
      ->check([](const std::string& text) {
        cohort::LogLevel level;
        return cohort::ParseLogLevel(text, &level)
                   ? std::string()
                   : "expected debug, info, warning or error, got " + text;
      })
      ->each([](const std::string& text) {
        cohort::LogLevel level;
        if (cohort::ParseLogLevel(text, &level)) cohort::SetMinLogLevel(level);
      });

  int exit_code = 0;
  cohort::tools::RegisterResolveCommand(app, exit_code);
  cohort::tools::RegisterLaunchCommand(app, exit_code);
  cohort::tools::RegisterTaskCommand(app, exit_code);
  cohort::tools::RegisterCoordinatorCommand(app, exit_code);
  cohort::tools::RegisterStatusCommand(app, exit_code);
  cohort::tools::RegisterKvCommand(app, exit_code);
  cohort::tools::RegisterServerCommand(app, exit_code);
  cohort::tools::RegisterRunCommand(app, exit_code);
  cohort::tools::RegisterBenchCommand(app, exit_code);
  cohort::tools::RegisterUiCommand(app, exit_code);

  CLI11_PARSE(app, argc, argv);
  return exit_code;
}
