// WorkerInterface: the WorkerService calls (worker.proto) as a master or a
// peer worker makes them, whether the worker is in this process (Worker)
// or behind gRPC (GrpcRemoteWorker). Code above it never knows which.
//
// Contract:
//  - Every method is asynchronous: it returns at once and calls `done`
//    exactly once, on some thread, with the call's status; `response` is
//    filled only when the status is OK. `request`, `response` and `opts`
//    must stay alive until `done` runs.
//  - `opts` (may be null) carries the deadline (DeadlineExceeded when it
//    passes) and cancellation (Cancelled after opts->StartCancel()).
//  - Error codes and messages are the worker's (docs/runtime.md), whatever the
//  transport; a transport failure
//    is Unavailable naming the task and its address.
//
// Thread safety: implementations are thread-safe.
#ifndef COHORT_RUNTIME_WORKER_INTERFACE_H_
#define COHORT_RUNTIME_WORKER_INTERFACE_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cohort/graph/tensor.h"
#include "cohort/runtime/call_options.h"
#include "cohort/worker.pb.h"

namespace cohort::runtime {

using StatusCallback = std::function<void(const absl::Status&)>;

// The WorkerService RPCs: X(Name) for each, in worker.proto order.
#define COHORT_WORKER_RPCS(X) \
  X(GetStatus)                \
  X(CreateWorkerSession)      \
  X(DeleteWorkerSession)      \
  X(RegisterGraph)            \
  X(DeregisterGraph)          \
  X(RunGraph)                 \
  X(CleanupGraph)             \
  X(CleanupAll)               \
  X(RecvTensor)               \
  X(CompleteGroup)            \
  X(CompleteInstance)

// A RecvTensor's answer as a Tensor rather than a TensorProto.
struct RecvTensorValue {
  Tensor tensor;
  bool is_dead = false;
  int64_t send_start_micros = 0;
};

class WorkerInterface {
 public:
  virtual ~WorkerInterface() = default;

#define COHORT_RUNTIME_WORKER_METHOD_(Name)                                 \
  virtual void Name##Async(CallOptions* opts, const Name##Request* request, \
                           Name##Response* response, StatusCallback done) = 0;
  COHORT_WORKER_RPCS(COHORT_RUNTIME_WORKER_METHOD_)
#undef COHORT_RUNTIME_WORKER_METHOD_

  // RecvTensor answered as a Tensor: what the remote rendezvous calls. The
  // same semantics and errors as RecvTensorAsync; a transport that can skip
  // the TensorProto (the in-process Worker, the tensor data plane of
  // GrpcRemoteWorker) overrides it. This default calls RecvTensorAsync and
  // decodes the answer with worker_tensor_coding.h's rules.
  virtual void RecvTensorValueAsync(CallOptions* opts,
                                    const RecvTensorRequest* request,
                                    RecvTensorValue* value,
                                    StatusCallback done);

  // RunGraph from a caller that lends its thread until the step ends (the
  // master, for the partition of its own task): a worker in this process
  // runs the step on that thread, which saves two thread hand-offs per
  // step. The same semantics and errors as RunGraphAsync. This default is
  // RunGraphAsync, which may return before `done` runs.
  virtual void RunGraphOnCallerThread(CallOptions* opts,
                                      const RunGraphRequest* request,
                                      RunGraphResponse* response,
                                      StatusCallback done) {
    RunGraphAsync(opts, request, response, std::move(done));
  }
};

// Where a task's worker is: the master and the workers' remote rendezvous
// look workers up here by task name ("/job:ps/replica:0/task:0").
class WorkerCache {
 public:
  virtual ~WorkerCache() = default;
  // Every task of the cluster, sorted.
  virtual std::vector<std::string> ListTasks() const = 0;
  // NotFound naming the task when it is not in the cluster. The returned
  // worker stays valid for the cache's lifetime.
  virtual absl::StatusOr<WorkerInterface*> GetWorker(
      const std::string& task) = 0;
  // "host:port" of a task, for error messages; "" when unknown.
  virtual std::string TaskAddress(const std::string& task) const = 0;
};

// Blocking helper for tests and simple callers: runs `call` and waits for
// its `done`.
absl::Status WaitFor(const std::function<void(StatusCallback done)>& call);

}  // namespace cohort::runtime

#endif  // COHORT_RUNTIME_WORKER_INTERFACE_H_
