// Worker sessions and their registered graphs (docs/runtime.md). Internal to
// Worker (worker.h); not for other callers.
//
// Resource isolation (the design choice of §1.5): kernels find the
// ResourceMgr through their Device, so a session with
// isolate_session_state gets a Device of its own (same name and thread
// count as the task's, hence its own ResourceMgr and pool), dropped with the
// session. A shared session uses the task's Device, so its variables
// outlive it. Device incarnations are the task Device's in both cases
// (GetStatus, RecvTensor), so an isolated session's Send/Recv keys are the
// same as a shared one's.
//
// Thread safety: WorkerSession and WorkerSessionMgr are thread-safe.
#ifndef COHORT_RUNTIME_WORKER_SESSION_H_
#define COHORT_RUNTIME_WORKER_SESSION_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "cohort/graph/device.h"
#include "cohort/graph/executor.h"
#include "cohort/graph/graph.h"
#include "cohort/worker.pb.h"

namespace cohort::runtime {

// One RegisterGraph: the validated partition and its executor.
struct RegisteredGraph {
  std::unique_ptr<Graph> graph;
  std::unique_ptr<Executor> executor;
  // As registered; RunGraph feeds come in `feeds` order and fetches are
  // answered in `fetches` order.
  std::vector<std::string> feeds;
  std::vector<std::string> fetches;
};

class WorkerSession {
 public:
  WorkerSession(const CreateWorkerSessionRequest& request,
                Device* shared_device);
  WorkerSession(const WorkerSession&) = delete;
  WorkerSession& operator=(const WorkerSession&) = delete;

  const std::string& handle() const { return handle_; }
  const std::string& master_task() const { return master_task_; }
  uint64_t master_incarnation() const { return master_incarnation_; }
  bool isolated() const { return own_device_ != nullptr; }
  // Where this session's kernels run and keep their variables.
  Device* device() const { return device_; }
  // True when `request` asks for this very session (an idempotent retry).
  bool SameAs(const CreateWorkerSessionRequest& request) const;

  void AddGraph(const std::string& graph_handle,
                std::shared_ptr<RegisteredGraph> graph);
  // Null when absent.
  std::shared_ptr<RegisteredGraph> FindGraph(
      const std::string& graph_handle) const;
  // False when absent.
  bool RemoveGraph(const std::string& graph_handle);

 private:
  const std::string handle_;
  const std::string master_task_;
  const uint64_t master_incarnation_;
  // Declared before graphs_ so the executors that point at it go first.
  const std::unique_ptr<Device> own_device_;
  Device* const device_;

  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<RegisteredGraph>> graphs_
      ABSL_GUARDED_BY(mu_);
};

class WorkerSessionMgr {
 public:
  // `shared_device` is the task's Device (not owned).
  WorkerSessionMgr(std::string task_name, Device* shared_device);

  // CreateWorkerSession (§1.4, §1.5). Sessions of the same master_task with
  // another master incarnation are removed first and appended to
  // `collected` (the caller cancels their steps), with TF's INFO line.
  // Errors: InvalidArgument `Session must be non-empty.`; InvalidArgument
  // when server_def names another task; AlreadyExists when the handle
  // exists with other settings (an identical repeat is OK).
  absl::Status Create(const CreateWorkerSessionRequest& request,
                      std::vector<std::shared_ptr<WorkerSession>>* collected);
  // Aborted "Session handle is not found" (worker_errors.h) when absent.
  absl::StatusOr<std::shared_ptr<WorkerSession>> Find(
      const std::string& handle) const;
  // Null when absent.
  std::shared_ptr<WorkerSession> Remove(const std::string& handle);
  std::vector<std::shared_ptr<WorkerSession>> RemoveAll();
  size_t size() const;

 private:
  absl::Status CheckServerDef(const CreateWorkerSessionRequest& request) const;

  const std::string task_name_;
  Device* const shared_device_;

  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<WorkerSession>> sessions_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace cohort::runtime

#endif  // COHORT_RUNTIME_WORKER_SESSION_H_
