// The `cohort` command's subcommands. Each Register* function adds one
// subcommand (and its flags) to the app; the subcommand's callback sets the
// process exit code through `exit_code`.
//
// Subcommands print results on stdout and errors on stderr, and exit non-zero
// on any failure.
#ifndef COHORT_TOOLS_COHORT_COMMANDS_H_
#define COHORT_TOOLS_COHORT_COMMANDS_H_

#include "CLI/CLI.hpp"

namespace cohort::tools {

void RegisterResolveCommand(CLI::App& app, int& exit_code);
void RegisterLaunchCommand(CLI::App& app, int& exit_code);
void RegisterTaskCommand(CLI::App& app, int& exit_code);
void RegisterCoordinatorCommand(CLI::App& app, int& exit_code);
void RegisterStatusCommand(CLI::App& app, int& exit_code);
void RegisterKvCommand(CLI::App& app, int& exit_code);
void RegisterServerCommand(CLI::App& app, int& exit_code);
void RegisterRunCommand(CLI::App& app, int& exit_code);
void RegisterBenchCommand(CLI::App& app, int& exit_code);
void RegisterUiCommand(CLI::App& app, int& exit_code);

}  // namespace cohort::tools

#endif  // COHORT_TOOLS_COHORT_COMMANDS_H_
