// CoordinationService, error reporting and propagation, task and job state
// (coordination_service.h is the contract; coordination_service.cc has the
// overview of the parts).
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "cohort/base/logging.h"
#include "cohort/base/status.h"
#include "cohort/coord/coordination_service.h"
#include "cohort/coord/coordination_service_util.h"
#include "cohort/coordination.pb.h"

namespace cohort::coord {

using internal::FormatUtc;
using internal::RunAll;
using internal::TaskList;

absl::Status CoordinationService::ReportErrorToService(
    const TaskId& task, const absl::Status& error, uint64_t incarnation) {
  Callbacks out;
  absl::Status result;
  {
    absl::MutexLock lock(&mu_);
    Task* t = FindTaskLocked(task);
    if (absl::Status caller = CallerStatusLocked(task, t); !caller.ok()) {
      result = std::move(caller);
    } else if (absl::Status stale = StaleIncarnationLocked(
                   task, *t, incarnation, "an error report");
               !stale.ok()) {
      result = std::move(stale);
    } else if (t->state != TaskState::kConnected) {
      result = Error(
          absl::StatusCode::kFailedPrecondition,
          absl::StrCat("task ", task.ToString(), " reported an error but is ",
                       TaskStateName(t->state),
                       "; only connected tasks can report"));
    } else {
      // The reported code is kept (callers branch on it); an OK "error" is a
      // caller bug, made Unknown rather than lost.
      absl::Status reported = Error(
          error.code() == absl::StatusCode::kOk ? absl::StatusCode::kUnknown
                                                : error.code(),
          absl::StrCat("task ", task.ToString(),
                       " reported an error: ", error.message()),
          &task, /*reported=*/true);
      SetTaskErrorLocked(task, *t, reported, &out);
    }
  }
  RunAll(out);
  return result;
}

// A task in error stops being watched (no heartbeat timer), leaves every
// barrier it was in (which then fail, naming it), and its own error poll gets
// the error. Only a non-recoverable task's error is the job's: it goes to
// every task's poll, as TSL propagates errors; a recoverable task (a ps that
// may come back) fails alone.
void CoordinationService::SetTaskErrorLocked(const TaskId& task, Task& t,
                                             absl::Status error,
                                             Callbacks* out) {
  COHORT_LOG(WARNING) << "coordination: task " << task.ToString()
                      << " -> ERROR: " << error.message();
  if (t.heartbeat_timer != 0) {
    timer_->Cancel(t.heartbeat_timer);
    t.heartbeat_timer = 0;
  }
  t.state = TaskState::kError;
  t.error = error;
  t.error_time = env_->Now();
  t.heartbeat_timeout_error = false;
  NotifyTaskLocked(task, t, out);
  LeaveBarriersLocked(task, t, absl::StrCat("failed: ", error.message()), out);
  if (t.poll) {
    out->push_back([cb = std::move(t.poll), error] { cb(error); });
    t.poll = nullptr;
  }
  if (!t.recoverable) PropagateErrorLocked(error, out);
  StateChangedLocked(out);
}

void CoordinationService::PropagateErrorLocked(const absl::Status& error,
                                               Callbacks* out) {
  // The first error is the root cause; later ones are usually its
  // consequences, so polls that start afterwards get the first.
  if (propagated_error_.ok()) propagated_error_ = error;
  for (auto& [id, t] : tasks_) {
    if (t.poll) {
      out->push_back([cb = std::move(t.poll), error] { cb(error); });
      t.poll = nullptr;
    }
  }
}

absl::Status CoordinationService::ServiceRestartedError(
    const TaskId& task, uint64_t known_incarnation) const {
  return Error(
      absl::StatusCode::kAborted,
      absl::StrCat("the coordination service restarted (task ", task.ToString(),
                   " registered with service incarnation ", known_incarnation,
                   ", the service now has ", incarnation_,
                   "): its state is lost; the task must restart or "
                   "re-register"));
}

void CoordinationService::PollForErrorAsync(const TaskId& task,
                                            uint64_t incarnation,
                                            StatusCallback done,
                                            uint64_t service_incarnation) {
  Callbacks out;
  absl::Status result;
  bool parked = false;
  {
    absl::MutexLock lock(&mu_);
    Task* t = FindTaskLocked(task);
    if (absl::Status caller = CallerStatusLocked(task, t, service_incarnation,
                                                 /*long_poll=*/true);
        !caller.ok()) {
      result = std::move(caller);
    } else if (!propagated_error_.ok() && !t->recoverable) {
      // A poll that starts after the job failed learns it at once.
      result = propagated_error_;
    } else if (t->state == TaskState::kError) {
      result = t->error;
    } else if (t->state != TaskState::kConnected) {
      result = Error(absl::StatusCode::kFailedPrecondition,
                     absl::StrCat("task ", task.ToString(),
                                  " polls for errors but is not connected; "
                                  "register first"));
    } else if (t->incarnation != incarnation) {
      result = Error(
          absl::StatusCode::kFailedPrecondition,
          absl::StrCat("task ", task.ToString(), " incarnation ", incarnation,
                       " is stale (registered: ", t->incarnation, ")"));
    } else {
      // One parked poll per task: a newer one (a reconnecting client)
      // replaces the older, which ends Cancelled instead of leaking.
      if (t->poll) {
        out.push_back(
            [cb = std::move(t->poll),
             e = Error(absl::StatusCode::kCancelled,
                       "replaced by a newer PollForError call")] { cb(e); });
      }
      t->poll = std::move(done);
      parked = true;
    }
  }
  RunAll(out);
  if (!parked) done(result);
}

TaskStateSnapshot CoordinationService::SnapshotLocked(const TaskId& id,
                                                      const Task& t) const {
  TaskStateSnapshot s;
  s.task = id;
  s.state = t.state;
  s.incarnation = t.incarnation;
  s.error = t.error;
  s.error_time = t.error_time;
  if (t.state == TaskState::kConnected) {
    s.heartbeat_age = env_->Now() - t.last_heartbeat;
  }
  s.recoverable = t.recoverable;
  s.shut_down = t.shut_down;
  return s;
}

absl::StatusOr<std::set<TaskId>> CoordinationService::ResolveTasksLocked(
    const std::vector<TaskId>& tasks, const std::string& what) {
  std::set<TaskId> out;
  if (tasks.empty()) {
    for (const auto& [id, t] : tasks_) out.insert(id);
    return out;
  }
  for (const TaskId& id : tasks) {
    if (tasks_.count(id) == 0) {
      return Error(absl::StatusCode::kInvalidArgument,
                   absl::StrCat(what, ": task ", id.ToString(),
                                " is not part of this job"));
    }
    out.insert(id);
  }
  return out;
}

absl::StatusOr<std::vector<TaskStateSnapshot>>
CoordinationService::GetTaskState(const std::vector<TaskId>& tasks) {
  absl::MutexLock lock(&mu_);
  if (stopped_) return StoppedError();
  COHORT_ASSIGN_OR_RETURN(std::set<TaskId> ids,
                          ResolveTasksLocked(tasks, "GetTaskState"));
  std::vector<TaskStateSnapshot> out;
  for (const TaskId& id : ids) out.push_back(SnapshotLocked(id, tasks_[id]));
  return out;
}

JobStatus CoordinationService::JobStatusLocked() {
  JobStatus status;
  status.service_incarnation = incarnation_;
  status.version = version_;
  bool all_shut_down = true;
  bool failed = false;
  // The job is finished when every task shut down cleanly, failed when a
  // task whose failure is the job's is in error, and running otherwise.
  for (const auto& [id, t] : tasks_) {
    status.tasks.push_back(SnapshotLocked(id, t));
    if (!t.shut_down) all_shut_down = false;
    if (t.state == TaskState::kError && !t.recoverable) failed = true;
  }
  status.job_state = all_shut_down ? "finished" : failed ? "failed" : "running";
  const absl::Time now = env_->Now();
  for (const auto& [id, b] : barriers_) {
    if (b.done) continue;
    BarrierSnapshot s;
    s.id = b.id;
    s.counter = b.counter;
    s.initiator = b.initiator;
    for (const TaskId& p : b.participants) {
      (b.arrived.count(p) ? s.arrived : s.missing).push_back(p);
    }
    s.remaining = b.deadline - now;
    status.barriers.push_back(std::move(s));
  }
  return status;
}

JobStatus CoordinationService::GetJobStatus() {
  absl::MutexLock lock(&mu_);
  return JobStatusLocked();
}

// Called after every change of a task's state. The version lets watchers
// ask "anything after version V?" without missing a change that happened
// between two of their calls; the shutdown barrier and alive-task rounds
// wait on task states, so they are re-checked here too. The snapshot is made
// once, for all watchers.
void CoordinationService::StateChangedLocked(Callbacks* out) {
  ++version_;
  CheckShutdownBarrierLocked(out);
  CheckAliveRoundsLocked(out);
  if (watchers_.empty()) return;
  JobStatus status = JobStatusLocked();
  for (auto it = watchers_.begin(); it != watchers_.end();) {
    if (it->second.after_version < version_) {
      if (it->second.timer != 0) timer_->Cancel(it->second.timer);
      out->push_back([cb = std::move(it->second.done), status] { cb(status); });
      it = watchers_.erase(it);
    } else {
      ++it;
    }
  }
}

void CoordinationService::WatchJobStateAsync(int64_t after_version,
                                             absl::Time deadline,
                                             JobStateCallback done) {
  absl::StatusOr<JobStatus> result;
  {
    absl::MutexLock lock(&mu_);
    if (stopped_) {
      result = StoppedError();
    } else if (after_version < version_) {
      // Something changed since the caller's version: answer now.
      result = JobStatusLocked();
    } else {
      const uint64_t id = next_watcher_id_++;
      Watcher& w = watchers_[id];
      w.after_version = after_version;
      w.done = std::move(done);
      // At the deadline the watch answers with the unchanged state (not an
      // error): the caller learns the job is still as it was and watches
      // again, which is how `cohort status --watch` stays live.
      if (deadline != absl::InfiniteFuture()) {
        w.timer = timer_->Schedule(deadline, [this, id] {
          JobStateCallback cb;
          absl::StatusOr<JobStatus> status;
          {
            absl::MutexLock lock(&mu_);
            auto it = watchers_.find(id);
            if (it == watchers_.end()) return;
            cb = std::move(it->second.done);
            watchers_.erase(it);
            status = JobStatusLocked();
          }
          cb(std::move(status));
        });
      }
      return;
    }
  }
  done(std::move(result));
}

}  // namespace cohort::coord
