// LocalSession: runs a graph in this process, like TensorFlow 1.x's
// DirectSession: create from a GraphDef, extend it, run it with feeds,
// fetches and targets, and keep variables alive across runs.
//
//   auto session = LocalSession::Create(graph_def);
//   COHORT_RETURN_IF_ERROR((*session)->Run({}, {}, {"init"}, nullptr));
//   std::vector<Tensor> out;
//   COHORT_RETURN_IF_ERROR((*session)->Run({{"x", x}}, {"loss:0"}, {"train"},
//   &out));
//
// Contract:
//  - Feeds name Placeholder outputs ("x" or "x:0"); fetches name outputs
//    ("node:i"); targets name nodes run for their effects. Errors (unknown
//    nodes, feeding a non-placeholder, missing feeds, bad feed dtype/shape,
//    kernel failures) are InvalidArgument / FailedPrecondition naming the
//    node, and the session stays usable.
//  - Run caches the pruned executor per (feeds, fetches, targets)
//    signature; MakeCallable does the same explicitly and RunCallable skips
//    every per-run lookup except the handle (the fast path: no string
//    parsing, no map building).
//  - RunOptions::timeout (or SessionOptions::default_timeout) bounds a run:
//    DeadlineExceeded, and the step is cancelled.
//  - Variables live in the session's device ResourceMgr across runs; Reset
//    drops them (all, or the given containers).
//  - Close cancels running steps; later calls fail with FailedPrecondition.
//
// Thread safety: thread-safe; concurrent Run/RunCallable calls run as
// independent steps. Extend waits for no step but must not race with
// MakeCallable of the same nodes (it takes the graph lock exclusively).
// Run blocks until the step finishes or times out.
#ifndef COHORT_GRAPH_LOCAL_SESSION_H_
#define COHORT_GRAPH_LOCAL_SESSION_H_

#include <atomic>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "cohort/graph.pb.h"
#include "cohort/graph/cancellation.h"
#include "cohort/graph/device.h"
#include "cohort/graph/executor.h"
#include "cohort/graph/graph.h"
#include "cohort/graph/session.h"
#include "cohort/graph/tensor.h"

namespace cohort {

class Env;
class KernelRegistry;
class OpRegistry;

struct SessionOptions {
  Env* env = nullptr;                       // Null = Env::Default().
  const OpRegistry* op_registry = nullptr;  // Null = standard ops.
  const KernelRegistry* kernels = nullptr;  // Null = standard kernels.
  // Threads of the CPU device's pool; <= 0 = hardware threads.
  int num_threads = 0;
  std::string device_name = "/job:localhost/replica:0/task:0/device:CPU:0";
  // Applied when RunOptions::timeout is zero; zero = no timeout.
  absl::Duration default_timeout = absl::ZeroDuration();
  // Memory budgets of the session's device and its steps (memory_budget.h):
  // an allocation over either fails the step with ResourceExhausted naming
  // the node. Zero fields take the process defaults.
  MemoryLimits memory;
};

class LocalSession : public Session {
 public:
  // InvalidArgument naming the node for a bad graph.
  static absl::StatusOr<std::unique_ptr<LocalSession>> Create(
      const GraphDef& graph, const SessionOptions& options = SessionOptions());
  ~LocalSession() override;
  LocalSession(const LocalSession&) = delete;
  LocalSession& operator=(const LocalSession&) = delete;

  // Adds nodes (which may refer to existing ones). On error the graph is
  // unchanged.
  absl::Status Extend(const GraphDef& graph) override;

  absl::Status Run(const RunOptions& options,
                   const std::vector<std::pair<std::string, Tensor>>& feeds,
                   const std::vector<std::string>& fetches,
                   const std::vector<std::string>& targets,
                   std::vector<Tensor>* outputs) override;
  using Session::Run;

  // Prunes and builds the executor now; errors as Run's.
  absl::StatusOr<CallableHandle> MakeCallable(
      const CallableOptions& options) override;
  // `feeds` in the callable's feed order; `fetches` gets its fetches.
  // `options` null = the callable's own. InvalidArgument for an unknown
  // handle.
  absl::Status RunCallable(CallableHandle handle,
                           const std::vector<Tensor>& feeds,
                           std::vector<Tensor>* fetches,
                           const RunOptions* options = nullptr) override;
  absl::Status ReleaseCallable(CallableHandle handle) override;

  // Cancels running steps and refuses further calls. Idempotent.
  absl::Status Close() override;
  // Drops variables and other resources: all, or only `containers`.
  absl::Status Reset(const std::vector<std::string>& containers = {}) override;

  Device* device() { return device_.get(); }
  // The session's graph as a GraphDef.
  absl::Status GetGraphDef(GraphDef* out);

 private:
  struct Callable {
    std::unique_ptr<Executor> executor;
    RunOptions run_options;
  };
  explicit LocalSession(const SessionOptions& options);
  absl::StatusOr<std::unique_ptr<Executor>> BuildExecutor(
      const std::vector<std::string>& feeds,
      const std::vector<std::string>& fetches,
      const std::vector<std::string>& targets);
  absl::Status RunExecutor(Executor* executor, const RunOptions& options,
                           const std::vector<Tensor>& feeds,
                           std::vector<Tensor>* fetches);
  absl::Status CheckOpen() const;

  SessionOptions options_;
  Env* env_;
  std::unique_ptr<Device> device_;
  CancellationManager cancellation_;
  std::atomic<int64_t> next_step_id_{1};
  std::atomic<bool> closed_{false};

  absl::Mutex graph_mu_;
  std::unique_ptr<Graph> graph_ ABSL_GUARDED_BY(graph_mu_);

  mutable absl::Mutex mu_;
  CallableHandle next_handle_ ABSL_GUARDED_BY(mu_) = 1;
  absl::flat_hash_map<CallableHandle, std::shared_ptr<Callable>> callables_
      ABSL_GUARDED_BY(mu_);
  // Run()'s cache, keyed by the signature.
  absl::flat_hash_map<std::string, std::shared_ptr<Callable>> run_cache_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace cohort

#endif  // COHORT_GRAPH_LOCAL_SESSION_H_
