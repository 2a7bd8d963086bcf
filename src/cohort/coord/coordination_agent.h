// CoordinationAgent: a task's handle on its job's coordination service.
//
//   CoordinationAgentOptions options;
//   options.task = {"worker", 1};
//   options.error_callback = [](const absl::Status& s) { ...; };
//   auto client = NewGrpcCoordinationClient(target, security);
//   auto agent = CoordinationAgent::Create(options, std::move(*client));
//   COHORT_RETURN_IF_ERROR((*agent)->Connect());
//   COHORT_RETURN_IF_ERROR((*agent)->WaitAtBarrier("step", absl::Minutes(1)));
//   ...
//   (*agent)->Shutdown();
//
// Connect() registers the task with a fresh random incarnation (retrying
// transport failures with backoff until register_timeout) and starts two
// threads: a dedicated heartbeat thread (every heartbeat_timeout / 2,
// independent of whatever the task computes) and a PollForError thread that
// long-polls for errors of other tasks. Transport blips on either are
// retried with exponential backoff and jitter until heartbeat_timeout has
// passed without contact, so one lost RPC never kills a healthy job.
//
// The agent goes to ERROR on the first of: an error propagated by the
// service (another task died, timed out, restarted or reported an error),
// a heartbeat refused by the service (this task was declared dead, or the
// service restarted: a new service incarnation), or heartbeat_timeout
// without contact. `error_callback` then runs exactly once, on an agent
// thread. With reconnect_after_heartbeat_timeout the agent instead
// re-registers with a new incarnation when the service declared it dead
// (the service must allow it: recoverable job or
// allow_new_incarnation_to_reconnect), and heartbeat_timeout without contact
// (a stall, a partition) is not an error: it keeps trying until the service
// answers, then re-registers, so a task that comes back is watched again.
//
// A service that stops on purpose (the job finished) is not an error: the
// agent stops heartbeating and later calls fail with FailedPrecondition.
//
// Blocking methods block the caller up to the given timeout and return
// DeadlineExceeded naming what they waited for. In ERROR most methods
// return FailedPrecondition with the error.
//
// Thread safety: thread-safe. Do not call methods from error_callback
// other than state()/error().
#ifndef COHORT_COORD_COORDINATION_AGENT_H_
#define COHORT_COORD_COORDINATION_AGENT_H_

#include <cstdint>
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
#include "cohort/base/backoff.h"
#include "cohort/base/env.h"
#include "cohort/coord/coordination_client.h"
#include "cohort/coord/coordination_service.h"
#include "cohort/coord/key_value_store.h"

namespace cohort::coord {

struct CoordinationAgentOptions {
  TaskId task;
  absl::Duration heartbeat_timeout = absl::Seconds(10);
  // Default: heartbeat_timeout / 2.
  absl::Duration heartbeat_interval = absl::ZeroDuration();
  absl::Duration register_timeout = absl::Hours(1);
  // ShutdownTask RPC deadline (the service's shutdown barrier may take this
  // long).
  absl::Duration shutdown_timeout = absl::Seconds(30);
  // Deadline of every call that does not wait by design (key-value calls,
  // error reports, alive checks add their own wait to it): a service that
  // stops answering fails the call with DeadlineExceeded instead of hanging
  // the task.
  absl::Duration rpc_timeout = absl::Seconds(30);
  // The error long poll is re-issued this often; between re-issues a dead
  // connection is found by gRPC keepalive (rpc/transport.h).
  absl::Duration poll_timeout = absl::Seconds(60);
  bool reconnect_after_heartbeat_timeout = false;
  bool poll_for_errors = true;
  Env* env = nullptr;  // nullptr: Env::Default()
  std::function<void(const absl::Status&)> error_callback;
};

class CoordinationAgent {
 public:
  enum class State { kDisconnected, kConnected, kError, kShutDown };

  // InvalidArgument for a task without a job name.
  static absl::StatusOr<std::unique_ptr<CoordinationAgent>> Create(
      CoordinationAgentOptions options,
      std::unique_ptr<CoordinationClient> client);
  // Shuts down cleanly if connected, then joins the agent threads.
  ~CoordinationAgent();
  CoordinationAgent(const CoordinationAgent&) = delete;
  CoordinationAgent& operator=(const CoordinationAgent&) = delete;

  // Blocks until registered (or the service's registration barrier passed).
  // The service's answer on refusal (Aborted: restarted task or task in
  // error; InvalidArgument: not part of the job); DeadlineExceeded when the
  // service stayed unreachable for register_timeout.
  absl::Status Connect();
  // Waits at the service's shutdown barrier (if configured) and
  // disconnects. Idempotent. Never turns a finished job into a failure.
  absl::Status Shutdown();
  // Reports a local failure: the task goes to ERROR and the service
  // propagates the error to every other task.
  absl::Status ReportError(const absl::Status& error);

  State state();
  absl::Status error();
  uint64_t incarnation();
  uint64_t service_incarnation();
  const TaskId& task() const { return options_.task; }

  // --- Key-value store (values are bytes) ---------------------------------
  absl::Status InsertKeyValue(const std::string& key, const std::string& value,
                              bool allow_overwrite = false);
  // As InsertKeyValue (not retried), without waiting for the answer: the
  // write is sent before this returns, and `done` gets the service's answer
  // later, on the client's completion thread or a thread that waits for
  // another call. On the framed transport (one connection per process) the
  // service handles it before any call this thread makes afterwards, so a
  // set and the get that follows cost one round trip together (TCPStore's
  // set never waits for an answer at all).
  void InsertKeyValueAsync(const std::string& key, const std::string& value,
                           bool allow_overwrite, StatusCallback done);
  // Blocks until the key exists; DeadlineExceeded after `timeout`.
  absl::StatusOr<std::string> GetKeyValue(const std::string& key,
                                          absl::Duration timeout);
  absl::StatusOr<std::string> TryGetKeyValue(const std::string& key);
  absl::StatusOr<int64_t> IncrementKeyValue(const std::string& key,
                                            int64_t delta);
  absl::StatusOr<CompareAndSwapResult> CompareAndSwapKeyValue(
      const std::string& key, const std::optional<std::string>& expected,
      const std::string& desired);
  absl::StatusOr<std::vector<std::pair<std::string, std::string>>>
  GetKeyValueDir(const std::string& dir);
  absl::Status DeleteKeyValue(const std::string& key);
  // Blocks until the key's version exceeds `after_version`.
  absl::StatusOr<KeyValueWatchResult> WatchKeyValue(const std::string& key,
                                                    int64_t after_version,
                                                    absl::Duration timeout);

  // --- Barriers and membership --------------------------------------------
  // Named, reusable: the agent numbers each use of `id` (0, 1, 2, ...).
  // Empty `tasks` = every task of the job. FailedPrecondition when this
  // agent is already waiting at `id`.
  absl::Status WaitAtBarrier(const std::string& id, absl::Duration timeout,
                             const std::vector<TaskId>& tasks = {});
  // Cancels this agent's current (or next) use of `id`.
  absl::Status CancelBarrier(const std::string& id);
  absl::StatusOr<std::vector<AliveTask>> GetAliveTasks(
      const std::vector<TaskId>& tasks, absl::Duration timeout);
  absl::StatusOr<std::vector<TaskStateInfo>> GetTaskState(
      const std::vector<TaskId>& tasks);

 private:
  CoordinationAgent(CoordinationAgentOptions options,
                    std::unique_ptr<CoordinationClient> client);

  // Issues one RPC and waits for it (or for Abandon of `pending`).
  template <typename Request, typename Response>
  absl::Status Call(
      void (CoordinationClient::*method)(const Request&, Response*,
                                         const CallOptions&, StatusCallback),
      const Request& request, Response* response, CallOptions options);
  absl::Status CheckUsable();
  // Options for a call that does not wait by design: options_.rpc_timeout.
  CallOptions RpcCallOptions() const;
  // Repeats `fn` (an idempotent call) while it fails in transport
  // (Unavailable without the service payload), with backoff and jitter, for
  // at most heartbeat_timeout after the first failure, and never past
  // `deadline` (a blocking call's own timeout: the service being down must
  // not stretch a 3 s get to the heartbeat timeout).
  template <typename Fn>
  absl::Status Retry(Fn fn, absl::Time deadline = absl::InfiniteFuture());
  absl::Status Register(uint64_t incarnation, absl::Time deadline);
  void HeartbeatLoop();
  void PollLoop();
  // First transition to ERROR: records it, stops the threads' work, runs
  // the callback (outside the lock). Later calls are ignored.
  void SetError(absl::Status error);
  // A fresh backoff for one retry loop (the waits between its attempts).
  Backoff RetryBackoff() const;
  bool WaitForStop(absl::Time deadline);

  const CoordinationAgentOptions options_;
  Env* const env_;
  const std::unique_ptr<CoordinationClient> client_;
  const absl::Duration interval_;

  absl::Mutex mu_;
  State state_ ABSL_GUARDED_BY(mu_) = State::kDisconnected;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  uint64_t incarnation_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t service_incarnation_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool service_stopped_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time last_contact_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int64_t> barrier_counters_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> barriers_in_flight_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<CallCancellation> poll_cancel_ ABSL_GUARDED_BY(mu_);
  std::thread heartbeat_thread_;
  std::thread poll_thread_;
};

const char* AgentStateName(CoordinationAgent::State state);

}  // namespace cohort::coord

#endif  // COHORT_COORD_COORDINATION_AGENT_H_
