// CoordinationService: the transport-agnostic heart of job coordination.
//
// One instance per job. It tracks every task of the job (job name, index),
// each task's incarnation and liveness (heartbeats), propagates a task's
// failure to every other task (PollForError long-polls), and offers a
// key-value store, named reusable barriers, alive-task agreement and a
// versioned job-state watch. Behaviour follows TensorFlow's coordination
// service (docs/coordination.md lists the decision tables and deviations).
//
// The service never sees gRPC: coordination_rpc_handler.h maps wire messages
// onto it, grpc_coordination_service.h serves it over gRPC and
// coordination_server.h embeds all of that in a process.
//
// Blocking operations (register-with-barrier, barrier, blocking get, watches,
// GetAliveTasks, PollForError, shutdown with a shutdown barrier) take a
// callback and return at once; the callback runs later, from whichever
// thread completes the operation (another caller's thread or the service's
// timer thread), never with a service lock held, exactly once. Deadlines are
// on the injected Env's clock; failure detection fires at the instant a
// task's heartbeat deadline passes (latency = heartbeat timeout + timer
// wake-up), not from a periodic scan.
//
// Every error the service returns carries a kCoordinationErrorUrl payload
// (cohort.coord.CoordinationServiceError), so clients can tell service
// answers from transport failures; barrier errors also carry kBarrierErrorUrl.
//
// Thread safety: thread-safe.
#ifndef COHORT_COORD_COORDINATION_SERVICE_H_
#define COHORT_COORD_COORDINATION_SERVICE_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "cohort/base/deadline_timer.h"
#include "cohort/base/env.h"
#include "cohort/coord/key_value_store.h"

namespace cohort::coord {

inline constexpr char kCoordinationErrorUrl[] =
    "type.googleapis.com/cohort.coord.CoordinationServiceError";
inline constexpr char kBarrierErrorUrl[] =
    "type.googleapis.com/cohort.coord.BarrierError";
inline constexpr char kShutdownBarrierId[] = "[Shutdown]";
inline constexpr char kInitBarrierId[] = "[Init]Wait_for_all_tasks_to_register";

struct TaskId {
  std::string job;
  int index = 0;

  std::string ToString() const;  // "worker:1"
  // The inverse of ToString: "JOB:INDEX" with a non-empty job and an index
  // >= 0; anything else is InvalidArgument quoting `text`.
  static absl::StatusOr<TaskId> Parse(absl::string_view text);
  friend bool operator<(const TaskId& a, const TaskId& b) {
    return std::tie(a.job, a.index) < std::tie(b.job, b.index);
  }
  friend bool operator==(const TaskId& a, const TaskId& b) {
    return a.job == b.job && a.index == b.index;
  }
};

enum class TaskState { kDisconnected, kConnected, kError };
const char* TaskStateName(TaskState state);  // "disconnected", ...

// True when `status` came from a coordination service (it carries the
// kCoordinationErrorUrl payload); false for transport errors.
bool IsServiceError(const absl::Status& status);
// True for the Cancelled answer of a service that stopped on purpose.
bool IsServiceStopped(const absl::Status& status);
// The task a service error names as its source, if any.
std::optional<TaskId> ErrorSourceTask(const absl::Status& status);

struct CoordinationServiceOptions {
  // The job's tasks: job name -> number of tasks (indices 0..n-1).
  std::map<std::string, int> jobs;
  // A CONNECTED task silent this long goes to ERROR (Unavailable).
  absl::Duration heartbeat_timeout = absl::Seconds(10);
  // > 0: ShutdownTask waits at a shutdown barrier of all connected,
  // non-recoverable tasks for this long.
  absl::Duration shutdown_barrier_timeout = absl::ZeroDuration();
  // Failures of tasks in these jobs are not propagated; their tasks may
  // re-register with a new incarnation at any time.
  std::set<std::string> recoverable_jobs;
  // A task put in ERROR by a heartbeat timeout may re-register with a new
  // incarnation.
  bool allow_new_incarnation_to_reconnect = false;
  // Registration waits at kInitBarrierId until every task registered, for
  // at most cluster_register_timeout.
  bool register_with_barrier = false;
  absl::Duration cluster_register_timeout = absl::Hours(1);
  // Caps on state whose keys the tasks choose: distinct barrier ids (a new
  // id beyond it fails with ResourceExhausted), and the key-value store's.
  size_t max_barrier_ids = 65536;
  KeyValueLimits kv_limits;
  Env* env = nullptr;  // nullptr: Env::Default()
};

struct TaskStateSnapshot {
  TaskId task;
  TaskState state = TaskState::kDisconnected;
  uint64_t incarnation = 0;
  absl::Status error;
  absl::Time error_time = absl::InfinitePast();
  absl::Duration heartbeat_age = absl::InfiniteDuration();  // never
  bool recoverable = false;
  bool shut_down = false;
};

struct BarrierSnapshot {
  std::string id;
  int64_t counter = 0;
  TaskId initiator;
  std::vector<TaskId> arrived;
  std::vector<TaskId> missing;
  absl::Duration remaining;
};

struct JobStatus {
  uint64_t service_incarnation = 0;
  int64_t version = 0;
  std::vector<TaskStateSnapshot> tasks;
  std::vector<BarrierSnapshot> barriers;  // in progress only
  std::string job_state;                  // "running", "finished", "failed"
};

struct AliveTask {
  TaskId task;
  uint64_t incarnation = 0;
};

class CoordinationService {
 public:
  using StatusCallback = std::function<void(absl::Status)>;
  using CounterCallback = std::function<void(absl::StatusOr<int64_t>)>;
  using AliveCallback =
      std::function<void(absl::StatusOr<std::vector<AliveTask>>)>;
  using JobStateCallback = std::function<void(absl::StatusOr<JobStatus>)>;

  // InvalidArgument when the job list is empty or a count is not positive.
  static absl::StatusOr<std::unique_ptr<CoordinationService>> Create(
      CoordinationServiceOptions options);
  // Calls Stop().
  ~CoordinationService();
  CoordinationService(const CoordinationService&) = delete;
  CoordinationService& operator=(const CoordinationService&) = delete;

  uint64_t incarnation() const { return incarnation_; }
  const CoordinationServiceOptions& options() const { return options_; }

  // Fails every parked call (barriers Aborted, polls and KV waits
  // Cancelled) and rejects later calls with Internal. Idempotent.
  void Stop();

  // --- Membership --------------------------------------------------------
  // Decision table (docs/coordination.md): unknown task InvalidArgument;
  // disconnected -> connect; same incarnation -> OK (retry); new
  // incarnation -> Aborted (task ERROR, propagated) unless the task is
  // recoverable (then accepted); in ERROR -> Aborted unless recoverable or
  // (allow_new_incarnation_to_reconnect and the error was a heartbeat
  // timeout). Answers with the service incarnation; with
  // register_with_barrier only once every task registered.
  void RegisterTaskAsync(const TaskId& task, uint64_t incarnation,
                         std::function<void(absl::StatusOr<uint64_t>)> done);
  // Non-blocking. Aborted when the service restarted (service_incarnation
  // given and different), the task is in ERROR or its incarnation is stale;
  // InvalidArgument when unknown or not registered.
  absl::StatusOr<uint64_t> Heartbeat(const TaskId& task, uint64_t incarnation,
                                     uint64_t service_incarnation);
  // `incarnation` on ShutdownTaskAsync, ReportErrorToService, BarrierAsync
  // and CancelBarrier is the caller's own (the agent sends it once it has
  // registered). 0 means not given and is not checked (callers that predate
  // it). Given and not the task's current incarnation (also when the task
  // has none: it is not registered, e.g. after ResetForNextAttempt), the
  // call is refused with FailedPrecondition naming the task and both
  // incarnations, before it changes anything: it comes from a process of an
  // ended attempt (or an older process of the task) and must not shut down,
  // fail, or join or cancel the barriers of the task's present process.

  // Clean disconnect (after the shutdown barrier, if configured). A task
  // that shut down is never reported as failed and never blocks others'
  // shutdown. Idempotent: a second call is OK.
  void ShutdownTaskAsync(const TaskId& task, StatusCallback done,
                         uint64_t incarnation = 0);
  // ERROR/any -> DISCONNECTED so the task may register again.
  absl::Status ResetTask(const TaskId& task);
  // The task reports its own failure: ERROR and propagated.
  absl::Status ReportErrorToService(const TaskId& task,
                                    const absl::Status& error,
                                    uint64_t incarnation = 0);
  // Long-poll: answers only with the first propagated error (or Cancelled
  // at shutdown). FailedPrecondition when the task is not connected.
  // Aborted when `service_incarnation` (if not 0) is not this service's:
  // the service restarted and the task's registration is lost.
  void PollForErrorAsync(const TaskId& task, uint64_t incarnation,
                         StatusCallback done, uint64_t service_incarnation = 0);
  // Point query; empty `tasks` = all.
  absl::StatusOr<std::vector<TaskStateSnapshot>> GetTaskState(
      const std::vector<TaskId>& tasks);
  // Answers when the state version exceeds `after_version` (-1: now) or at
  // `deadline` with the current state.
  void WatchJobStateAsync(int64_t after_version, absl::Time deadline,
                          JobStateCallback done);
  JobStatus GetJobStatus();
  // Barrier-like agreement: waits until every CONNECTED task of `tasks`
  // (empty = all) asked, then answers all of them with the same alive set.
  // DeadlineExceeded at `deadline` naming who did not ask.
  void GetAliveTasksAsync(const TaskId& requester,
                          const std::vector<TaskId>& tasks, absl::Time deadline,
                          AliveCallback done);

  // --- Barriers ----------------------------------------------------------
  // Named, reusable via per-id counters (0, 1, 2, ...). The first arrival
  // fixes the deadline (its now + timeout). Empty `participants` = every
  // task of the job. Errors: DeadlineExceeded listing every missing task and
  // why (never registered / connected but not arrived / died at T);
  // Internal when a participant dies or shuts down while it is open or the
  // counter does not match; InvalidArgument for a bad participant list;
  // Cancelled after CancelBarrier; FailedPrecondition for a stale
  // `incarnation` (above).
  void BarrierAsync(const std::string& id, int64_t counter,
                    absl::Duration timeout, const TaskId& task,
                    const std::vector<TaskId>& participants,
                    CounterCallback done, uint64_t incarnation = 0);
  absl::Status CancelBarrier(const std::string& id, int64_t counter,
                             const TaskId& task, uint64_t incarnation = 0);

  // --- Key-value store ---------------------------------------------------
  // The KeyValueStore's operations (key_value_store.h for their errors and
  // caps). After Stop() every one fails with the service-stopped error, and
  // nothing can be written or parked any more.
  absl::Status InsertKeyValue(absl::string_view key, std::string value,
                              bool allow_overwrite);
  absl::StatusOr<std::string> TryGetKeyValue(absl::string_view key);
  absl::StatusOr<int64_t> IncrementKeyValue(absl::string_view key,
                                            int64_t delta);
  absl::StatusOr<CompareAndSwapResult> CompareAndSwapKeyValue(
      absl::string_view key, const std::optional<std::string>& expected,
      std::string desired);
  absl::StatusOr<std::vector<std::pair<std::string, std::string>>>
  ListKeyValueDir(absl::string_view dir);
  absl::Status DeleteKeyValue(absl::string_view key, bool is_directory);
  // Blocking get with a deadline on the Env clock (InfiniteFuture: none).
  void GetKeyValueAsync(const std::string& key, absl::Time deadline,
                        KeyValueStore::GetCallback done);
  void WatchKeyValueAsync(const std::string& key, int64_t after_version,
                          absl::Time deadline,
                          KeyValueStore::WatchCallback done);

  // --- Attempts (in process only: no RPC reaches these) -------------------
  // Ends the job's current attempt so that this service serves the next one:
  // a launcher keeps one service (one endpoint, one token) for the whole job
  // and starts every task afresh each attempt. In one step under the
  // service's lock:
  //   - every task goes to DISCONNECTED: its incarnation, error, heartbeat
  //     timer and shutdown are forgotten, its parked error poll ends Aborted
  //     naming `reason`, and the incarnation it had is retired, so that a
  //     process of an ended attempt (one the launcher failed to kill) is
  //     refused with FailedPrecondition instead of acting on the next
  //     attempt: when it registers again, and when it reports an error,
  //     shuts down, waits at or cancels a barrier with its incarnation
  //     given (the agent gives it; a call without one, 0, is not checked).
  //     One that makes itself a new incarnation cannot be told from a new
  //     process: stop an attempt's processes before starting the next;
  //   - the job's propagated error is forgotten: polls of the next attempt
  //     do not learn the last attempt's failure;
  //   - every barrier is forgotten (counters start at 0 again); open ones,
  //     GetAliveTasks rounds and shutdown-barrier waits end Aborted naming
  //     `reason`; a barrier deadline of the ended attempt that is already
  //     firing finds its barrier gone (barriers carry a service-wide
  //     generation) and never times out the next attempt's barrier of the
  //     same id and counter;
  //   - the state version advances (job-state watchers answer) and every
  //     task's new state goes to the task-state listeners;
  // then, in one step under the key-value store's lock
  // (KeyValueStore::DeleteAllExcept): every key except those under
  // `keep_key_prefixes` (compared after normalisation, e.g.
  // "cohort/launch/") is deleted, with its watchers told (present=false);
  // every get and watch still parked (of any key, kept ones too: they
  // belong to the ended attempt) ends Aborted naming `reason`; and the
  // deletion records of keys outside the kept prefixes are dropped, so the
  // next attempt sees those keys as a fresh service would (a watch from
  // version 0 parks until the key is first set).
  // The service incarnation stays: clients keep their target and token.
  // FailedPrecondition after Stop. The callbacks of the ended calls run on
  // the caller's thread before this returns.
  absl::Status ResetForNextAttempt(
      const std::vector<std::string>& keep_key_prefixes,
      absl::string_view reason);

  // --- Task-state listeners (in process only) -----------------------------
  // A listener is called with a task's new state after each of its
  // transitions: connected (registered), error (reported, heartbeat
  // timeout, a non-recoverable restart; a peer's failure reaching this task
  // is not a transition of this task), disconnected (shutdown, ResetTask,
  // ResetForNextAttempt).
  // Calls come in the order the service made the transitions, one at a time
  // per service, with no service lock held, on the thread whose call caused
  // them (an RPC thread, the timer's thread for a heartbeat timeout, the
  // caller of ResetForNextAttempt), or on a thread that was delivering
  // earlier transitions at the time. So a listener must not block: it records
  // or queues and returns (a launcher wakes its supervisor). It may call the
  // service, also to change state: the transitions it causes are delivered
  // after it returns, by the same thread.
  using TaskStateListener = std::function<void(const TaskStateSnapshot&)>;
  // Returns an id for RemoveTaskStateListener (never 0). Transitions before
  // this call are not replayed: read GetTaskState after adding.
  uint64_t AddTaskStateListener(TaskStateListener listener);
  // Once this returns the listener is not running and never runs again
  // (called from a listener, it returns at once; that listener's current
  // call finishes). It waits for a delivery in progress, so the caller must
  // not hold a lock that a listener takes. Unknown ids are ignored.
  void RemoveTaskStateListener(uint64_t id);

 private:
  struct Task {
    TaskState state = TaskState::kDisconnected;
    uint64_t incarnation = 0;
    absl::Time last_heartbeat = absl::InfinitePast();
    absl::Status error;
    absl::Time error_time = absl::InfinitePast();
    absl::Time disconnect_time = absl::InfinitePast();
    bool recoverable = false;
    bool ever_connected = false;
    bool shut_down = false;
    bool heartbeat_timeout_error = false;
    std::set<std::string> barriers;  // open barriers it is part of
    StatusCallback poll;
    uint64_t heartbeat_timer = 0;
    // Incarnations of ended attempts (ResetForNextAttempt): refused.
    std::set<uint64_t> retired;
  };
  // FailedPrecondition when `incarnation` (the caller's, 0: not given) is
  // given and is not `t`'s current one; OK otherwise.
  absl::Status StaleIncarnationLocked(const TaskId& task, const Task& t,
                                      uint64_t incarnation,
                                      absl::string_view what) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  struct Barrier {
    std::string id;
    int64_t counter = 0;
    bool done = false;
    absl::Status result;
    absl::Time deadline;
    TaskId initiator;
    bool all_tasks = true;
    std::set<TaskId> participants;
    std::map<TaskId, CounterCallback> waiting;  // arrived, not answered
    std::set<TaskId> arrived;
    uint64_t timer = 0;
    // Service-wide, never reused (next_barrier_generation_): a deadline
    // callback the timer already took when its barrier was forgotten
    // (ResetForNextAttempt restarts counters at 0) must not act on a later
    // barrier of the same id and counter.
    uint64_t generation = 0;
  };
  struct AliveRound {
    std::set<TaskId> tasks;
    std::map<TaskId, AliveCallback> waiting;
    uint64_t timer = 0;
  };
  struct Watcher {
    int64_t after_version;
    JobStateCallback done;
    uint64_t timer = 0;
  };
  using Callbacks = std::vector<std::function<void()>>;

  explicit CoordinationService(CoordinationServiceOptions options);

  absl::Status Error(absl::StatusCode code, const std::string& message,
                     const TaskId* source = nullptr,
                     bool reported = false) const;
  absl::Status BarrierStatus(absl::StatusCode code, const std::string& message,
                             const Barrier& barrier) const;
  // `code` + `message` with the service-stopped payload (this incarnation).
  absl::Status ServiceStoppedStatus(absl::StatusCode code,
                                    absl::string_view message) const;
  absl::Status StoppedError() const;
  absl::Status StopCancelled() const;
  absl::Status ServiceRestartedError(const TaskId& task,
                                     uint64_t known_incarnation) const;
  absl::Status UnknownTaskError(const TaskId& task) const;
  // The first check every task-facing call makes: the service stopped
  // (StoppedError, or StopCancelled for a long poll), the caller knows an
  // older service incarnation (ServiceRestartedError; 0 skips the check),
  // or `t` (the caller's task, looked up) is null (UnknownTaskError).
  // OK when none applies.
  absl::Status CallerStatusLocked(const TaskId& task, const Task* t,
                                  uint64_t service_incarnation = 0,
                                  bool long_poll = false) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Task* FindTaskLocked(const TaskId& task) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool IsRecoverable(const TaskId& task) const;
  void ConnectLocked(const TaskId& task, Task& t, uint64_t incarnation,
                     Callbacks* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Queues the task's new state for the listeners, and its delivery on
  // `out` (run after the lock is released).
  void NotifyTaskLocked(const TaskId& task, const Task& t, Callbacks* out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Hands queued task states to the listeners, unless another call on the
  // stack or another thread is already doing so (it then delivers them).
  void DeliverTaskStates();
  void ScheduleHeartbeatCheckLocked(const TaskId& task, Task& t)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Moves the task to ERROR, fails its barriers and (unless recoverable)
  // propagates `error` to every poller.
  void SetTaskErrorLocked(const TaskId& task, Task& t, absl::Status error,
                          Callbacks* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PropagateErrorLocked(const absl::Status& error, Callbacks* out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The task left (error, shutdown, restart): fail or leave its barriers.
  void LeaveBarriersLocked(const TaskId& task, Task& t, const std::string& why,
                           Callbacks* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FinishBarrierLocked(Barrier& b, absl::Status result, Callbacks* out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void MaybePassBarrierLocked(Barrier& b, Callbacks* out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string DescribeMissingLocked(const Barrier& b)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void StateChangedLocked(Callbacks* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CheckAliveRoundsLocked(Callbacks* out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CheckShutdownBarrierLocked(Callbacks* out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void DisconnectLocked(const TaskId& task, Task& t, Callbacks* out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  JobStatus JobStatusLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  TaskStateSnapshot SnapshotLocked(const TaskId& id, const Task& t) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<std::set<TaskId>> ResolveTasksLocked(
      const std::vector<TaskId>& tasks, const std::string& what)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const CoordinationServiceOptions options_;
  Env* const env_;
  const uint64_t incarnation_;
  KeyValueStore kv_;

  absl::Mutex mu_;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  std::map<TaskId, Task> tasks_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, Barrier> barriers_ ABSL_GUARDED_BY(mu_);
  uint64_t next_barrier_generation_ ABSL_GUARDED_BY(mu_) = 1;
  std::map<std::string, AliveRound> alive_rounds_ ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, Watcher> watchers_ ABSL_GUARDED_BY(mu_);
  uint64_t next_watcher_id_ ABSL_GUARDED_BY(mu_) = 1;
  int64_t version_ ABSL_GUARDED_BY(mu_) = 0;
  // The first propagated error; later polls get it at once.
  absl::Status propagated_error_ ABSL_GUARDED_BY(mu_);
  // Shutdown barrier: tasks waiting in ShutdownTask.
  std::map<TaskId, StatusCallback> shutdown_waiting_ ABSL_GUARDED_BY(mu_);
  absl::Time shutdown_deadline_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  uint64_t shutdown_timer_ ABSL_GUARDED_BY(mu_) = 0;

  // Task-state listeners and the states not yet handed to them, in
  // transition order (queued under mu_, then this lock).
  absl::Mutex listen_mu_ ABSL_ACQUIRED_AFTER(mu_);
  std::map<uint64_t, std::shared_ptr<TaskStateListener>> listeners_
      ABSL_GUARDED_BY(listen_mu_);
  uint64_t next_listener_id_ ABSL_GUARDED_BY(listen_mu_) = 1;
  std::deque<TaskStateSnapshot> task_states_ ABSL_GUARDED_BY(listen_mu_);
  // Whether a thread is delivering (DeliverTaskStates), and which.
  bool delivering_ ABSL_GUARDED_BY(listen_mu_) = false;
  std::thread::id delivering_thread_ ABSL_GUARDED_BY(listen_mu_);

  // Last: destroyed (joined) first, so no timer callback outlives the state.
  std::unique_ptr<DeadlineTimer> timer_;
};

}  // namespace cohort::coord

#endif  // COHORT_COORD_COORDINATION_SERVICE_H_
