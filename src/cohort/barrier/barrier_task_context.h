// BarrierTaskContext: the task side of barrier execution mode (Spark's
// BarrierTaskContext). Every task of a gang started by `cohort launch` can
//
//   COHORT_ASSIGN_OR_RETURN(BarrierTaskContext* ctx,
//   BarrierTaskContext::Get()); COHORT_RETURN_IF_ERROR(ctx->Barrier()); // wait
//   for every task COHORT_ASSIGN_OR_RETURN(std::vector<std::string> all,
//                           ctx->AllGather("my part"));  // ordered by
//                           partition
//
// Get() reads the environment the launcher sets (kEnv* below). A task's
// syncs are numbered by a local epoch that advances only when a sync
// succeeds, so a task that failed a sync cannot slip into the next one.
//
// Cancellation: Cancel() (thread-safe) and CancelFromSignalHandler()
// (async-signal-safe) make a blocked Barrier()/AllGather() return Cancelled
// at once; the RPC is cancelled, so the coordinator withdraws the request.
// (The signal path sets a flag and writes to an eventfd; a small watcher
// thread of the context turns that into the RPC's cancellation.)
// Every later call fails with Cancelled too. A task killed by a signal with
// the default action simply dies; its connection closes and the coordinator
// withdraws its request the same way.
//
// Deadlines: a sync waits at most the coordinator's timeout (kEnvTimeout)
// plus a margin, so that the coordinator's own timeout message is the one a
// user sees (Spark's 365-day RPC timeout has the same purpose).
//
// Thread safety: thread-safe, but syncs are sequential: a second
// Barrier()/AllGather() while one is in flight fails with FailedPrecondition.
#ifndef COHORT_BARRIER_BARRIER_TASK_CONTEXT_H_
#define COHORT_BARRIER_BARRIER_TASK_CONTEXT_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "cohort/base/env.h"
#include "cohort/rpc/framed_client.h"
#include "cohort/rpc/transport.h"

namespace grpc {
class Channel;
class ClientContext;
}  // namespace grpc
namespace cohort {
class BarrierSyncRequest;
}  // namespace cohort

namespace cohort::barrier {

// The environment `cohort launch` gives every task of a gang.
inline constexpr char kEnvBarrierAddress[] = "COHORT_BARRIER_ADDRESS";
inline constexpr char kEnvPartitionId[] = "COHORT_PARTITION_ID";
inline constexpr char kEnvNumTasks[] = "COHORT_NUM_TASKS";
inline constexpr char kEnvAttemptNumber[] = "COHORT_ATTEMPT_NUMBER";
inline constexpr char kEnvStageId[] = "COHORT_STAGE_ID";
inline constexpr char kEnvTaskAttemptId[] = "COHORT_TASK_ATTEMPT_ID";
// The coordinator's low-latency TCP transport (barrier_framed_handler.h, on
// the job's coordination server's framed port); when set, syncs use it
// instead of gRPC.
inline constexpr char kEnvBarrierTcpAddress[] = "COHORT_BARRIER_TCP_ADDRESS";
// Comma-separated "host:port" of every task, ordered by partition id.
inline constexpr char kEnvTaskAddresses[] = "COHORT_TASK_ADDRESSES";
// The coordinator's sync timeout in seconds (may be fractional).
inline constexpr char kEnvTimeout[] = "COHORT_BARRIER_TIMEOUT_S";
// "worker:1": the task's name in logs.
inline constexpr char kEnvTaskName[] = "COHORT_TASK_NAME";
// A file holding the task's barrier epoch, so that successive processes of
// one task (e.g. `cohort task barrier` called twice by a shell script)
// continue each other's epoch sequence.
inline constexpr char kEnvEpochFile[] = "COHORT_BARRIER_EPOCH_FILE";
// How many times the launcher started this task again alone (--restart
// task, --elastic) before this process: "0" for its first process. A
// program may use it to tell a fresh start from a restart (torchrun's
// TORCHELASTIC_RESTART_COUNT).
inline constexpr char kEnvTaskRestart[] = "COHORT_TASK_RESTART";

// Spark's BarrierTaskInfo: where a task of the gang listens.
struct TaskInfo {
  std::string address;
};

class BarrierTaskContext {
  struct StubHolder;

 public:
  struct Options {
    std::string coordinator_address;  // "host:port" (gRPC)
    // "host:port" of the coordinator's TCP transport; when set, syncs use it.
    std::string tcp_address;
    int partition_id = 0;
    int num_tasks = 0;
    int attempt_number = 0;
    int64_t stage_id = 0;
    int64_t task_attempt_id = 0;
    // One per task, ordered by partition id (may be empty).
    std::vector<std::string> task_addresses;
    // The coordinator's sync timeout; the RPC deadline adds a margin.
    absl::Duration sync_timeout = absl::Hours(24 * 365);
    // When set: the epoch starts from this file's content (0 when missing)
    // and is written back after every successful sync.
    std::string epoch_file;
    // The job's token (rpc::kJobTokenEnvVar), proven on both transports.
    std::string job_token;
  };

  // The process's context, created on first use from the launcher's
  // environment (Env::Default()). FailedPrecondition naming the missing or
  // malformed variable when the process was not started by `cohort launch`.
  // The context lives until the process exits. Thread-safe.
  static absl::StatusOr<BarrierTaskContext*> Get();

  // Builds a context from `env`'s variables (for tests and embedders).
  static absl::StatusOr<std::unique_ptr<BarrierTaskContext>> FromEnv(Env* env);
  // Builds a context from explicit options. InvalidArgument on bad options;
  // FailedPrecondition when the epoch file exists but does not hold a number.
  static absl::StatusOr<std::unique_ptr<BarrierTaskContext>> Create(
      Options options);

  ~BarrierTaskContext();
  BarrierTaskContext(const BarrierTaskContext&) = delete;
  BarrierTaskContext& operator=(const BarrierTaskContext&) = delete;

  int partition_id() const { return options_.partition_id; }
  int attempt_number() const { return options_.attempt_number; }
  int num_tasks() const { return options_.num_tasks; }
  int64_t stage_id() const { return options_.stage_id; }
  int64_t task_attempt_id() const { return options_.task_attempt_id; }
  // Number of syncs this task has completed.
  int64_t epoch() const;

  // Addresses of every task, ordered by partition id.
  std::vector<TaskInfo> GetTaskInfos() const;

  // Blocks until every task of the gang has called Barrier() for the same
  // epoch. Errors: those of BarrierCoordinator::Sync (DeadlineExceeded on
  // the coordinator's timeout, InvalidArgument on mixed methods, Aborted when
  // the attempt was stopped, ...), Unavailable when the coordinator cannot
  // be reached, Cancelled after Cancel(). Each message names the partition.
  absl::Status Barrier();

  // Like Barrier(), and returns every task's message ordered by partition
  // id. The result is this caller's own copy.
  absl::StatusOr<std::vector<std::string>> AllGather(
      const std::string& message);

  // Makes a blocked or later sync return Cancelled at once. Thread-safe;
  // never blocks.
  void Cancel();

  // The same as Cancel() for signal handlers: async-signal-safe (it sets a
  // flag and writes to an eventfd; the waiting thread cancels the RPC).
  // Acts on the context returned by Get().
  static void CancelFromSignalHandler();

 private:
  explicit BarrierTaskContext(Options options);
  absl::StatusOr<std::vector<std::string>> Sync(bool all_gather,
                                                const std::string& message);
  absl::StatusOr<std::vector<std::string>> TcpSyncLocked(
      const std::string& where, const cohort::BarrierSyncRequest& request,
      absl::Duration wait);
  void Wake();
  // Cancels the in-flight RPC, if any.
  void CancelInFlight();
  void WatchForCancel();

  const Options options_;
  std::shared_ptr<grpc::Channel> channel_;
  rpc::TransportSecurity security_;
  std::unique_ptr<StubHolder> stub_;
  // Written by CancelFromSignalHandler() and the destructor.
  int wake_fd_ = -1;
  // The epoch file, opened on the first successful sync (only the syncing
  // thread touches it: syncs are sequential).
  int epoch_fd_ = -1;
  std::atomic<bool> cancel_requested_{false};
  std::atomic<bool> shutting_down_{false};
  std::thread watcher_;

  mutable absl::Mutex mu_;
  int64_t epoch_ ABSL_GUARDED_BY(mu_) = 0;
  bool in_flight_ ABSL_GUARDED_BY(mu_) = false;
  // The in-flight call's context, for cancellation.
  grpc::ClientContext* current_rpc_ ABSL_GUARDED_BY(mu_) = nullptr;
  // The TCP transport's connection (null: not connected yet, or dropped
  // after a transport failure) and whether a sync is using it.
  std::unique_ptr<rpc::FramedClient> tcp_ ABSL_GUARDED_BY(mu_);
  bool tcp_in_flight_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace cohort::barrier

#endif  // COHORT_BARRIER_BARRIER_TASK_CONTEXT_H_
