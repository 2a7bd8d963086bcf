// The distribute coordinator (TensorFlow's distribute_coordinator; the
// rules, with their exact messages, are in docs/distribute.md):
// runs a training function (`worker_fn`) and an evaluation function
// (`eval_fn`) in the right tasks of a cluster with the right worker
// context, and starts the standard servers the tasks need.
//
//   DistributeCoordinatorOptions options;
//   options.worker_fn = [](const Strategy* s) { return Train(s); };
//   options.strategy = &strategy;             // e.g. ParameterServerStrategy
//   options.mode = CoordinatorMode::kIndependentWorker;
//   COHORT_RETURN_IF_ERROR(RunDistributeCoordinator(options));
//
// Inputs (§2.1): TF_CONFIG (through the Env) gives the cluster and this
// task when `cluster_spec` is empty; its "rpc_layer" overrides the
// argument; its "environment" "google" replaces servers by a fake. No
// cluster at all: local mode (worker_fn, then eval_fn, each once here).
//
// Modes (§2.2), with a cluster:
//  - kStandaloneClient, task "" or "client": this process is the client.
//    Between-graph strategy (or none): one thread per chief and worker task
//    with a shared in-process barrier; in-graph: worker_fn once here. An
//    "evaluator" job gets one more thread running eval_fn. Other tasks start
//    a standard server and join it (block forever).
//  - kIndependentWorker: each task runs this. chief/worker start a server
//    (kept for the thread: a second call reuses it) and run worker_fn with
//    their own context (in-graph: only the chief runs it, with no task; the
//    others join); the evaluator runs eval_fn (a server only when the
//    evaluator job is in the cluster); ps starts a server and joins it.
//    The worker barrier is the coordination service's when the task's
//    server (or `coordination_agent`) has a connected agent, else none.
//
// Blocking: runs the functions on this thread or on threads it joins
// before returning; ps and non-client standalone tasks block in Join.
//
// Errors (§2.8): InvalidArgument `Unexpected coordinator mode: '<m>'`,
// `Unexpected task_type: '<t>'`, a TF_CONFIG with a cluster but no "task"
// in kIndependentWorker (names "task"), a task index not in the cluster
// (ClusterSpec's message), `You cannot run distribute coordinator in a
// `worker_fn`.` (nested call), TF_CONFIG that is not JSON; FailedPrecondition
// for an in-graph client of a cluster without chief or worker, and for a
// second call in one thread whose standard server would differ (names the
// field); the server factory's errors; otherwise the first error a
// worker_fn / eval_fn returned (the other threads still run to the end).
//
// Thread safety: thread-safe; calls on different threads are independent
// (each thread keeps its own standard server).
#ifndef COHORT_DISTRIBUTE_DISTRIBUTE_COORDINATOR_H_
#define COHORT_DISTRIBUTE_DISTRIBUTE_COORDINATOR_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "cohort/base/env.h"
#include "cohort/cluster/cluster_spec.h"
#include "cohort/config.pb.h"
#include "cohort/distribute/std_server.h"
#include "cohort/distribute/strategy.h"
#include "cohort/distribute/worker_context.h"

namespace cohort::coord {
class CoordinationAgent;
}  // namespace cohort::coord

namespace cohort::distribute {

enum class CoordinatorMode { kStandaloneClient, kIndependentWorker };

// "standalone_client" / "independent_worker" (any case).
// Errors: InvalidArgument `Unexpected coordinator mode: '<m>'`.
absl::StatusOr<CoordinatorMode> ParseCoordinatorMode(absl::string_view mode);
// "standalone_client" / "independent_worker".
std::string CoordinatorModeName(CoordinatorMode mode);

struct DistributeCoordinatorOptions {
  WorkerFn worker_fn;                  // empty: nothing to run
  const Strategy* strategy = nullptr;  // not owned; null = none
  // Empty: worker_fn (WARNING) when the cluster has an evaluator.
  WorkerFn eval_fn;
  const Strategy* eval_strategy = nullptr;  // null: none (WARNING)
  CoordinatorMode mode = CoordinatorMode::kStandaloneClient;
  // Empty: TF_CONFIG's "cluster" and "task".
  ClusterSpec cluster_spec;
  std::string task_type;  // "" = none
  int task_id = -1;       // -1 = none
  // Unset: a ConfigProto with allow_soft_placement.
  std::optional<ConfigProto> session_config;
  // TF_CONFIG's "rpc_layer" overrides it; "" = no scheme in targets.
  std::string rpc_layer = "grpc";

  // --- Injection -------------------------------------------------------
  Env* env = nullptr;                          // null: Env::Default()
  StdServerFactory* server_factory = nullptr;  // null: real servers
  // INDEPENDENT_WORKER barrier: this agent (connected, not owned, must
  // outlive the call) instead of the standard server's own.
  coord::CoordinationAgent* coordination_agent = nullptr;
  // How long WaitForOtherWorkers waits at the coordination barrier.
  absl::Duration barrier_timeout = absl::Minutes(30);
  // How long to wait for the server's agent to register before going on
  // without a barrier (logged).
  absl::Duration agent_register_timeout = absl::Minutes(2);
  // Called with each standard server this call starts or reuses (real,
  // factory-made or the Google fake), before running or joining; tests use
  // it to stop a server that would join forever.
  std::function<void(StdServer*)> on_std_server;
};

// Runs the coordinator; see the file comment. Returns OK or the first
// error (never worker_fn's value: C++ worker_fns return a Status).
absl::Status RunDistributeCoordinator(
    const DistributeCoordinatorOptions& options);

// TensorFlow's run_standard_tensorflow_server (§2.6): starts this task's
// standard server from TF_CONFIG alone and returns it started (the caller
// joins it). The server belongs to the calling thread (kept for reuse by a
// later call with the same arguments) and lives until that thread exits;
// the pointer is valid until then. `session_config` unset: an empty
// ConfigProto; its collective_group_leader is set (chief 0, else worker 0).
// Errors: InvalidArgument `"cluster" is not found in TF_CONFIG.`,
// `"task" is not found in TF_CONFIG.`, ``"task_type" is not found in the
// `task` part of TF_CONFIG.``, ``You must have `chief` or `worker` jobs in
// the `cluster_spec`.``; the factory's errors.
struct StandardServerOptions {
  std::optional<ConfigProto> session_config;
  Env* env = nullptr;
  StdServerFactory* server_factory = nullptr;
};
absl::StatusOr<StdServer*> RunStandardTensorflowServer(
    const StandardServerOptions& options = {});

}  // namespace cohort::distribute

#endif  // COHORT_DISTRIBUTE_DISTRIBUTE_COORDINATOR_H_
