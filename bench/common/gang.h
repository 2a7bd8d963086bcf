// Running one measurement as a gang of processes, the way a user's job
// runs: `cohort launch`'s library starts N copies of this binary (with the
// suite's child flags); partition 0 prints its result lines tagged with
// kResultTag, and the suite collects them.
//
//   // in the child:
//   PrintChildResult(Json{{"suite","collective"},{"metric",...},...});
//   // in the suite:
//   GangRun run{.suite = "collective", .world = 2,
//               .child_args = {"--child", "--mib", "64"}, .rep = rep};
//   if (!RunGang(run, &log)) rc = 1;   // an error line says why
//
// Thread safety: thread-compatible.
#ifndef COHORT_BENCH_COMMON_GANG_H_
#define COHORT_BENCH_COMMON_GANG_H_

#include <string>
#include <vector>

#include "bench/common/peer.h"
#include "cohort/base/json.h"

namespace cohort::bench {

// Marks a child's result line in the gang's output.
inline constexpr char kResultTag[] = "BENCH ";

// Prints `line` (a measurement) as a tagged result line on stdout.
void PrintChildResult(const Json& line);

// The command that re-runs this suite: this binary, and inside the `cohort`
// binary "bench <suite>".
std::vector<std::string> SelfCommand(const std::string& suite);

// `flag` when given (a suite's --train-ps), else the program `name` beside
// this binary (build/bin holds cohort, the suites' binaries and train_ps
// alike).
std::string ProgramBesideThisBinary(const std::string& name,
                                    const std::string& flag);

struct GangRun {
  std::string suite;
  int world = 2;
  std::vector<std::string> child_args;  // after SelfCommand(suite)
  int rep = 0;
  std::string note;                    // added to every result line
  Json error_params = Json::object();  // params of the error line, if any
  std::vector<std::string> env;        // extra "KEY=VALUE" for every task
  // A chief task and world - 1 workers (TF_CONFIG, as `cohort launch
  // --chief --workers N`) rather than a barrier-mode gang; the chief's
  // result lines are collected.
  bool chief = false;
};

// Launches the gang and waits for it. When every member exits 0, partition
// 0's (the chief's) result lines get "rep" (and "note") and go through
// log->Print. Returns false, printing only an error line (with the gang's
// output) and none of partition 0's lines, when any member fails, partition 0
// prints no result or prints one that is not JSON.
bool RunGang(const GangRun& run, MeasurementLog* log);

}  // namespace cohort::bench

#endif  // COHORT_BENCH_COMMON_GANG_H_
