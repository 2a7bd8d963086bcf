#include "cohort/graph/rendezvous_table.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cohort/base/logging.h"

namespace cohort {

RendezvousTable::RendezvousTable(Options options) : options_(options) {}

RendezvousTable::~RendezvousTable() {
  // Receivers still waiting must hear back exactly once. No cancellation
  // callback can reach the table afterwards: Abort deregisters each parked
  // waiter's (waiting out one that runs) before answering it. (Two calls,
  // not a ?: over std::string: a LocalRendezvous per executor step would
  // pay a heap copy of the literal.)
  if (options_.step_id == kNoStepId) {
    Abort(absl::CancelledError("rendezvous destroyed"));
  } else {
    Abort(absl::CancelledError(
        absl::StrCat("rendezvous of step ", options_.step_id, " destroyed")));
  }
}

std::string RendezvousTable::Step() const {
  return options_.step_id == kNoStepId
             ? std::string("one step")
             : absl::StrCat("step ", options_.step_id);
}

absl::Status RendezvousTable::CancelledStatus() const {
  return absl::CancelledError(
      options_.step_id == kNoStepId
          ? std::string("receive cancelled")
          : absl::StrCat(options_.cancelled_prefix, options_.step_id));
}

absl::Status RendezvousTable::Send(const std::string& key,
                                   absl::string_view tensor,
                                   const Tensor& value, absl::Time sent_at) {
  Waiter waiter;
  {
    absl::MutexLock lock(&mu_);
    if (!abort_status_.ok()) return abort_status_;
    // One lookup whether the key is new or waited for. An item exists only
    // while it holds a value or a waiter, so a found item without a value
    // has a receiver waiting.
    auto [it, inserted] = items_.try_emplace(key);
    Item& item = it->second;
    if (item.has_value) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor '", tensor, "' (rendezvous key ", key, ") was sent twice in ",
          Step(), "; check that the graph has one Send per key"));
    }
    if (inserted) {
      item.has_value = true;
      item.value = value;
      item.sent_at = sent_at;
      return absl::OkStatus();
    }
    waiter = std::move(item.waiter);
    items_.erase(it);
  }
  // Outside the lock: the receiver may call the table again (its next Recv).
  Run(waiter, absl::OkStatus(), value, sent_at);
  return absl::OkStatus();
}

void RendezvousTable::Recv(const std::string& key, absl::string_view tensor,
                           DoneCallback done) {
  Receive(key, tensor, nullptr, done);
}

void RendezvousTable::Recv(const std::string& key, absl::string_view tensor,
                           CancellationManager* cancellation,
                           TimedDoneCallback done) {
  Receive(key, tensor, cancellation, done);
}

template <typename Done>
void RendezvousTable::Receive(const std::string& key, absl::string_view tensor,
                              CancellationManager* cancellation, Done& done) {
  absl::Status status;
  Tensor value;
  absl::Time sent_at;
  {
    absl::MutexLock lock(&mu_);
    status = abort_status_;
    if (status.ok()) {
      // One lookup whether the tensor is there or the receiver parks.
      auto [it, inserted] = items_.try_emplace(key);
      Item& item = it->second;
      if (item.has_value) {
        value = std::move(item.value);
        sent_at = item.sent_at;
        items_.erase(it);
      } else if (!inserted) {
        status = absl::InvalidArgumentError(
            absl::StrCat("tensor '", tensor, "' (rendezvous key ", key,
                         ") is received twice in ", Step(),
                         "; check that the graph has one Recv per key"));
      } else if (ParkLocked(key, cancellation, item, done)) {
        return;
      } else {
        // The cancellation fired before this receive: answer it now.
        items_.erase(it);
        status = CancelledStatus();
      }
    }
  }
  // Never registered with `cancellation`: nothing to deregister.
  Call(done, status, value, sent_at);
}

template <typename Done>
bool RendezvousTable::ParkLocked(const std::string& key,
                                 CancellationManager* cancellation, Item& item,
                                 Done& done) {
  const uint64_t id = next_waiter_id_++;
  if (cancellation != nullptr) {
    // Registering under mu_ is safe: RegisterCallback never runs the
    // callback, and refuses (false) once cancelled. The callback may hold
    // `this`: the waiter is deregistered before it is answered, and the
    // destructor answers every waiter (see the destructor).
    const CancellationToken token = cancellation->GetCancellationToken();
    if (!cancellation->RegisterCallback(
            token, [this, key, id] { CancelWaiter(key, id); })) {
      return false;
    }
    item.waiter.cancellation = cancellation;
    item.waiter.token = token;
  }
  item.waiter.id = id;
  item.waiter.done.template emplace<Done>(std::move(done));
  return true;
}

void RendezvousTable::CancelWaiter(const std::string& key, uint64_t id) {
  Waiter waiter;
  absl::Status status;
  {
    absl::MutexLock lock(&mu_);
    auto it = items_.find(key);
    // Gone or replaced: the waiter was answered (by a Send or the abort)
    // and a later receiver of the key is not ours to drop.
    if (it == items_.end() ||
        std::holds_alternative<std::monostate>(it->second.waiter.done) ||
        it->second.waiter.id != id) {
      return;
    }
    waiter = std::move(it->second.waiter);
    items_.erase(it);
    status = CancelledStatus();
  }
  // From here on nothing of `this` is touched: with its waiter gone, the
  // table may be destroyed while this runs. TF logs this and leaves the
  // step alone: the peer retries, or its step fails on its own.
  COHORT_LOG(INFO) << status.message() << " (rendezvous key " << key << ")";
  // Not Run: this is the waiter's own cancellation callback, and
  // deregistering it here would wait for itself.
  Call(waiter, status, Tensor(), absl::Time());
}

void RendezvousTable::Run(Waiter& waiter, const absl::Status& status,
                          const Tensor& value, absl::Time sent_at) {
  // If the cancellation callback is running right now, this waits for it;
  // it finds no waiter (we took it) and does nothing.
  if (waiter.cancellation != nullptr) {
    waiter.cancellation->DeregisterCallback(waiter.token);
  }
  Call(waiter, status, value, sent_at);
}

void RendezvousTable::Call(Waiter& waiter, const absl::Status& status,
                           const Tensor& value, absl::Time sent_at) {
  if (auto* done = std::get_if<DoneCallback>(&waiter.done)) {
    Call(*done, status, value, sent_at);
  } else if (auto* timed = std::get_if<TimedDoneCallback>(&waiter.done)) {
    Call(*timed, status, value, sent_at);
  }
}

void RendezvousTable::Call(DoneCallback& done, const absl::Status& status,
                           const Tensor& value, absl::Time) {
  done(status, value);
}

void RendezvousTable::Call(TimedDoneCallback& done, const absl::Status& status,
                           const Tensor& value, absl::Time sent_at) {
  done(status, value, sent_at);
}

bool RendezvousTable::Abort(const absl::Status& status) {
  std::vector<Waiter> waiters;
  std::vector<std::shared_ptr<Pending>> pending;
  absl::Status why;
  {
    absl::MutexLock lock(&mu_);
    if (!abort_status_.ok()) return false;
    abort_status_ = status;
    if (status.ok()) {
      abort_status_ = absl::CancelledError(
          options_.step_id == kNoStepId
              ? std::string("rendezvous aborted")
              : absl::StrCat("step ", options_.step_id, " was aborted"));
    }
    why = abort_status_;
    for (auto& [key, item] : items_) {
      if (!std::holds_alternative<std::monostate>(item.waiter.done)) {
        waiters.push_back(std::move(item.waiter));
      }
    }
    items_.clear();
    // Copies: a pending op may end (EndPending) while we cancel it, and
    // must stay alive until Cancel returns.
    pending.assign(pending_.begin(), pending_.end());
  }
  for (auto& w : waiters) Run(w, why, Tensor(), absl::Time());
  for (auto& op : pending) op->Cancel();
  return true;
}

absl::Status RendezvousTable::status() const {
  absl::MutexLock lock(&mu_);
  return abort_status_;
}

absl::Status RendezvousTable::BeginPending(std::shared_ptr<Pending> op) {
  absl::MutexLock lock(&mu_);
  // Checked under the same lock as Abort collects the pending ops, so an
  // op is either refused here or cancelled there, never neither.
  if (!abort_status_.ok()) return abort_status_;
  pending_.insert(std::move(op));
  return absl::OkStatus();
}

absl::Status RendezvousTable::EndPending(Pending* op) {
  absl::MutexLock lock(&mu_);
  pending_.erase(op);
  return abort_status_;
}

bool RendezvousTable::empty() const {
  absl::MutexLock lock(&mu_);
  return items_.empty();
}

bool RendezvousTable::drained() const {
  absl::MutexLock lock(&mu_);
  return abort_status_.ok() && items_.empty() && pending_.empty();
}

}  // namespace cohort
