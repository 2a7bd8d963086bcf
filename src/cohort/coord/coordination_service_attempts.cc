// CoordinationService, what a launcher that keeps one service for the whole
// job needs: ending an attempt (ResetForNextAttempt) and being told of task
// state changes (task-state listeners) instead of polling GetTaskState
// (coordination_service.h is the contract; coordination_service.cc has the
// overview of the parts).
#include <utility>

#include "absl/strings/str_cat.h"
#include "cohort/base/logging.h"
#include "cohort/coord/coordination_service.h"
#include "cohort/coord/coordination_service_util.h"

namespace cohort::coord {

using internal::RunAll;

absl::Status CoordinationService::ResetForNextAttempt(
    const std::vector<std::string>& keep_key_prefixes,
    absl::string_view reason) {
  Callbacks out;
  {
    absl::MutexLock lock(&mu_);
    if (stopped_) {
      return Error(absl::StatusCode::kFailedPrecondition,
                   absl::StrCat("cannot start the job's next attempt (", reason,
                                "): the coordination service has stopped"));
    }
    // Whatever was still parked belongs to the attempt that ended; its
    // processes are gone or going, and none of it may carry over.
    const absl::Status ended =
        Error(absl::StatusCode::kAborted,
              absl::StrCat("the job's attempt ended (", reason,
                           "); this call belonged to it"));
    for (auto& [id, b] : barriers_) {
      if (!b.done) {
        FinishBarrierLocked(
            b,
            BarrierStatus(absl::StatusCode::kAborted,
                          absl::StrCat("barrier '", b.id, "' (#", b.counter,
                                       ") aborted: the job's attempt ended (",
                                       reason, ")"),
                          b),
            &out);
      }
    }
    // The next attempt's tasks count their barriers from 0 again.
    barriers_.clear();
    for (auto& [key, round] : alive_rounds_) {
      if (round.timer != 0) timer_->Cancel(round.timer);
      for (auto& [task, cb] : round.waiting) {
        out.push_back([cb = std::move(cb), ended] { cb(ended); });
      }
    }
    alive_rounds_.clear();
    if (shutdown_timer_ != 0) timer_->Cancel(shutdown_timer_);
    shutdown_timer_ = 0;
    shutdown_deadline_ = absl::InfiniteFuture();
    for (auto& [task, cb] : shutdown_waiting_) {
      out.push_back([cb = std::move(cb), ended] { cb(ended); });
    }
    shutdown_waiting_.clear();
    // The last attempt's failure is not the next one's: its polls start
    // clean.
    propagated_error_ = absl::OkStatus();
    for (auto& [id, t] : tasks_) {
      if (t.heartbeat_timer != 0) timer_->Cancel(t.heartbeat_timer);
      if (t.poll) {
        out.push_back([cb = std::move(t.poll), ended] { cb(ended); });
      }
      // Incarnations are random per process, so a retired one is a process
      // of an ended attempt and nothing else (RegisterTaskAsync refuses it).
      if (t.incarnation != 0) t.retired.insert(t.incarnation);
      const bool recoverable = t.recoverable;
      std::set<uint64_t> retired = std::move(t.retired);
      t = Task();
      t.recoverable = recoverable;
      t.retired = std::move(retired);
      NotifyTaskLocked(id, t, &out);
    }
    StateChangedLocked(&out);
    COHORT_LOG(INFO) << "coordination: attempt ended (" << reason
                     << "); every task must register again";
  }
  // The store has its own lock; its callbacks (watchers of deleted keys,
  // parked gets and watches it ends) must not run under the service's.
  absl::StatusOr<size_t> deleted = kv_.DeleteAllExcept(
      keep_key_prefixes,
      Error(absl::StatusCode::kAborted,
            absl::StrCat("the job's attempt ended (", reason,
                         "); this key-value wait belonged to it")));
  RunAll(out);
  return deleted.ok() ? absl::OkStatus() : deleted.status();
}

uint64_t CoordinationService::AddTaskStateListener(TaskStateListener listener) {
  absl::MutexLock lock(&listen_mu_);
  const uint64_t id = next_listener_id_++;
  listeners_[id] = std::make_shared<TaskStateListener>(std::move(listener));
  return id;
}

void CoordinationService::RemoveTaskStateListener(uint64_t id) {
  absl::MutexLock lock(&listen_mu_);
  listeners_.erase(id);
  // A delivery in progress may hold a copy of the listener: wait it out,
  // unless it is this very thread (a listener removing itself or another).
  const std::thread::id me = std::this_thread::get_id();
  auto idle = [this, me]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(listen_mu_) {
    return !delivering_ || delivering_thread_ == me;
  };
  listen_mu_.Await(absl::Condition(&idle));
}

void CoordinationService::NotifyTaskLocked(const TaskId& task, const Task& t,
                                           Callbacks* out) {
  {
    absl::MutexLock lock(&listen_mu_);
    if (listeners_.empty()) return;
    // Queued under mu_, so the queue holds the transitions in the order
    // the service made them.
    task_states_.push_back(SnapshotLocked(task, t));
  }
  out->push_back([this] { DeliverTaskStates(); });
}

// One deliverer at a time drains the queue in order; a thread that finds a
// delivery running (on another thread, or lower on its own stack: a listener
// that changed state) leaves its states to it. So listeners see one call at
// a time, in transition order, and may call back into the service.
void CoordinationService::DeliverTaskStates() {
  listen_mu_.Lock();
  if (delivering_) {
    listen_mu_.Unlock();
    return;
  }
  delivering_ = true;
  delivering_thread_ = std::this_thread::get_id();
  while (!task_states_.empty()) {
    TaskStateSnapshot state = std::move(task_states_.front());
    task_states_.pop_front();
    std::vector<std::shared_ptr<TaskStateListener>> listeners;
    for (const auto& [id, l] : listeners_) listeners.push_back(l);
    listen_mu_.Unlock();
    for (const auto& l : listeners) (*l)(state);
    listen_mu_.Lock();
  }
  delivering_ = false;
  delivering_thread_ = std::thread::id();
  listen_mu_.Unlock();
}

}  // namespace cohort::coord
