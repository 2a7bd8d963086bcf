// RendezvousMgr: the per-step rendezvous of one worker (docs/runtime.md).
//
// Every step that runs a partition on this worker, or whose tensors a peer
// asks for, has one RemoteRendezvous, created on first use by Find(step_id)
// and dropped by Cleanup(step_id):
//  - Send stores the tensor in the step's local table (never blocks).
//  - RecvAsync of a key whose src device is on this task waits in the local
//    table; one whose src device is on another task issues RecvTensor to
//    that task's worker (from the WorkerCache; RecvTensorValueAsync, so a
//    transport with a tensor data plane uses it) with the key and step id,
//    and a fresh random request id. StartAbort cancels such calls, so
//    whatever stops the step (its first error, cancellation, deadline,
//    Cleanup) also ends its RPCs; their `done` then gets the abort status.
//  - RecvLocalAsync is the RecvTensor handler's side: it waits in the local
//    table only, and a cancellation drops just that waiter (TF: gRPC may
//    cancel a RecvTensor on a transient network failure; the step goes on).
//
// Contract:
//  - Keys are used once per step: a second Send of a key still held is
//    InvalidArgument, as is a second concurrent Recv of one key.
//  - Every callback runs exactly once, never under a lock; it may run
//    inline, on the sending thread, on an RPC thread or on the thread that
//    aborts the step, and must not block.
//  - A step that succeeded here cleans itself up: once StepSucceeded(id)
//    was called (the worker's RunGraph of the step ended OK) and the
//    step's table is drained (every sent tensor taken, no waiter, no
//    RecvTensor of its own in flight), it is forgotten as by Cleanup, so a
//    master need not send CleanupGraph after a step that succeeded (one
//    RPC per task per step less). The worker reports the second half
//    through TakenFrom(id) after a peer took a tensor. A step that failed
//    anywhere still gets CleanupGraph, which drops what was left.
//  - Cleanup(step_id) aborts the step with Aborted `Cleanup <step_id>`
//    (derived, worker_errors.h) and forgets it. The last
//    `num_remembered_cleanups` (>= 10,000) cleaned ids are remembered:
//    Find for one of them is that Aborted at once, so a late RecvTensor
//    never re-creates state for a finished step. Cleanup of an unknown id
//    is OK (and remembers it).
//
// Thread safety: thread-safe.
#ifndef COHORT_RUNTIME_RENDEZVOUS_MGR_H_
#define COHORT_RUNTIME_RENDEZVOUS_MGR_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "cohort/base/env.h"
#include "cohort/graph/cancellation.h"
#include "cohort/graph/rendezvous.h"
#include "cohort/graph/rendezvous_table.h"
#include "cohort/runtime/call_options.h"
#include "cohort/runtime/worker_interface.h"

namespace cohort::runtime {

// "/job:J/replica:R/task:T" of a full device name; InvalidArgument when the
// name does not say its job and task.
absl::StatusOr<std::string> TaskOfDevice(absl::string_view device);

class RemoteRendezvous : public Rendezvous,
                         public std::enable_shared_from_this<RemoteRendezvous> {
 public:
  // `sent_at` is when the matching Send ran (Env time).
  using LocalRecvCallback = RendezvousTable::TimedDoneCallback;

  // `worker_cache` may be null when no Recv of this worker reads from
  // another task (such a Recv then fails FailedPrecondition).
  RemoteRendezvous(int64_t step_id, std::string task_name,
                   WorkerCache* worker_cache, Env* env);
  // Fails what still waits with Cancelled.
  ~RemoteRendezvous() override;

  int64_t step_id() const { return step_id_; }

  absl::Status Send(const ParsedKey& key, const Tensor& value) override;
  void RecvAsync(const ParsedKey& key, DoneCallback done) override;
  void StartAbort(const absl::Status& status) override;

  // Waits for `key` in the local table. When `cancellation` (may be null;
  // must outlive `done`) is cancelled first, the waiter is dropped and
  // `done` gets Cancelled `RecvTensor cancelled for <step_id>`.
  void RecvLocalAsync(const ParsedKey& key, CancellationManager* cancellation,
                      LocalRecvCallback done);

  // Marks the step as succeeded on this worker (no more Sends or Recvs of
  // its own will come). Returns drained().
  bool MarkSucceeded();
  // True once MarkSucceeded was called and nothing is held or in flight.
  bool drained() const;

 private:
  // A RecvTensor call to another task, pending in the table so that an
  // abort cancels it and the step is not drained while it runs.
  struct RemoteCall : RendezvousTable::Pending {
    void Cancel() override { opts.StartCancel(); }
    CallOptions opts;
    RecvTensorRequest request;
    RecvTensorValue value;
    absl::Time issued;  // For PhaseStats; set only while enabled.
  };

  bool IsLocal(const ParsedKey& key) const;
  void RecvRemote(const ParsedKey& key, DoneCallback done);
  void FinishRemote(const std::shared_ptr<RemoteCall>& call,
                    absl::Status status, const DoneCallback& done);

  const int64_t step_id_;
  const std::string task_name_;
  WorkerCache* const worker_cache_;
  Env* const env_;

  // Set once by MarkSucceeded; read by drained(). Sequentially consistent,
  // so of a MarkSucceeded and a TakenFrom that race, the later one sees
  // both the flag and the emptied table (rendezvous_mgr.cc).
  std::atomic<bool> succeeded_{false};
  // Declared last: destroyed first, answering what still waits while the
  // rest of this object is intact.
  RendezvousTable table_;
};

class RendezvousMgr {
 public:
  struct Options {
    std::string task_name;  // "/job:J/replica:0/task:T"
    WorkerCache* worker_cache = nullptr;
    Env* env = nullptr;  // Null = Env::Default().
    // Raised to 10,000 when lower.
    size_t num_remembered_cleanups = 10000;
  };
  explicit RendezvousMgr(Options options);
  // Aborts every live step (Cancelled).
  ~RendezvousMgr();
  RendezvousMgr(const RendezvousMgr&) = delete;
  RendezvousMgr& operator=(const RendezvousMgr&) = delete;

  // The step's rendezvous, created if absent. Aborted `Cleanup <step_id>`
  // when the step was cleaned up recently. Non-blocking.
  absl::StatusOr<std::shared_ptr<RemoteRendezvous>> Find(int64_t step_id);
  // See the file comment. Non-blocking (waiters run on this thread).
  void Cleanup(int64_t step_id);
  // The step's RunGraph on this worker ended OK: forgets the step now if
  // it is drained, else when the last held tensor is taken (TakenFrom).
  // Non-blocking.
  void StepSucceeded(int64_t step_id);
  // A peer took a tensor of the step: forgets the step if it succeeded
  // here and is now drained. Non-blocking.
  void TakenFrom(int64_t step_id);
  // Aborts every live step with `status` and forgets them; later Finds
  // answer `status` (worker Stop). The first status is kept.
  void AbortAll(const absl::Status& status);
  // Live steps (for tests: 0 once every step was cleaned up).
  size_t NumSteps() const;

 private:
  const Options options_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<int64_t, std::shared_ptr<RemoteRendezvous>> steps_
      ABSL_GUARDED_BY(mu_);
  // Forgets the step if drained() (the file comment's self-cleanup).
  void ForgetIfDrained(int64_t step_id, bool mark_succeeded);

  std::deque<int64_t> cleaned_order_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<int64_t> cleaned_ ABSL_GUARDED_BY(mu_);
  absl::Status closed_ ABSL_GUARDED_BY(mu_);  // Set by AbortAll.
};

}  // namespace cohort::runtime

#endif  // COHORT_RUNTIME_RENDEZVOUS_MGR_H_
