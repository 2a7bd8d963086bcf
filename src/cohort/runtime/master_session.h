// MasterSession: one client session on a master (docs/runtime.md): the
// session's graph, the workers it found at creation, and per signature (feeds,
// fetches, targets) the partitions registered on those workers. Internal to the
// master.
//
// Contract:
//  - Create discovers the devices of every task that the config's device
//    filters match (and always the master's own task), retrying tasks that
//    do not answer yet until the discovery deadline, then creates a worker
//    session with the same handle on each. Errors name the task and its
//    address.
//  - Run/RunCallable: one step. Every partition's RunGraph starts in
//    parallel; the first root error cancels the others and is returned with
//    the task it came from; CleanupGraph goes to every partition afterwards,
//    success or not. A step that outlives its deadline is cancelled and
//    answers DeadlineExceeded naming the tasks still running.
//  - The (feeds, fetches, targets) signature is placed, partitioned and
//    registered once and reused by later runs.
//  - Close cancels running steps (Cancelled with `why`), waits for them,
//    deregisters every graph and deletes the worker sessions (10 s each,
//    failures only logged). Later calls fail with FailedPrecondition
//    `Session is closed.`.
//
// Thread safety: thread-safe; concurrent runs are independent steps.
#ifndef COHORT_RUNTIME_MASTER_SESSION_H_
#define COHORT_RUNTIME_MASTER_SESSION_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "cohort/cluster.pb.h"
#include "cohort/config.pb.h"
#include "cohort/graph/graph.h"
#include "cohort/master.pb.h"
#include "cohort/runtime/call_options.h"
#include "cohort/runtime/worker_interface.h"

namespace cohort {
class Env;
}  // namespace cohort

namespace cohort::runtime {

// What a master's sessions share.
struct MasterEnv {
  std::string task;                // "/job:worker/replica:0/task:0"
  std::string device;              // this task's device, full name
  ServerDef server_def;            // handed to CreateWorkerSession
  WorkerCache* workers = nullptr;  // Not owned.
  Env* env = nullptr;              // Not owned; the clock.
  const OpRegistry* op_registry = nullptr;
  uint64_t incarnation = 0;  // This master's, random non-zero.
  // A step's deadline when neither the step nor the session's config sets
  // one (server.h's kDefaultStepTimeout; infinite: none).
  absl::Duration default_step_timeout = absl::InfiniteDuration();
  // Non-OK when the coordination service reports `task` lost (and it has
  // not come back): session discovery then fails at once, naming it,
  // instead of waiting out its timeout. Null: no such knowledge.
  std::function<absl::Status(const std::string& task)> lost_task_status;
};

class MasterSession {
 public:
  // Discovers devices and creates the worker sessions (see contract).
  // Gives up with Cancelled when `opts` (may be null) is cancelled or
  // `stop()` returns true (checked at least every few seconds).
  static absl::StatusOr<std::shared_ptr<MasterSession>> Create(
      const MasterEnv* env, std::string handle, const GraphDef& graph,
      const ConfigProto& config, CallOptions* opts,
      const std::function<bool()>& stop);
  ~MasterSession();

  const std::string& handle() const { return handle_; }
  const std::vector<DeviceAttributes>& devices() const { return devices_; }

  // Aborted `Current version is <n> but caller expected <m>.` on a version
  // mismatch; InvalidArgument naming the node (graph unchanged).
  absl::StatusOr<int64_t> Extend(const GraphDef& graph,
                                 int64_t current_version);

  // `opts` (may be null) lets the caller cancel the step.
  absl::Status Run(CallOptions* opts, const RunStepRequest& request,
                   RunStepResponse* response);

  absl::StatusOr<int64_t> MakeCallable(const CallableOptionsProto& options);
  absl::Status RunCallable(CallOptions* opts, const RunCallableRequest& request,
                           RunCallableResponse* response);
  absl::Status ReleaseCallable(int64_t handle);

  // Ends every running step that has a partition on `task` with `status`
  // (the task was lost; its calls may never return on their own).
  void AbortStepsOn(const std::string& task, const absl::Status& status);

  // Ends running steps with `why` (Cancelled for Close and GC, Unavailable
  // for a server stop), waits, releases everything on the workers.
  // Idempotent.
  void Close(const absl::Status& why);

  // The last time a call used this session or a step of it ended (session
  // GC), and whether a step runs now (a running session is never idle).
  absl::Time last_access() const;
  bool running() const;

 private:
  struct Signature;  // One registered (feeds, fetches, targets).
  // Something in flight that Close and AbortStepsOn may end: a step, or
  // the registration of a signature's partitions.
  struct Running {
    virtual ~Running() = default;
    virtual void Abort(const absl::Status& why) = 0;
    std::vector<std::string> tasks;  // Those it waits on.
  };
  struct Step;
  struct Registration;

  MasterSession(const MasterEnv* env, std::string handle,
                const ConfigProto& config);

  absl::Status Discover(CallOptions* opts, const std::function<bool()>& stop);
  absl::Status CreateWorkerSessions();
  // Registration waits at most until `deadline`.
  absl::StatusOr<std::shared_ptr<Signature>> GetOrRegister(
      const std::vector<std::string>& feeds,
      const std::vector<std::string>& fetches,
      const std::vector<std::string>& targets, absl::Time deadline);
  absl::StatusOr<std::shared_ptr<Signature>> Register(
      const std::vector<std::string>& feeds,
      const std::vector<std::string>& fetches,
      const std::vector<std::string>& targets, absl::Time deadline);
  // Adds / removes something in flight (FailedPrecondition once closed).
  absl::Status AddRunning(Running* r);
  void RemoveRunning(Running* r);
  // Runs one step of `sig` with the feeds in signature order; fills
  // `fetches` in signature order.
  absl::Status RunSignature(CallOptions* opts, const Signature& sig,
                            std::vector<const TensorProto*> feeds,
                            int64_t timeout_in_ms,
                            std::vector<TensorProto>* fetches);
  // The step's timeout: its own, else the session config's
  // operation_timeout_in_ms, else the server's default (may be infinite).
  absl::Duration StepTimeout(int64_t timeout_in_ms) const;
  absl::Time StepDeadline(int64_t timeout_in_ms) const;
  absl::Time RegisterDeadline(int64_t timeout_in_ms) const;
  void CleanupStep(const Signature& sig, int64_t step_id);
  void Deregister(const Signature& sig);
  void Touch();
  absl::Status CheckOpen() const;
  uint64_t NewStepId();

  // Constant after Create.
  const MasterEnv* const env_;
  const std::string handle_;
  const ConfigProto config_;
  std::vector<DeviceAttributes> devices_;
  std::vector<std::string> tasks_;  // Tasks of devices_, same order.
  const uint64_t step_id_base_;
  std::atomic<uint64_t> next_step_{0};  // Publishes nothing; a counter.

  mutable absl::Mutex graph_mu_;
  std::unique_ptr<Graph> graph_ ABSL_GUARDED_BY(graph_mu_);
  int64_t graph_version_ ABSL_GUARDED_BY(graph_mu_) = 0;

  mutable absl::Mutex mu_;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time last_access_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, std::shared_ptr<Signature>> signatures_
      ABSL_GUARDED_BY(mu_);
  int64_t next_callable_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<int64_t, std::shared_ptr<Signature>> callables_
      ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<Running*> running_ ABSL_GUARDED_BY(mu_);
};

}  // namespace cohort::runtime

#endif  // COHORT_RUNTIME_MASTER_SESSION_H_
