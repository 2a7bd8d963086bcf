// Worker: one task's WorkerService, in process (docs/runtime.md). The gRPC
// service (grpc_worker_service.h) forwards to it; a master on the same task
// calls it directly.
//
//   WorkerEnv env;
//   env.task_name = "/job:ps/replica:0/task:0";
//   env.device = &device;          // "/job:ps/replica:0/task:0/device:CPU:0"
//   env.worker_cache = &cache;     // where the other tasks' workers are
//   Worker worker(env);
//   ...
//   worker.Stop(absl::UnavailableError(...));  // on a clean server stop
//
// What it keeps (all in memory; lost when the process ends):
//  - Worker sessions (§1.5). A shared session (isolate_session_state false)
//    runs on env.device, so variables live in the device's ResourceMgr and
//    outlive the session. An isolated session gets a Device of its own with
//    the same name and incarnation (worker_session.h): its ResourceMgr is
//    dropped with the session. Creating a session for a master_task whose
//    incarnation changed removes that master's older sessions (TF's INFO
//    line is logged) and cancels their steps.
//  - Registered graphs per session: Graph::FromGraphDef, every node's
//    device must be env.device's name, and one Executor built with the
//    request's feeds, fetches and targets plus every Send node as a target.
//  - Per-step rendezvous (rendezvous_mgr.h), request-id windows of 100,000
//    for RunGraph and RecvTensor, and the running steps.
//
// RPC behaviour (error messages are the reference's, exactly):
//  - GetStatus: this task's device with type CPU and its incarnation.
//  - CreateWorkerSession: see above; InvalidArgument `Session must be
//    non-empty.`; InvalidArgument when server_def.job_name/task_index name
//    another task (empty job_name is accepted); AlreadyExists when the
//    handle exists with other settings; an identical repeat is OK.
//  - DeleteWorkerSession: removes the session and its graphs, cancels its
//    running steps (Cancelled); unknown handles are OK.
//  - RegisterGraph / DeregisterGraph / RunGraph: Aborted `Session handle is
//    not found: <h>. Possibly this worker ("<task>") just restarted.` with
//    the WorkerPossiblyRestarted payload (worker_errors.h); Aborted `Graph
//    handle is not found: <g>` (RunGraph) / `... Possibly, this worker just
//    restarted.` (DeregisterGraph); InvalidArgument naming the node (bad
//    graph, or a node placed on another device).
//  - RunGraph: Aborted `The same RunGraph (Worker) request was received
//    twice. ...` for a repeated request_id (not executed); feeds must come
//    in RegisterGraph feed order (a non-empty name must match; count must
//    match), decoded by worker_tensor_coding.h rules; runs on its own step
//    thread (the caller is never blocked) with the step's rendezvous, its
//    own CancellationManager and deadline = the earlier of now +
//    timeout_in_ms (if > 0) and opts' deadline; answers the fetches in
//    registration order. Step errors keep their code; node errors read
//    `node 'x' (op Y) on <task>: ...`; DeadlineExceeded when the deadline
//    passes; Cancelled (derived) after opts->StartCancel(); Cancelled when
//    its session is deleted; Stop's status after Stop; Aborted `Cleanup
//    <id>` (derived) when the step was already cleaned up.
//  - CleanupGraph: aborts and forgets the step's rendezvous (Aborted
//    `Cleanup <id>` for what still waits or arrives later); always OK.
//  - CleanupAll: clears the named containers of env.device's ResourceMgr
//    (empty list = its default container); always OK.
//  - RecvTensor: dedup (`RecvTensor (GrpcWorker)`); InvalidArgument for a
//    malformed key or a src device not on this task; Aborted `RecvTensor
//    expects a different device incarnation: <a> vs. <b>. ...` (a = the
//    key's, b = this device's, decimal); waits without holding a thread for
//    the step's matching Send and answers {tensor, is_dead=false,
//    send_start_micros}; the step's abort status when it is aborted
//    (Aborted `Cleanup <id>` at once for a cleaned step); Cancelled
//    `RecvTensor cancelled for <step_id>` after opts->StartCancel(), which
//    drops only this waiter (the step goes on); DeadlineExceeded at opts'
//    deadline.
//  - RegisterGraph with config.experimental.collective_group_leader set
//    gives the session's device a collective group resolver
//    (collective_resolver.h) asking that task, unless it has one.
//  - CompleteGroup / CompleteInstance: this task as a collective group
//    leader (collective_leader.h), deadlines from opts.
//  - After Stop(status), every call answers that status (the Server and
//    ~Worker pass Unavailable `server <task> is stopping`).
//
// Callbacks (`done`) run exactly once, never under a Worker lock, on the
// calling thread (quick calls and errors), a step thread (RunGraph), the
// thread that sent the tensor or aborted the step (RecvTensor), or the
// worker's timer thread (RecvTensor deadline or cancel); never inside the
// caller's opts->StartCancel(). CallOptions deadlines are compared with
// env.env's clock.
//
// Thread safety: thread-safe.
#ifndef COHORT_RUNTIME_WORKER_H_
#define COHORT_RUNTIME_WORKER_H_

#include <cstddef>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "cohort/runtime/worker_interface.h"

namespace cohort {
class Device;
class Env;
class KernelRegistry;
class OpRegistry;
}  // namespace cohort

namespace cohort::runtime {

struct WorkerEnv {
  // "/job:J/replica:0/task:T".
  std::string task_name;
  // Required; not owned; must outlive the Worker. Named
  // task_name + "/device:CPU:0"; it holds the shared ResourceMgr and the
  // incarnation.
  Device* device = nullptr;
  // Where Recvs from other tasks go (RecvTensor). May be null when no graph
  // receives from another task. Not owned; used only while the Worker runs
  // steps, so it may be created after the Worker (e.g. a GrpcWorkerCache
  // that points back at it).
  WorkerCache* worker_cache = nullptr;
  Env* env = nullptr;                       // Null = Env::Default().
  const OpRegistry* ops = nullptr;          // Null = standard ops.
  const KernelRegistry* kernels = nullptr;  // Null = standard kernels.
  // Collective groups (collective_resolver.h): the host this task's ring
  // endpoints listen on, an address the other tasks reach it by, and the
  // job token they require. The Server passes its own.
  std::string collective_host = "127.0.0.1";
  std::string job_token;
};

class Worker final : public WorkerInterface {
 public:
  // CHECK-fails when env.device is null or not named after env.task_name.
  explicit Worker(WorkerEnv env);
  // Stop()s if needed, then waits for every step thread to finish.
  ~Worker() override;
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

#define COHORT_RUNTIME_WORKER_OVERRIDE_(Name)                       \
  void Name##Async(CallOptions* opts, const Name##Request* request, \
                   Name##Response* response, StatusCallback done) override;
  COHORT_WORKER_RPCS(COHORT_RUNTIME_WORKER_OVERRIDE_)
#undef COHORT_RUNTIME_WORKER_OVERRIDE_

  // RecvTensor without the TensorProto: the same checks, waits and errors
  // as RecvTensorAsync (above), answering the sender's Tensor itself (its
  // buffer shared, not copied). The tensor data plane and in-process
  // callers use it.
  void RecvTensorValueAsync(CallOptions* opts, const RecvTensorRequest* request,
                            RecvTensorValue* value,
                            StatusCallback done) override;

  // RunGraph run on the calling thread: it returns once `done` ran.
  void RunGraphOnCallerThread(CallOptions* opts, const RunGraphRequest* request,
                              RunGraphResponse* response,
                              StatusCallback done) override;

  // The port of this task's tensor data plane (tensor_data_service.h), or
  // 0 for none; GetStatus advertises it (GetStatusResponse.tensor_port).
  void SetTensorPort(int port);

  // Clean stop: from now on every call answers `status` (the Server passes
  // Unavailable `server <task> is stopping`; an OK status means that one);
  // running steps end with it, pending RecvTensors and remote Recvs too. Blocks
  // until every running RunGraph has answered, i.e. its `done` returned
  // (promptly: steps are cancelled; a kernel already computing finishes
  // first). Idempotent; later calls keep the first status. Must not be
  // called from a `done` callback of this worker.
  void Stop(const absl::Status& status);

  const std::string& task_name() const;

  // For tests: RunGraph calls not yet answered, and live step rendezvous.
  size_t NumRunningSteps() const;
  size_t NumStepRendezvous() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace cohort::runtime

#endif  // COHORT_RUNTIME_WORKER_H_
