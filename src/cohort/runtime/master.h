// Master: the MasterService of one task (master.proto; docs/runtime.md): the
// client sessions it created and the calls a client makes on them. Every server
// hosts one; clients reach it through GrpcMasterService (GrpcSession, `cohort
// run`).
//
// Errors, per call (exact wording, TF's where it has one):
//  - any call after Stop: Unavailable `server <task> is stopping`.
//  - CreateSession: InvalidArgument naming the node for a bad graph;
//    discovery and worker-session errors prefixed `CreateSession: <task>
//    (<address>): `; DeadlineExceeded naming every task that did not answer
//    in time.
//  - ExtendSession, RunStep, MakeCallable, RunCallable, ReleaseCallable on
//    an unknown handle: Aborted `Session <h> is not found.`.
//  - CloseSession, ListDevices on an unknown handle:
//    Aborted / InvalidArgument `Session <h> is not found. Possibly, this
//    master has restarted.`.
//  - RunStep: InvalidArgument `Duplicated feeds: <name>`; graph, feed and
//    node errors as LocalSession's; a repeated request_id: Aborted `The
//    same RunStep (Master) request was received twice. ...` (likewise
//    MakeCallable and RunCallable).
//  - RunCallable: InvalidArgument `No such callable handle: <n>` /
//    `Attempted to run callable after handle was released: <n>`.
//
// Blocking: every call blocks its caller (CreateSession for the
// discovery, RunStep for the step); `opts` (may be null) cancels a step.
// Session GC: with `session_gc_seconds` > 0 in the master's default config,
// a session idle longer than that is closed; its steps end Cancelled and
// later calls find no session.
//
// Thread safety: thread-safe.
#ifndef COHORT_RUNTIME_MASTER_H_
#define COHORT_RUNTIME_MASTER_H_

#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "cohort/master.pb.h"
#include "cohort/runtime/call_options.h"
#include "cohort/runtime/master_session.h"
#include "cohort/runtime/recent_request_ids.h"

namespace cohort::runtime {

class Master {
 public:
  // `env` fields are copied; what they point to must outlive the Master.
  // env.incarnation 0 = pick a random one.
  explicit Master(const MasterEnv& env);
  ~Master();  // Stop()
  Master(const Master&) = delete;
  Master& operator=(const Master&) = delete;

  uint64_t incarnation() const { return env_.incarnation; }

  // `opts` (may be null) cancels the discovery.
  absl::Status CreateSession(CallOptions* opts,
                             const CreateSessionRequest& request,
                             CreateSessionResponse* response);
  absl::Status ExtendSession(const ExtendSessionRequest& request,
                             ExtendSessionResponse* response);
  absl::Status RunStep(CallOptions* opts, const RunStepRequest& request,
                       RunStepResponse* response);
  absl::Status CloseSession(const CloseSessionRequest& request,
                            CloseSessionResponse* response);
  absl::Status ListDevices(const ListDevicesRequest& request,
                           ListDevicesResponse* response);
  absl::Status Reset(const ResetRequest& request, ResetResponse* response);
  absl::Status MakeCallable(const MakeCallableRequest& request,
                            MakeCallableResponse* response);
  absl::Status RunCallable(CallOptions* opts, const RunCallableRequest& request,
                           RunCallableResponse* response);
  absl::Status ReleaseCallable(const ReleaseCallableRequest& request,
                               ReleaseCallableResponse* response);

  // Closes every session (their steps end with `status`' message,
  // Unavailable) and refuses further calls. Idempotent.
  void Stop(const absl::Status& status);

  // Ends every running step with a partition on `task`
  // ("/job:ps/replica:0/task:0") with `status`: the server's coordination
  // watch calls it when that task is lost.
  // With `remember` (the task failed; a clean disconnect is a planned
  // restart, not a failure), also remembers `task` as lost: new sessions
  // that need it fail at once (MasterEnv::lost_task_status) until
  // TaskBack(task).
  void AbortStepsOn(const std::string& task, const absl::Status& status,
                    bool remember = false);
  // `task` is connected again (re-registered with the coordination service).
  void TaskBack(const std::string& task);

  // Test hook: runs one session-GC pass now (as the GC thread does every
  // 10 s), at the env's clock.
  void GcSessionsNow();

 private:
  absl::StatusOr<std::shared_ptr<MasterSession>> FindSession(
      const std::string& handle, bool restarted_hint) const;
  absl::Status CheckRunning() const;
  void GcLoop();

  MasterEnv env_;
  const int64_t gc_seconds_;
  RecentRequestIds recent_request_ids_;

  mutable absl::Mutex mu_;
  absl::Status stopped_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, std::shared_ptr<MasterSession>> sessions_
      ABSL_GUARDED_BY(mu_);
  // Tasks reported lost by AbortStepsOn and not back yet, with why.
  absl::flat_hash_map<std::string, absl::Status> lost_ ABSL_GUARDED_BY(mu_);

  std::thread gc_thread_;  // Only with gc_seconds_ > 0.
};

// Each master call by its request type, for callers that handle them alike
// (the gRPC service, LocalMaster); `opts` is used by the calls that take it.
absl::Status InvokeMaster(Master* master, CallOptions* opts,
                          const CreateSessionRequest& request,
                          CreateSessionResponse* response);
absl::Status InvokeMaster(Master* master, CallOptions* opts,
                          const ExtendSessionRequest& request,
                          ExtendSessionResponse* response);
absl::Status InvokeMaster(Master* master, CallOptions* opts,
                          const RunStepRequest& request,
                          RunStepResponse* response);
absl::Status InvokeMaster(Master* master, CallOptions* opts,
                          const CloseSessionRequest& request,
                          CloseSessionResponse* response);
absl::Status InvokeMaster(Master* master, CallOptions* opts,
                          const ListDevicesRequest& request,
                          ListDevicesResponse* response);
absl::Status InvokeMaster(Master* master, CallOptions* opts,
                          const ResetRequest& request, ResetResponse* response);
absl::Status InvokeMaster(Master* master, CallOptions* opts,
                          const MakeCallableRequest& request,
                          MakeCallableResponse* response);
absl::Status InvokeMaster(Master* master, CallOptions* opts,
                          const RunCallableRequest& request,
                          RunCallableResponse* response);
absl::Status InvokeMaster(Master* master, CallOptions* opts,
                          const ReleaseCallableRequest& request,
                          ReleaseCallableResponse* response);

}  // namespace cohort::runtime

#endif  // COHORT_RUNTIME_MASTER_H_
