#include "cohort/runtime/rendezvous_mgr.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cohort/base/logging.h"
#include "cohort/runtime/device_name.h"
#include "cohort/runtime/worker_errors.h"

namespace cohort::runtime {
namespace {

RendezvousMgr::Options WithDefaults(RendezvousMgr::Options o) {
  if (o.env == nullptr) o.env = Env::Default();
  // The reference asks for at least 10,000: a late RecvTensor can arrive
  // after many later steps on a busy worker.
  if (o.num_remembered_cleanups < 10000) o.num_remembered_cleanups = 10000;
  return o;
}

}  // namespace

absl::StatusOr<std::string> TaskOfDevice(absl::string_view device) {
  auto parsed = DeviceName::Parse(device);
  if (!parsed.ok()) return parsed.status();
  if (!parsed->has_job || !parsed->has_task) {
    return absl::InvalidArgumentError(
        absl::StrCat("device '", device, "' does not name its job and task"));
  }
  return absl::StrCat("/job:", parsed->job, "/replica:", parsed->replica,
                      "/task:", parsed->task);
}

// --- RemoteRendezvous -----------------------------------------------------

RemoteRendezvous::RemoteRendezvous(int64_t step_id, std::string task_name,
                                   WorkerCache* worker_cache, Env* env)
    : step_id_(step_id),
      task_name_(std::move(task_name)),
      worker_cache_(worker_cache),
      env_(env) {}

RemoteRendezvous::~RemoteRendezvous() {
  // Only local waiters can remain (a remote call holds a reference to this
  // object); they must still hear back exactly once.
  StartAbort(absl::CancelledError(
      absl::StrCat("rendezvous of step ", step_id_, " destroyed")));
}

bool RemoteRendezvous::IsLocal(const ParsedKey& key) const {
  auto task = TaskOfDevice(key.src_device);
  // A src device that does not parse cannot be reached remotely either;
  // treat it as local so it waits here and fails with the step.
  return !task.ok() || *task == task_name_;
}

void RemoteRendezvous::RunWaiter(Waiter waiter, const absl::Status& status,
                                 const Tensor& value, absl::Time sent_at) {
  // Deregister before running: afterwards the waiter's CancellationManager
  // may be gone. If the cancel callback is running right now, this waits for
  // it; it finds no waiter (we took it) and does nothing.
  if (waiter.cancellation != nullptr) {
    waiter.cancellation->DeregisterCallback(waiter.token);
  }
  waiter.done(status, value, sent_at);
}

absl::Status RemoteRendezvous::Send(const ParsedKey& key, const Tensor& value) {
  const absl::Time now = env_->Now();
  Waiter waiter;
  {
    absl::MutexLock lock(&mu_);
    if (!abort_status_.ok()) return abort_status_;
    Item& item = table_[key.full_key];
    if (item.has_value) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", key.edge_name, "' (rendezvous key ",
                       key.full_key, ") was sent twice in step ", step_id_));
    }
    if (!item.has_waiter) {
      item.has_value = true;
      item.value = value;
      item.sent_at = now;
      return absl::OkStatus();
    }
    waiter = std::move(item.waiter);
    table_.erase(key.full_key);
  }
  RunWaiter(std::move(waiter), absl::OkStatus(), value, now);
  return absl::OkStatus();
}

void RemoteRendezvous::RecvAsync(const ParsedKey& key, DoneCallback done) {
  if (!IsLocal(key)) {
    RecvRemote(key, std::move(done));
    return;
  }
  RecvLocalAsync(
      key, nullptr,
      [done = std::move(done)](const absl::Status& s, const Tensor& v,
                               absl::Time) { done(s, v); });
}

void RemoteRendezvous::RecvLocalAsync(const ParsedKey& key,
                                      CancellationManager* cancellation,
                                      LocalRecvCallback done) {
  absl::Status status;
  Tensor value;
  absl::Time sent_at;
  {
    absl::MutexLock lock(&mu_);
    status = abort_status_;
    auto it = table_.find(key.full_key);
    if (!status.ok()) {
      // Aborted: answer with the step's status below.
    } else if (it != table_.end() && it->second.has_value) {
      value = std::move(it->second.value);
      sent_at = it->second.sent_at;
      table_.erase(it);
    } else if (it != table_.end() && it->second.has_waiter) {
      status = absl::InvalidArgumentError(
          absl::StrCat("tensor '", key.edge_name, "' (rendezvous key ",
                       key.full_key, ") is received twice in step ", step_id_));
    } else {
      Item& item = table_[key.full_key];
      item.has_waiter = true;
      item.waiter.id = next_waiter_id_++;
      item.waiter.done = std::move(done);
      if (cancellation == nullptr) return;
      // Registering under mu_ is safe: RegisterCallback never runs the
      // callback, and refuses (false) once cancelled.
      item.waiter.cancellation = cancellation;
      item.waiter.token = cancellation->GetCancellationToken();
      const uint64_t id = item.waiter.id;
      std::string k = key.full_key;
      std::weak_ptr<RemoteRendezvous> weak = weak_from_this();
      if (cancellation->RegisterCallback(item.waiter.token, [weak, k, id] {
            // The rendezvous may be gone (step cleaned up and its waiters
            // already answered); then there is nothing to drop.
            if (auto self = weak.lock()) self->CancelWaiter(k, id);
          })) {
        return;
      }
      // Already cancelled: undo and answer now.
      done = std::move(item.waiter.done);
      table_.erase(key.full_key);
      status = absl::CancelledError(
          absl::StrCat("RecvTensor cancelled for ", step_id_));
    }
  }
  done(status, value, sent_at);
}

bool RemoteRendezvous::MarkSucceeded() {
  absl::MutexLock lock(&mu_);
  succeeded_ = true;
  return abort_status_.ok() && table_.empty() && remote_calls_.empty();
}

bool RemoteRendezvous::drained() const {
  absl::MutexLock lock(&mu_);
  return succeeded_ && abort_status_.ok() && table_.empty() &&
         remote_calls_.empty();
}

void RemoteRendezvous::CancelWaiter(const std::string& key, uint64_t id) {
  LocalRecvCallback done;
  {
    absl::MutexLock lock(&mu_);
    auto it = table_.find(key);
    if (it == table_.end() || !it->second.has_waiter ||
        it->second.waiter.id != id) {
      return;
    }
    done = std::move(it->second.waiter.done);
    table_.erase(it);
  }
  // TF logs this and leaves the step alone: the peer retries or its step
  // fails on its own.
  COHORT_LOG(INFO) << "RecvTensor cancelled for " << step_id_;
  // Not RunWaiter: we are inside this waiter's cancel callback, and
  // deregistering it here would wait for ourselves.
  done(
      absl::CancelledError(absl::StrCat("RecvTensor cancelled for ", step_id_)),
      Tensor(), absl::Time());
}

void RemoteRendezvous::StartAbort(const absl::Status& status) {
  std::vector<Waiter> waiters;
  std::vector<std::shared_ptr<RemoteCall>> calls;
  absl::Status abort;
  {
    absl::MutexLock lock(&mu_);
    if (!abort_status_.ok()) return;
    abort_status_ = status.ok() ? absl::CancelledError(absl::StrCat(
                                      "step ", step_id_, " was aborted"))
                                : status;
    abort = abort_status_;
    for (auto& [key, item] : table_) {
      if (item.has_waiter) waiters.push_back(std::move(item.waiter));
    }
    table_.clear();
    calls.assign(remote_calls_.begin(), remote_calls_.end());
  }
  for (auto& w : waiters)
    RunWaiter(std::move(w), abort, Tensor(), absl::Time());
  // Each cancelled call finishes through FinishRemote, which reports the
  // abort status rather than the transport's Cancelled.
  for (auto& call : calls) call->opts.StartCancel();
}

void RemoteRendezvous::RecvRemote(const ParsedKey& key, DoneCallback done) {
  auto src_task = TaskOfDevice(key.src_device);
  if (!src_task.ok()) {
    done(src_task.status(), Tensor());
    return;
  }
  if (worker_cache_ == nullptr) {
    done(absl::FailedPreconditionError(absl::StrCat(
             "tensor '", key.edge_name, "' comes from ", *src_task, " but ",
             task_name_, " has no worker cache to reach other tasks")),
         Tensor());
    return;
  }
  auto worker = worker_cache_->GetWorker(*src_task);
  if (!worker.ok()) {
    done(worker.status(), Tensor());
    return;
  }
  auto call = std::make_shared<RemoteCall>();
  call->request.set_step_id(step_id_);
  call->request.set_rendezvous_key(key.full_key);
  // A fresh id per call (§1.9): a retry would reuse it, a new call never.
  call->request.set_request_id(NewRequestId());
  absl::Status aborted;
  {
    absl::MutexLock lock(&mu_);
    aborted = abort_status_;
    if (aborted.ok()) remote_calls_.insert(call);
  }
  if (!aborted.ok()) {
    done(aborted, Tensor());
    return;
  }
  // The callback keeps this rendezvous alive until the call is over, so
  // FinishRemote can always deregister the call.
  (*worker)->RecvTensorValueAsync(
      &call->opts, &call->request, &call->value,
      [self = shared_from_this(), call, done = std::move(done)](
          const absl::Status& s) { self->FinishRemote(call, s, done); });
}

void RemoteRendezvous::FinishRemote(const std::shared_ptr<RemoteCall>& call,
                                    absl::Status status,
                                    const DoneCallback& done) {
  absl::Status abort;
  {
    absl::MutexLock lock(&mu_);
    remote_calls_.erase(call);
    abort = abort_status_;
  }
  // A call we cancelled because the step stopped reports why it stopped,
  // not the transport's Cancelled.
  if (!status.ok() && !abort.ok() && call->opts.cancelled()) status = abort;
  if (!status.ok()) {
    done(status, Tensor());
    return;
  }
  done(absl::OkStatus(), call->value.tensor);
}

// --- RendezvousMgr --------------------------------------------------------

RendezvousMgr::RendezvousMgr(Options options)
    : options_(WithDefaults(std::move(options))) {}

RendezvousMgr::~RendezvousMgr() {
  AbortAll(absl::CancelledError(
      absl::StrCat("the worker of ", options_.task_name, " is shutting down")));
}

absl::StatusOr<std::shared_ptr<RemoteRendezvous>> RendezvousMgr::Find(
    int64_t step_id) {
  absl::MutexLock lock(&mu_);
  if (!closed_.ok()) return closed_;
  if (cleaned_.contains(step_id)) return CleanupError(step_id);
  auto& slot = steps_[step_id];
  if (slot == nullptr) {
    slot = std::make_shared<RemoteRendezvous>(
        step_id, options_.task_name, options_.worker_cache, options_.env);
  }
  return slot;
}

void RendezvousMgr::Cleanup(int64_t step_id) {
  std::shared_ptr<RemoteRendezvous> rendezvous;
  {
    absl::MutexLock lock(&mu_);
    auto it = steps_.find(step_id);
    if (it != steps_.end()) {
      rendezvous = std::move(it->second);
      steps_.erase(it);
    }
    if (cleaned_.insert(step_id).second) {
      cleaned_order_.push_back(step_id);
      if (cleaned_order_.size() > options_.num_remembered_cleanups) {
        cleaned_.erase(cleaned_order_.front());
        cleaned_order_.pop_front();
      }
    }
  }
  // Outside the lock: aborting runs the step's waiters.
  if (rendezvous != nullptr) rendezvous->StartAbort(CleanupError(step_id));
}

void RendezvousMgr::StepSucceeded(int64_t step_id) {
  ForgetIfDrained(step_id, /*mark_succeeded=*/true);
}

void RendezvousMgr::TakenFrom(int64_t step_id) {
  ForgetIfDrained(step_id, /*mark_succeeded=*/false);
}

void RendezvousMgr::ForgetIfDrained(int64_t step_id, bool mark_succeeded) {
  std::shared_ptr<RemoteRendezvous> rendezvous;
  {
    absl::MutexLock lock(&mu_);
    auto it = steps_.find(step_id);
    if (it == steps_.end()) return;
    rendezvous = it->second;
  }
  // Both callers check after their own change (the RunGraph's end, a
  // taken tensor), each under the rendezvous' lock, so whichever comes
  // second sees the step drained. A drained step holds no waiter: the abort
  // inside Cleanup answers nobody, and a late RecvTensor is refused as for
  // any cleaned-up step.
  const bool drained =
      mark_succeeded ? rendezvous->MarkSucceeded() : rendezvous->drained();
  if (drained) Cleanup(step_id);
}

void RendezvousMgr::AbortAll(const absl::Status& status) {
  absl::flat_hash_map<int64_t, std::shared_ptr<RemoteRendezvous>> steps;
  absl::Status why;
  {
    absl::MutexLock lock(&mu_);
    if (closed_.ok()) {
      closed_ =
          status.ok() ? absl::CancelledError("rendezvous closed") : status;
    }
    why = closed_;
    steps.swap(steps_);
  }
  for (auto& [id, rendezvous] : steps) rendezvous->StartAbort(why);
}

size_t RendezvousMgr::NumSteps() const {
  absl::MutexLock lock(&mu_);
  return steps_.size();
}

}  // namespace cohort::runtime
