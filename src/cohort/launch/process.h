// Child processes for the gang launcher: the launcher's name for
// base/subprocess.h (spawn a program in its own process group, tied to the
// spawning thread, wait for it, signal its group; RunProgram to run one to
// its end with a deadline), where the contracts are stated.
//
// Why the primitive lives in base/: Env::RunCommand, which resolvers in
// cluster/ (below launch/) call, runs on it, so there is one way to spawn a
// child for every layer. The launcher keeps including this header.
#ifndef COHORT_LAUNCH_PROCESS_H_
#define COHORT_LAUNCH_PROCESS_H_

#include "cohort/base/subprocess.h"

namespace cohort::launch {

using ::cohort::DescribeCommand;
using ::cohort::EnvironmentWith;
using ::cohort::ExitInfo;
using ::cohort::ProgramRun;
using ::cohort::RunProgram;
using ::cohort::RunProgramOptions;
using ::cohort::Subprocess;

}  // namespace cohort::launch

#endif  // COHORT_LAUNCH_PROCESS_H_
