// WorkerContext: what a `worker_fn` / `eval_fn` run by the distribute
// coordinator learns about its task (docs/distribute.md):
// task type and id, the master target to open sessions on, whether it is
// the chief, the configured session config and strategy properties, and a
// barrier among the chief and worker tasks.
//
//   absl::Status Train(const Strategy* strategy) {
//     const WorkerContext* ctx = CurrentWorkerContext();
//     Session session(ctx->master_target(), ctx->session_config());
//     if (ctx->is_chief()) { ...initialise... }
//     COHORT_RETURN_IF_ERROR(ctx->WaitForOtherWorkers());
//     ...
//   }
//
// The coordinator builds one context per call of a function (RunSingleWorker
// below) and makes it current on the calling thread for the duration of
// the call; CurrentWorkerContext() is null anywhere else. Contexts do not
// nest: RunSingleWorker on a thread that already has one is
// InvalidArgument "You cannot run distribute coordinator in a `worker_fn`."
//
// Thread safety: a WorkerContext is immutable after construction except
// for its barrier, which is thread-safe; share it freely among the threads
// a worker_fn starts (CurrentWorkerContext() is per thread, though).
#ifndef COHORT_DISTRIBUTE_WORKER_CONTEXT_H_
#define COHORT_DISTRIBUTE_WORKER_CONTEXT_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "cohort/cluster/cluster_spec.h"
#include "cohort/config.pb.h"
#include "cohort/distribute/strategy.h"
#include "cohort/distribute/worker_barrier.h"

namespace cohort::distribute {

// A worker_fn or eval_fn: gets this task's configured copy of the strategy
// (null when none was given) and reads CurrentWorkerContext().
using WorkerFn = std::function<absl::Status(const Strategy*)>;

class WorkerContext {
 public:
  // Built by RunSingleWorker; `strategy` is already configured (may be
  // null), `barrier` may be null (no barrier).
  WorkerContext(std::unique_ptr<Strategy> strategy, ClusterSpec cluster,
                std::string task_type, int task_id, ConfigProto session_config,
                std::string rpc_layer, std::shared_ptr<WorkerBarrier> barrier);

  const std::string& task_type() const { return task_type_; }  // "" = none
  int task_id() const { return task_id_; }                     // -1 = none
  // "" without a cluster. No task type (in-graph client): chief 0, else
  // worker 0. The evaluator: its own address when the evaluator job is in
  // the cluster, else "" (it then runs locally). Others: their own address.
  // Prefixed "<rpc_layer>://" when rpc_layer is not empty.
  const std::string& master_target() const { return master_target_; }
  // Tasks of the chief and worker jobs; 0 without a cluster.
  int num_workers() const { return num_workers_; }
  // No cluster, no task type, chief or evaluator; worker 0 without a chief.
  bool is_chief() const { return is_chief_; }
  // A cluster, and not the evaluator.
  bool distributed_mode() const { return distributed_mode_; }
  bool has_barrier() const { return barrier_ != nullptr; }
  const ConfigProto& session_config() const { return session_config_; }
  const ClusterSpec& cluster_spec() const { return cluster_; }
  // The configured strategy's properties; without a strategy (or one that
  // left a property unset) the chief's duties: is_chief().
  bool should_checkpoint() const;
  bool should_save_summary() const;
  bool experimental_should_init() const;
  const Strategy* strategy() const { return strategy_.get(); }  // null = none
  const std::string& rpc_layer() const { return rpc_layer_; }

  // Waits until every chief and worker task (STANDALONE_CLIENT: every
  // worker thread of this client) called it as often (§2.4). Without a
  // barrier returns OK at once (TensorFlow's behaviour where it has none).
  // Errors: the barrier's (CoordinationBarrier: DeadlineExceeded naming
  // the missing tasks; the agent's error).
  absl::Status WaitForOtherWorkers() const;

  // "[cluster_spec: ClusterSpec(...), task_type: 'worker', task_id: 1]" or
  // "[local]", for messages.
  std::string DebugString() const;

 private:
  const std::unique_ptr<Strategy> strategy_;
  const ClusterSpec cluster_;
  const std::string task_type_;
  const int task_id_;
  const ConfigProto session_config_;
  const std::string rpc_layer_;
  const std::shared_ptr<WorkerBarrier> barrier_;
  std::string master_target_;
  int num_workers_ = 0;
  bool is_chief_ = true;
  bool distributed_mode_ = false;
};

// The context of the worker_fn / eval_fn running on this thread; null
// outside.
const WorkerContext* CurrentWorkerContext();

// TensorFlow's `_run_single_worker`, for the coordinator: copies
// `session_config` and clones `strategy` (may be null), configures the copy
// (the evaluator without cluster or task; others with both; `cluster` empty
// = no cluster), makes the context current, runs `fn` and restores.
// Returns fn's status; an empty `fn` returns OK.
// Errors: InvalidArgument "You cannot run distribute coordinator in a
// `worker_fn`.\t<debug>" when this thread already runs in a context.
absl::Status RunSingleWorker(const WorkerFn& fn, const Strategy* strategy,
                             const ClusterSpec& cluster,
                             const std::string& task_type, int task_id,
                             const ConfigProto& session_config,
                             const std::string& rpc_layer,
                             std::shared_ptr<WorkerBarrier> barrier);

// The nesting error for a context described by `debug`.
absl::Status NestedCoordinatorError(const std::string& debug);

}  // namespace cohort::distribute

#endif  // COHORT_DISTRIBUTE_WORKER_CONTEXT_H_
