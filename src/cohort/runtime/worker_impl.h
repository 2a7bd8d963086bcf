// Worker::Impl: the state behind Worker (worker.h). Internal; split from the
// header so worker.cc (sessions, graphs, lifecycle) and worker_steps.cc
// (RunGraph, RecvTensor) share it.
//
// Thread safety: thread-safe; mu_ guards only the stop state and the table
// of running steps, and is never held while a callback runs.
#ifndef COHORT_RUNTIME_WORKER_IMPL_H_
#define COHORT_RUNTIME_WORKER_IMPL_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "cohort/base/deadline_timer.h"
#include "cohort/base/env.h"
#include "cohort/graph/cancellation.h"
#include "cohort/graph/device.h"
#include "cohort/graph/tensor.h"
#include "cohort/runtime/collective_leader.h"
#include "cohort/runtime/recent_request_ids.h"
#include "cohort/runtime/rendezvous_mgr.h"
#include "cohort/runtime/worker.h"
#include "cohort/runtime/worker_session.h"
#include "cohort/runtime/worker_thread_pool.h"

namespace cohort::runtime {

// A RunGraph in progress: what cancels it, and why the worker did.
class RunningStep {
 public:
  RunningStep(std::string session_handle, int64_t step_id)
      : session_handle_(std::move(session_handle)), step_id_(step_id) {}

  const std::string& session_handle() const { return session_handle_; }
  int64_t step_id() const { return step_id_; }
  CancellationManager* cancellation() { return &cancellation_; }
  // Records `why` (the first reason wins) and cancels the step.
  void Cancel(const absl::Status& why);
  // The first reason given to Cancel; OK when nobody cancelled.
  absl::Status reason() const;

 private:
  const std::string session_handle_;
  const int64_t step_id_;
  CancellationManager cancellation_;
  mutable absl::Mutex mu_;
  absl::Status reason_ ABSL_GUARDED_BY(mu_);
};

class Worker::Impl {
 public:
  explicit Impl(WorkerEnv env);
  ~Impl();

#define COHORT_RUNTIME_WORKER_IMPL_METHOD_(Name)             \
  void Name(CallOptions* opts, const Name##Request* request, \
            Name##Response* response, const StatusCallback& done);
  COHORT_WORKER_RPCS(COHORT_RUNTIME_WORKER_IMPL_METHOD_)
#undef COHORT_RUNTIME_WORKER_IMPL_METHOD_

  // RecvTensor's logic, answering a Tensor (worker.h).
  void RecvTensorAsTensor(CallOptions* opts, const RecvTensorRequest* request,
                          runtime::RecvTensorValue* value,
                          const StatusCallback& done);
  // RunGraph: the step runs on a step thread, or on this one (then this
  // returns after `done`).
  void StartStep(CallOptions* opts, const RunGraphRequest* request,
                 RunGraphResponse* response, const StatusCallback& done,
                 bool on_caller_thread);
  // The data plane's port GetStatus advertises (0: none).
  void SetTensorPort(int port) { tensor_port_.store(port); }

  void Stop(const absl::Status& status);
  const std::string& task_name() const { return env_.task_name; }
  size_t NumRunningSteps() const;
  size_t NumStepRendezvous() const { return rendezvous_.NumSteps(); }

 private:
  struct StepCall;  // worker_steps.cc
  struct RecvCall;  // worker_steps.cc

  // OK, or the stop status once Stop was called.
  absl::Status CheckRunning() const;
  // Adds `step` to the running table; the stop status when stopping.
  absl::Status RegisterStep(uint64_t* id, std::shared_ptr<RunningStep> step);
  // Removes a step; `answering`: its `done` is about to run, and
  // AnswerSent() follows once it returned.
  void UnregisterStep(uint64_t id, bool answering);
  void AnswerSent();
  // Cancels every running step of `session_handle` with `why`.
  void CancelSessionSteps(const std::string& session_handle,
                          const absl::Status& why);

  absl::StatusOr<std::shared_ptr<RegisteredGraph>> BuildGraph(
      const RegisterGraphRequest& request, Device* device) const;
  absl::StatusOr<std::vector<Tensor>> DecodeFeeds(
      const RunGraphRequest& request, const RegisteredGraph& graph) const;
  absl::StatusOr<std::shared_ptr<StepCall>> PrepareStep(
      CallOptions* opts, const RunGraphRequest& request);

  void ExecuteStep(const std::shared_ptr<StepCall>& call, CallOptions* opts,
                   RunGraphResponse* response, const StatusCallback& done);
  absl::StatusOr<Rendezvous::ParsedKey> CheckRecvKey(
      const RecvTensorRequest& request) const;

  const WorkerEnv env_;

  RecentRequestIds run_graph_ids_;
  RecentRequestIds recv_tensor_ids_;
  WorkerSessionMgr sessions_;
  RendezvousMgr rendezvous_;
  DeadlineTimer timer_;  // RecvTensor deadlines.
  CollectiveLeader collective_leader_;
  // Graph handles: hex of a per-worker counter (TF GraphMgr); only unique
  // within this worker's life, which is what sessions last.
  std::atomic<uint64_t> next_graph_id_{0};
  // Publishes the tensor data plane's port to GetStatus (set once, after
  // the Server started the data plane).
  std::atomic<int> tensor_port_{0};

  mutable absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status stop_status_ ABSL_GUARDED_BY(mu_);
  uint64_t next_step_id_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<uint64_t, std::shared_ptr<RunningStep>> running_
      ABSL_GUARDED_BY(mu_);
  // Steps removed from running_ whose `done` has not returned yet.
  int answering_ ABSL_GUARDED_BY(mu_) = 0;

  // Last: destroyed first, so step threads are joined while everything
  // they use still exists.
  StepThreadPool step_pool_;
};

}  // namespace cohort::runtime

#endif  // COHORT_RUNTIME_WORKER_IMPL_H_
