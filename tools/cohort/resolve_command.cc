// `cohort resolve`: placeholder until the cluster layer lands.
#include "tools/cohort/commands.h"

namespace cohort::tools {

void RegisterResolveCommand(CLI::App& app, int& exit_code) {
  app.add_subcommand("resolve", "print the resolved cluster");
}

}  // namespace cohort::tools
