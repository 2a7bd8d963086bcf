// Session: the client's view of a graph it runs, whichever runtime runs it:
// LocalSession (this process) or runtime::GrpcSession (a cluster's master).
// Code written against Session runs on either (hooks, MonitoredSession,
// `cohort run`).
//
// Contract (both implementations):
//  - Feeds name Placeholder outputs ("x" or "x:0"); fetches name outputs
//    ("node:i"); targets name nodes run for their effects. Graph errors are
//    InvalidArgument naming the node; kernel errors keep their code; the
//    session stays usable after a failed run.
//  - RunOptions::timeout (or the session default) bounds a run:
//    DeadlineExceeded, and the step is cancelled everywhere.
//  - MakeCallable prunes (and, distributed, places and registers) once;
//    RunCallable takes feeds in the callable's feed order. Unknown handles
//    are InvalidArgument.
//  - A fetched tensor may share its buffer with a feed or another fetch (an
//    Identity, a Reshape, a reduction over no axis return their input's, as
//    in TensorFlow): copy it (DeepCopy) before writing into it. A run never
//    writes into a feed's buffer, and a kernel writes over an input only
//    when nothing else (feed, fetch, variable, other consumer) holds it.
//  - Close cancels running steps and is idempotent; later calls fail with
//    FailedPrecondition.
//  - Reset drops variables: of every container, or of `containers`.
//
// Thread safety: implementations are thread-safe; concurrent runs are
// independent steps.
#ifndef COHORT_GRAPH_SESSION_H_
#define COHORT_GRAPH_SESSION_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cohort/graph.pb.h"
#include "cohort/graph/tensor.h"

namespace cohort {

struct RunOptions {
  absl::Duration timeout = absl::ZeroDuration();  // Zero = session default.
};

struct CallableOptions {
  std::vector<std::string> feeds;
  std::vector<std::string> fetches;
  std::vector<std::string> targets;
  RunOptions run_options;
};

class Session {
 public:
  using CallableHandle = int64_t;

  virtual ~Session() = default;

  // Adds nodes (which may refer to existing ones). On error the graph is
  // unchanged.
  virtual absl::Status Extend(const GraphDef& graph) = 0;

  virtual absl::Status Run(
      const RunOptions& options,
      const std::vector<std::pair<std::string, Tensor>>& feeds,
      const std::vector<std::string>& fetches,
      const std::vector<std::string>& targets,
      std::vector<Tensor>* outputs) = 0;
  absl::Status Run(const std::vector<std::pair<std::string, Tensor>>& feeds,
                   const std::vector<std::string>& fetches,
                   const std::vector<std::string>& targets,
                   std::vector<Tensor>* outputs) {
    return Run(RunOptions(), feeds, fetches, targets, outputs);
  }

  virtual absl::StatusOr<CallableHandle> MakeCallable(
      const CallableOptions& options) = 0;
  // `options` null = the callable's own.
  virtual absl::Status RunCallable(CallableHandle handle,
                                   const std::vector<Tensor>& feeds,
                                   std::vector<Tensor>* fetches,
                                   const RunOptions* options = nullptr) = 0;
  virtual absl::Status ReleaseCallable(CallableHandle handle) = 0;

  virtual absl::Status Close() = 0;
  virtual absl::Status Reset(const std::vector<std::string>& containers) = 0;
};

}  // namespace cohort

#endif  // COHORT_GRAPH_SESSION_H_
