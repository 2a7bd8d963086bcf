#include "cohort/runtime/rendezvous_mgr.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cohort/base/phase_stats.h"
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

namespace {

RendezvousTable::Options TableOptions(int64_t step_id) {
  RendezvousTable::Options o;
  o.step_id = step_id;
  // The header's promise to the RecvTensor handler.
  o.cancelled_prefix = "RecvTensor cancelled for ";
  return o;
}

}  // namespace

RemoteRendezvous::RemoteRendezvous(int64_t step_id, std::string task_name,
                                   WorkerCache* worker_cache, Env* env)
    : step_id_(step_id),
      task_name_(std::move(task_name)),
      worker_cache_(worker_cache),
      env_(env),
      table_(TableOptions(step_id)) {}

// Only local waiters can remain (a remote call holds a reference to this
// object); the table's destructor answers them, Cancelled "rendezvous of
// step <id> destroyed".
RemoteRendezvous::~RemoteRendezvous() = default;

bool RemoteRendezvous::IsLocal(const ParsedKey& key) const {
  auto task = TaskOfDevice(key.src_device);
  // A src device that does not parse cannot be reached remotely either;
  // treat it as local so it waits here and fails with the step.
  return !task.ok() || *task == task_name_;
}

absl::Status RemoteRendezvous::Send(const ParsedKey& key, const Tensor& value) {
  // Read outside the table's lock: Env::Now may be a fake clock with a
  // lock of its own.
  return table_.Send(key.full_key, key.edge_name, value, env_->Now());
}

void RemoteRendezvous::RecvAsync(const ParsedKey& key, DoneCallback done) {
  if (!IsLocal(key)) {
    RecvRemote(key, std::move(done));
    return;
  }
  table_.Recv(key.full_key, key.edge_name, std::move(done));
}

void RemoteRendezvous::RecvLocalAsync(const ParsedKey& key,
                                      CancellationManager* cancellation,
                                      LocalRecvCallback done) {
  table_.Recv(key.full_key, key.edge_name, cancellation, std::move(done));
}

bool RemoteRendezvous::MarkSucceeded() {
  // Flag first, table second; drained() reads them in the same order, so
  // whichever of this and a TakenFrom runs later sees the step drained.
  succeeded_.store(true);
  return table_.drained();
}

bool RemoteRendezvous::drained() const {
  return succeeded_.load() && table_.drained();
}

void RemoteRendezvous::StartAbort(const absl::Status& status) {
  // The table answers the local waiters, then cancels the RecvTensor calls;
  // each finishes through FinishRemote, which reports the abort status
  // rather than the transport's Cancelled.
  table_.Abort(status);
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
  const absl::Status aborted = table_.BeginPending(call);
  if (!aborted.ok()) {
    done(aborted, Tensor());
    return;
  }
  if (PhaseStats::enabled()) call->issued = env_->Now();
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
  const absl::Status abort = table_.EndPending(call.get());
  // A call we cancelled because the step stopped reports why it stopped,
  // not the transport's Cancelled.
  if (!status.ok() && !abort.ok() && call->opts.cancelled()) status = abort;
  if (!status.ok()) {
    done(status, Tensor());
    return;
  }
  if (PhaseStats::enabled() && call->issued != absl::Time()) {
    PhaseStats::Add(Phase::kRecvTensorCall, env_->Now() - call->issued,
                    static_cast<int64_t>(call->value.tensor.TotalBytes()));
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
