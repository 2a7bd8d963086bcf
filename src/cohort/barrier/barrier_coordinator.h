// BarrierCoordinator: the server side of barrier execution mode (Spark's
// BarrierCoordinator), independent of any transport.
//
// A gang of `num_tasks` tasks, identified by (stage_id, stage_attempt), runs
// a sequence of global syncs. Gangs exist only between OpenGang() and
// CloseGang(), called by whoever started the tasks (the launcher): a request
// never creates state, so nothing a peer sends sizes an allocation, and the
// state of finished attempts is freed. In each sync every task calls Barrier()
// or AllGather(message); when all have arrived, every caller gets the messages
// of all tasks ordered by partition id and the gang's epoch advances by one.
// The coordinator keeps one state per (stage, attempt) and enforces Spark's
// rules, with Spark's messages:
//   - one method per sync: a mix of BARRIER and ALL_GATHER fails every pending
//     requester ("Different barrier sync types found ...") and clears the
//     state (InvalidArgument);
//   - a request for a gang that is not open fails (NotFound);
//   - num_tasks must match the gang's (InvalidArgument, only that requester);
//   - the messages of one sync may total at most `max_sync_bytes`
//     (InvalidArgument, only the requester that would exceed it);
//   - a request whose epoch is not the current one fails only that requester
//     ("... has already finished. Maybe task T is not properly killed.";
//     FailedPrecondition);
//   - the first request of a sync starts a timer of `sync_timeout`; when it
//     expires every pending requester fails ("The coordinator didn't get all
//     barrier sync requests for barrier epoch E from Stage S (Attempt A)
//     within N second(s)." plus the partitions that did not arrive;
//     DeadlineExceeded) and the state is cleared;
//   - after a clear, every later request of that (stage, attempt) fails with
//     Aborted and the original reason, so a late task cannot start a fresh
//     sync on its own.
// Each sync's result is a fresh copy (SPARK-40932): a later sync never
// changes a result already handed out. The epoch advances only on success.
//
// Callbacks: Sync() takes a `done` callback that is called exactly once, on
// the calling thread (when the request completes the sync or is rejected) or
// on another request's thread, the timer's thread, or a Cancel/ClearStage
// caller. `done` is never called with the coordinator's lock held, and must
// not block (it typically finishes an RPC).
//
// Time: sync timeouts are entries of the coordinator's DeadlineTimer
// (base/deadline_timer.h), on the injected Env's clock (FakeEnv in tests),
// one per gang at a time: a sync that starts while the gang's entry is due
// no later than its own deadline adds no timer work (the entry, when it
// fires early, re-arms for the deadline then current), so the common path
// of back-to-back syncs costs no timer call. A timeout fails the sync at the
// instant its deadline passes.
//
// Thread safety: thread-safe.
#ifndef COHORT_BARRIER_BARRIER_COORDINATOR_H_
#define COHORT_BARRIER_BARRIER_COORDINATOR_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "cohort/base/deadline_timer.h"
#include "cohort/base/env.h"

namespace cohort::barrier {

enum class SyncMethod { kBarrier, kAllGather };

// "BARRIER" or "ALL_GATHER", as in Spark's messages.
const char* SyncMethodName(SyncMethod method);

struct SyncRequest {
  int num_tasks = 0;
  int64_t stage_id = 0;
  int stage_attempt = 0;
  int64_t task_attempt_id = 0;
  int64_t barrier_epoch = 0;
  int partition_id = 0;
  std::string message;
  SyncMethod method = SyncMethod::kBarrier;
};

// Messages of every task, index = partition id.
using SyncResult = std::vector<std::string>;
using SyncDone = std::function<void(absl::StatusOr<SyncResult>)>;

// A snapshot of one gang's state, for progress displays and tests.
struct GangSnapshot {
  int num_tasks = 0;
  // Current epoch; -1 once the state has been cleared by a failure.
  int64_t epoch = 0;
  // Partition ids waiting in the current sync, ascending.
  std::vector<int> waiting;
  // The reason the state was cleared, when it was.
  absl::Status failure;
};

class BarrierCoordinator {
 public:
  // Default cap on the bytes of one sync's messages together: what one
  // AllGather answer may carry, below the transports' 64 MiB frame cap.
  static constexpr size_t kDefaultMaxSyncBytes = size_t{60} << 20;

  // `env` must outlive the coordinator. `sync_timeout` must be positive
  // (Spark's spark.barrier.sync.timeout; its default is 365 days).
  BarrierCoordinator(Env* env, absl::Duration sync_timeout,
                     size_t max_sync_bytes = kDefaultMaxSyncBytes);
  // Stops the timer (a timeout already firing finishes first), then fails
  // every pending request with Unavailable.
  ~BarrierCoordinator();

  BarrierCoordinator(const BarrierCoordinator&) = delete;
  BarrierCoordinator& operator=(const BarrierCoordinator&) = delete;

  // Opens the gang (stage_id, stage_attempt) of `num_tasks` tasks at epoch
  // 0. InvalidArgument when num_tasks is not positive; AlreadyExists when
  // the gang is open. Never blocks.
  absl::Status OpenGang(int64_t stage_id, int stage_attempt, int num_tasks);

  // Fails the gang's pending requests with Aborted naming `reason` and
  // forgets it; later requests for it fail with NotFound. No-op when it is
  // not open. Never blocks.
  void CloseGang(int64_t stage_id, int stage_attempt,
                 const std::string& reason);

  // A fresh id for Sync() and Cancel(). Never blocks.
  uint64_t NewRequestId();

  // Joins `request` to its gang's current sync; calls `done` exactly once
  // (see the file comment for when and where). `request_id` comes from
  // NewRequestId() and lets the caller withdraw the request with Cancel().
  // Never blocks. Errors (through `done`): NotFound when the gang is not
  // open; InvalidArgument for a bad partition id, a num_tasks mismatch,
  // mixed methods or messages over max_sync_bytes; FailedPrecondition
  // for a stale epoch or a partition that is already waiting in this sync;
  // DeadlineExceeded on the sync timeout; Aborted when the gang's state was
  // cleared earlier or the gang was stopped with ClearStage; Cancelled after
  // Cancel(); Unavailable when the coordinator shuts down.
  void Sync(uint64_t request_id, SyncRequest request, SyncDone done);

  // Withdraws a pending request (its task went away: RPC cancelled). Its
  // partition counts as not arrived again; its `done` gets Cancelled. No-op
  // when the request is not pending (already answered or never seen).
  // Never blocks.
  void Cancel(uint64_t request_id);

  // Fails every pending request of (stage_id, stage_attempt) with Aborted
  // naming `reason`, and clears the gang's state so that later requests of
  // that attempt fail too. Used by the launcher when it stops an attempt.
  // Never blocks.
  void ClearStage(int64_t stage_id, int stage_attempt,
                  const std::string& reason);

  // The gang's state, or nullopt when no request of it was seen.
  std::optional<GangSnapshot> Snapshot(int64_t stage_id, int stage_attempt);

  absl::Duration sync_timeout() const { return sync_timeout_; }

 private:
  using GangKey = std::pair<int64_t, int>;

  struct Pending {
    uint64_t request_id;
    int partition_id;
    int64_t task_attempt_id;
    SyncDone done;
  };

  struct Gang {
    int num_tasks = 0;
    int64_t epoch = 0;
    std::vector<Pending> requesters;
    // Messages of the current sync, by partition id.
    std::vector<std::string> messages;
    std::set<SyncMethod> methods;
    // When the current sync times out; InfiniteFuture when idle.
    absl::Time deadline = absl::InfiniteFuture();
    // The gang's pending timer entry (0: none), when it is due, and its
    // generation (an entry that fires with another one is stale).
    uint64_t timer = 0;
    absl::Time timer_due = absl::InfiniteFuture();
    uint64_t timer_generation = 0;
    // Bytes of `messages` together (bounded by max_sync_bytes_).
    size_t message_bytes = 0;
    // Set when the state was cleared; every later request fails with it.
    absl::Status failure;
  };

  // A `done` to run once the lock is released.
  using Reply = std::pair<SyncDone, absl::StatusOr<SyncResult>>;

  // Fails every pending requester of `gang` with `status` and clears it.
  void FailGangLocked(Gang& gang, const absl::Status& status,
                      std::vector<Reply>& replies)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Checks `request` against the gang's state; the error to answer, if any.
  absl::Status CheckRequestLocked(const Gang& gang, const SyncRequest& request,
                                  const std::string& gang_name) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Hands every requester its copy of the messages and starts the next
  // epoch.
  void CompleteSyncLocked(Gang& gang, std::vector<Reply>& replies)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Makes sure a timer entry of gang `key` is due no later than its
  // deadline.
  void ArmTimerLocked(const GangKey& key, Gang& gang)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops the gang's timer entry (the gang goes away).
  void CancelTimerLocked(Gang& gang) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Timer entry `generation` of gang `key` fired: fails the gang's sync when
  // its deadline has passed, re-arms when a later sync's has not, and does
  // nothing when the gang is idle or the entry stale.
  void SyncTimedOut(GangKey key, uint64_t generation);

  Env* const env_;
  const absl::Duration sync_timeout_;
  const size_t max_sync_bytes_;

  absl::Mutex mu_;
  uint64_t next_request_id_ ABSL_GUARDED_BY(mu_) = 1;
  std::map<GangKey, Gang> gangs_ ABSL_GUARDED_BY(mu_);
  // request id -> gang, for Cancel().
  absl::flat_hash_map<uint64_t, GangKey> pending_ ABSL_GUARDED_BY(mu_);
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
  // Numbers every timer entry, so that an entry of a gang that closed (or
  // of a replaced entry) is never taken for a current one.
  uint64_t timer_generations_ ABSL_GUARDED_BY(mu_) = 0;

  // Last: its thread runs SyncTimedOut, which needs everything above.
  std::unique_ptr<DeadlineTimer> timer_;
};

}  // namespace cohort::barrier

#endif  // COHORT_BARRIER_BARRIER_COORDINATOR_H_
