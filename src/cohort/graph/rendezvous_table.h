// RendezvousTable: one step's sent tensors and waiting receivers, the state
// that both LocalRendezvous (rendezvous.h) and the runtime's
// RemoteRendezvous (runtime/rendezvous_mgr.h) keep behind their
// Send/RecvAsync/StartAbort.
//
// A key holds either a sent tensor (with when it was sent) or one waiting
// receiver, never both: a Send to a waiting receiver hands the tensor over
// at once and forgets the key, as does a receive of a held tensor. Besides
// keys the table counts pending operations its owner runs outside it (the
// runtime's RecvTensor calls to other tasks), so that an abort stops them
// and drained() waits for them.
//
// Contract:
//  - Send never blocks. Errors:
//      the abort status  after Abort;
//      InvalidArgument   naming the tensor, key and step when the key is
//                        still held from an earlier Send.
//  - Recv calls `done` exactly once: with the tensor (and, for a
//    TimedDoneCallback, its send time) when or if it is sent, or with an
//    error:
//      the abort status  when the table is or becomes aborted;
//      InvalidArgument   when another receiver already waits for the key;
//      Cancelled         (Options::cancelled_prefix + step id) when the
//                        receiver's `cancellation` fires first: that receiver
//                        alone is dropped, the step goes on.
//  - Abort(status) fails every waiting receiver once with `status` (OK
//    becomes Cancelled), then cancels every pending operation; later Sends,
//    Recvs and BeginPendings fail with it. The first status is kept.
//  - Every callback (`done`, Pending::Cancel) runs outside the table's
//    lock: inline in Recv, on the thread of the Send, of the Abort, or of
//    the cancellation. Callbacks must not block; they may call the table.
//  - Destruction aborts (Cancelled "rendezvous [of step N] destroyed"), so
//    nothing waits forever; a receiver's CancellationManager callback is
//    deregistered (waiting out one that is running) before its `done` runs,
//    so after the table is gone no cancellation reaches it.
//
// Cost per Send or Recv: one lock and one hash lookup. It allocates only
// the key's copy when the key is first stored, and for a receiver with a
// cancellation the callback it registers.
//
// Thread safety: thread-safe.
#ifndef COHORT_GRAPH_RENDEZVOUS_TABLE_H_
#define COHORT_GRAPH_RENDEZVOUS_TABLE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <variant>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "cohort/graph/cancellation.h"
#include "cohort/graph/tensor.h"

namespace cohort {

class RendezvousTable {
 public:
  // Rendezvous::DoneCallback.
  using DoneCallback =
      std::function<void(const absl::Status& status, const Tensor& value)>;
  // Also hears when the matching Send ran (its `sent_at`).
  using TimedDoneCallback = std::function<void(
      const absl::Status& status, const Tensor& value, absl::Time sent_at)>;

  // An operation of the step that runs outside the table (the runtime's
  // RecvTensor call to another task): Abort cancels it, and the table is
  // not drained() while it runs.
  class Pending {
   public:
    virtual ~Pending() = default;
    // Asks the operation to stop; it still ends through EndPending. Runs
    // on the aborting thread, outside the table's lock, at most once.
    virtual void Cancel() = 0;
  };

  static constexpr int64_t kNoStepId = -1;
  struct Options {
    // Named in errors ("was sent twice in step 5"); kNoStepId: "in one
    // step".
    int64_t step_id = kNoStepId;
    // A cancelled receiver's Cancelled message is this followed by the
    // step id ("receive cancelled" without one). Must outlive the table (a
    // string literal).
    const char* cancelled_prefix = "receive cancelled in step ";
  };

  RendezvousTable() : RendezvousTable(Options()) {}
  explicit RendezvousTable(Options options);
  ~RendezvousTable();
  RendezvousTable(const RendezvousTable&) = delete;
  RendezvousTable& operator=(const RendezvousTable&) = delete;

  // `key` is the full rendezvous key, `tensor` its tensor name (for
  // errors). `sent_at` is handed to a TimedDoneCallback.
  absl::Status Send(const std::string& key, absl::string_view tensor,
                    const Tensor& value, absl::Time sent_at);
  void Recv(const std::string& key, absl::string_view tensor,
            DoneCallback done);
  // `cancellation` may be null; else it must outlive `done`'s call.
  void Recv(const std::string& key, absl::string_view tensor,
            CancellationManager* cancellation, TimedDoneCallback done);

  // True for the call that aborted (the first). Runs the waiters and
  // cancels the pending operations on this thread.
  bool Abort(const absl::Status& status);
  // OK, or the abort status.
  absl::Status status() const;

  // Registers `op` (the abort status, `op` not registered, once aborted).
  absl::Status BeginPending(std::shared_ptr<Pending> op);
  // Forgets `op`; returns the abort status (OK when not aborted), so an op
  // cancelled by Abort can report why the step stopped.
  absl::Status EndPending(Pending* op);

  // Nothing held and nobody waiting.
  bool empty() const;
  // Not aborted, empty(), and no pending operation.
  bool drained() const;

 private:
  struct Waiter {
    // Tells a cancelled receiver from a later one of the same key.
    uint64_t id = 0;
    // monostate: no receiver waits.
    std::variant<std::monostate, DoneCallback, TimedDoneCallback> done;
    CancellationManager* cancellation = nullptr;
    CancellationToken token = 0;
  };
  struct Item {
    bool has_value = false;
    Tensor value;
    absl::Time sent_at;
    Waiter waiter;
  };

  // Both Recvs (Done: DoneCallback or TimedDoneCallback): answers `done`
  // now or parks it (moved from). A template, not a Waiter built up front,
  // so a receive that finds its tensor never builds one.
  template <typename Done>
  void Receive(const std::string& key, absl::string_view tensor,
               CancellationManager* cancellation, Done& done);
  // Puts `done` in `item` as its waiter, registered with `cancellation`
  // (may be null); false, `done` left as it was, when `cancellation`
  // already fired.
  template <typename Done>
  bool ParkLocked(const std::string& key, CancellationManager* cancellation,
                  Item& item, Done& done) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A cancellation callback: drops waiter `id` of `key` if it still waits
  // and answers it Cancelled.
  void CancelWaiter(const std::string& key, uint64_t id);
  // Outside the lock: deregisters the waiter's cancellation (afterwards its
  // CancellationManager may be gone), then Call.
  static void Run(Waiter& waiter, const absl::Status& status,
                  const Tensor& value, absl::Time sent_at);
  static void Call(Waiter& waiter, const absl::Status& status,
                   const Tensor& value, absl::Time sent_at);
  static void Call(DoneCallback& done, const absl::Status& status,
                   const Tensor& value, absl::Time sent_at);
  static void Call(TimedDoneCallback& done, const absl::Status& status,
                   const Tensor& value, absl::Time sent_at);
  std::string Step() const;  // "step 5" or "one step", for errors
  absl::Status CancelledStatus() const;

  const Options options_;

  mutable absl::Mutex mu_;
  absl::Status abort_status_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, Item> items_ ABSL_GUARDED_BY(mu_);
  uint64_t next_waiter_id_ ABSL_GUARDED_BY(mu_) = 1;
  absl::flat_hash_set<std::shared_ptr<Pending>> pending_ ABSL_GUARDED_BY(mu_);
};

}  // namespace cohort

#endif  // COHORT_GRAPH_RENDEZVOUS_TABLE_H_
