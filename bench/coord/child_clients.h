// Client processes of `cohort bench coord`: this binary re-executed with
// --child, the job token in its environment (as `cohort launch` hands it to
// tasks, never on the command line), its stdout on a pipe that carries JSON
// lines back.
//
// Thread safety: thread-compatible (one Child per caller).
#ifndef COHORT_BENCH_COORD_CHILD_CLIENTS_H_
#define COHORT_BENCH_COORD_CHILD_CLIENTS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cohort/base/json.h"
#include "cohort/base/subprocess.h"

namespace cohort::bench {

// Move-only: owns the process (killed if the spawning thread ends).
struct Child {
  std::unique_ptr<Subprocess> process;
};

// Starts `/proc/self/exe bench coord ARGS` with COHORT_JOB_TOKEN=`token`.
absl::StatusOr<Child> SpawnChild(const std::vector<std::string>& args,
                                 const std::string& token);

// Reads the child's next output line (blocking); `buffer` keeps what came
// after it. Empty at EOF.
std::string ReadChildLine(Child& child, std::string& buffer);

// Waits for the child to end; returns its last output line as JSON.
// `out` holds what was read from it before. Internal naming the child
// (`index`) when it failed.
absl::StatusOr<Json> CollectChild(Child& child, int index,
                                  std::string out = "");

}  // namespace cohort::bench

#endif  // COHORT_BENCH_COORD_CHILD_CLIENTS_H_
