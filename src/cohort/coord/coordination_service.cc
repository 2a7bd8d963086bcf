#include "cohort/coord/coordination_service.h"

#include <random>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "cohort/base/logging.h"
#include "cohort/base/status.h"
#include "cohort/coordination.pb.h"

namespace cohort::coord {
namespace {

uint64_t RandomIncarnation() {
  std::random_device rd;
  uint64_t value = 0;
  while (value == 0) {
    value = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  }
  return value;
}

std::string FormatUtc(absl::Time t) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", t, absl::UTCTimeZone());
}

std::string TaskList(const std::set<TaskId>& tasks) {
  std::vector<std::string> names;
  for (const TaskId& t : tasks) names.push_back(t.ToString());
  return absl::StrJoin(names, ", ");
}

void RunAll(std::vector<std::function<void()>>& callbacks) {
  for (auto& fn : callbacks) fn();
  callbacks.clear();
}

}  // namespace

std::string TaskId::ToString() const { return absl::StrCat(job, ":", index); }

const char* TaskStateName(TaskState state) {
  switch (state) {
    case TaskState::kDisconnected:
      return "disconnected";
    case TaskState::kConnected:
      return "connected";
    case TaskState::kError:
      return "error";
  }
  return "unknown";
}

bool IsServiceError(const absl::Status& status) {
  return status.GetPayload(kCoordinationErrorUrl).has_value();
}

bool IsServiceStopped(const absl::Status& status) {
  auto payload = status.GetPayload(kCoordinationErrorUrl);
  if (!payload.has_value()) return false;
  CoordinationServiceError error;
  return error.ParseFromString(std::string(*payload)) &&
         error.service_stopped();
}

std::optional<TaskId> ErrorSourceTask(const absl::Status& status) {
  auto payload = status.GetPayload(kCoordinationErrorUrl);
  if (!payload.has_value()) return std::nullopt;
  CoordinationServiceError error;
  if (!error.ParseFromString(std::string(*payload)) ||
      error.source_task().job_name().empty()) {
    return std::nullopt;
  }
  return TaskId{error.source_task().job_name(), error.source_task().task_id()};
}

absl::StatusOr<std::unique_ptr<CoordinationService>> CoordinationService::Create(
    CoordinationServiceOptions options) {
  if (options.jobs.empty()) {
    return absl::InvalidArgumentError(
        "coordination service: no jobs to coordinate (the cluster is empty)");
  }
  for (const auto& [job, count] : options.jobs) {
    if (job.empty() || count <= 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "coordination service: job \"", job, "\" has ", count,
          " tasks; every job needs a name and at least one task"));
    }
  }
  if (options.heartbeat_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "coordination service: heartbeat timeout must be positive, got ",
        absl::FormatDuration(options.heartbeat_timeout)));
  }
  return std::unique_ptr<CoordinationService>(
      new CoordinationService(std::move(options)));
}

CoordinationService::CoordinationService(CoordinationServiceOptions options)
    : options_(std::move(options)),
      env_(options_.env != nullptr ? options_.env : Env::Default()),
      incarnation_(RandomIncarnation()),
      kv_(options_.kv_limits) {
  absl::MutexLock lock(&mu_);
  for (const auto& [job, count] : options_.jobs) {
    for (int i = 0; i < count; ++i) {
      Task& t = tasks_[TaskId{job, i}];
      t.recoverable = options_.recoverable_jobs.count(job) > 0;
    }
  }
  timer_ = std::make_unique<DeadlineTimer>(env_);
}

CoordinationService::~CoordinationService() {
  Stop();
  timer_.reset();
}

absl::Status CoordinationService::Error(absl::StatusCode code,
                                        const std::string& message,
                                        const TaskId* source,
                                        bool reported) const {
  absl::Status status(code, message);
  CoordinationServiceError payload;
  payload.set_is_reported_error(reported);
  payload.set_service_incarnation(incarnation_);
  if (source != nullptr) {
    payload.mutable_source_task()->set_job_name(source->job);
    payload.mutable_source_task()->set_task_id(source->index);
  }
  status.SetPayload(kCoordinationErrorUrl,
                    absl::Cord(payload.SerializeAsString()));
  return status;
}

absl::Status CoordinationService::BarrierStatus(absl::StatusCode code,
                                                const std::string& message,
                                                const Barrier& barrier) const {
  absl::Status status = Error(code, message);
  BarrierError payload;
  payload.set_barrier_id(barrier.id);
  payload.set_counter(barrier.counter);
  status.SetPayload(kBarrierErrorUrl, absl::Cord(payload.SerializeAsString()));
  return status;
}

absl::Status CoordinationService::ServiceStoppedStatus(
    absl::StatusCode code, absl::string_view message) const {
  absl::Status status(code, message);
  CoordinationServiceError payload;
  payload.set_service_incarnation(incarnation_);
  payload.set_service_stopped(true);
  status.SetPayload(kCoordinationErrorUrl,
                    absl::Cord(payload.SerializeAsString()));
  return status;
}

absl::Status CoordinationService::StopCancelled() const {
  return ServiceStoppedStatus(
      absl::StatusCode::kCancelled,
      "the coordination service stopped (the job is over or its host process "
      "is exiting)");
}

absl::Status CoordinationService::StoppedError() const {
  return ServiceStoppedStatus(
      absl::StatusCode::kInternal,
      "the coordination service has stopped (its process is shutting down); "
      "the job cannot coordinate any more");
}

absl::Status CoordinationService::CallerStatusLocked(
    const TaskId& task, const Task* t, uint64_t service_incarnation,
    bool long_poll) const {
  if (stopped_) return long_poll ? StopCancelled() : StoppedError();
  if (service_incarnation != 0 && service_incarnation != incarnation_) {
    return ServiceRestartedError(task, service_incarnation);
  }
  if (t == nullptr) return UnknownTaskError(task);
  return absl::OkStatus();
}

absl::Status CoordinationService::UnknownTaskError(const TaskId& task) const {
  std::vector<std::string> jobs;
  for (const auto& [job, count] : options_.jobs) {
    jobs.push_back(absl::StrCat(job, " x", count));
  }
  return Error(absl::StatusCode::kInvalidArgument,
               absl::StrCat("task ", task.ToString(),
                            " is not part of this job (tasks: ",
                            absl::StrJoin(jobs, ", "),
                            "); check the task's --task / TF_CONFIG"));
}

CoordinationService::Task* CoordinationService::FindTaskLocked(
    const TaskId& task) {
  auto it = tasks_.find(task);
  return it == tasks_.end() ? nullptr : &it->second;
}

bool CoordinationService::IsRecoverable(const TaskId& task) const {
  return options_.recoverable_jobs.count(task.job) > 0;
}

void CoordinationService::Stop() {
  Callbacks out;
  {
    absl::MutexLock lock(&mu_);
    if (stopped_) return;
    stopped_ = true;
    const absl::Status cancelled = StopCancelled();
    for (auto& [id, t] : tasks_) {
      if (t.poll) {
        out.push_back([cb = std::move(t.poll), cancelled] { cb(cancelled); });
        t.poll = nullptr;
      }
    }
    for (auto& [id, b] : barriers_) {
      if (!b.done) {
        FinishBarrierLocked(
            b,
            BarrierStatus(absl::StatusCode::kAborted,
                          absl::StrCat("barrier '", b.id, "' (#", b.counter,
                                       ") aborted: the coordination service "
                                       "stopped"),
                          b),
            &out);
      }
    }
    for (auto& [key, round] : alive_rounds_) {
      for (auto& [task, cb] : round.waiting) {
        out.push_back([cb = std::move(cb), cancelled] { cb(cancelled); });
      }
    }
    alive_rounds_.clear();
    for (auto& [id, w] : watchers_) {
      out.push_back([cb = std::move(w.done), cancelled] { cb(cancelled); });
    }
    watchers_.clear();
    for (auto& [task, cb] : shutdown_waiting_) {
      out.push_back([cb = std::move(cb), cancelled] { cb(cancelled); });
    }
    shutdown_waiting_.clear();
  }
  RunAll(out);
  // Closing the store fails parked gets and watches and every later
  // key-value call, with no window in which a call could slip in.
  kv_.Close(StoppedError());
}

// ---------------------------------------------------------------- membership

void CoordinationService::ConnectLocked(const TaskId& task, Task& t,
                                        uint64_t incarnation) {
  t.state = TaskState::kConnected;
  t.incarnation = incarnation;
  t.last_heartbeat = env_->Now();
  t.error = absl::OkStatus();
  t.error_time = absl::InfinitePast();
  t.ever_connected = true;
  t.shut_down = false;
  t.heartbeat_timeout_error = false;
  ScheduleHeartbeatCheckLocked(task, t);
  COHORT_LOG(INFO) << "coordination: task " << task.ToString()
                   << " connected (incarnation " << incarnation << ")";
}

void CoordinationService::ScheduleHeartbeatCheckLocked(const TaskId& task,
                                                       Task& t) {
  if (t.heartbeat_timer != 0) timer_->Cancel(t.heartbeat_timer);
  const uint64_t incarnation = t.incarnation;
  t.heartbeat_timer = timer_->Schedule(
      t.last_heartbeat + options_.heartbeat_timeout,
      [this, task, incarnation] {
        Callbacks out;
        {
          absl::MutexLock lock(&mu_);
          Task* t = FindTaskLocked(task);
          if (stopped_ || t == nullptr || t->state != TaskState::kConnected ||
              t->incarnation != incarnation) {
            return;
          }
          t->heartbeat_timer = 0;
          const absl::Time now = env_->Now();
          const absl::Time due = t->last_heartbeat + options_.heartbeat_timeout;
          if (now < due) {
            ScheduleHeartbeatCheckLocked(task, *t);
            return;
          }
          absl::Status error = Error(
              absl::StatusCode::kUnavailable,
              absl::StrCat(
                  "task ", task.ToString(), " (incarnation ", incarnation,
                  ") sent no heartbeat for ",
                  absl::FormatDuration(now - t->last_heartbeat),
                  " (timeout ", absl::FormatDuration(options_.heartbeat_timeout),
                  ", last at ", FormatUtc(t->last_heartbeat),
                  "): it crashed, was preempted, or cannot reach the "
                  "coordinator; check its logs and host"),
              &task);
          SetTaskErrorLocked(task, *t, error, &out);
          t->heartbeat_timeout_error = true;
        }
        RunAll(out);
      });
}

void CoordinationService::RegisterTaskAsync(
    const TaskId& task, uint64_t incarnation,
    std::function<void(absl::StatusOr<uint64_t>)> done) {
  Callbacks out;
  absl::StatusOr<uint64_t> result = incarnation_;
  bool join_init_barrier = false;
  {
    absl::MutexLock lock(&mu_);
    Task* t = FindTaskLocked(task);
    if (absl::Status caller = CallerStatusLocked(task, t); !caller.ok()) {
      result = std::move(caller);
    } else if (t->state == TaskState::kConnected &&
               t->incarnation == incarnation) {
      // A retry of a registration that succeeded.
      t->last_heartbeat = env_->Now();
      join_init_barrier = options_.register_with_barrier;
    } else if (t->state == TaskState::kConnected) {
      if (t->recoverable) {
        COHORT_LOG(WARNING) << "coordination: recoverable task "
                            << task.ToString() << " restarted (incarnation "
                            << t->incarnation << " -> " << incarnation << ")";
        LeaveBarriersLocked(task, *t, "restarted with a new incarnation", &out);
        if (t->poll) {
          out.push_back([cb = std::move(t->poll),
                         e = Error(absl::StatusCode::kCancelled,
                                   absl::StrCat("task ", task.ToString(),
                                                " re-registered with a new "
                                                "incarnation; this poll "
                                                "belongs to the old one"))] {
            cb(e);
          });
          t->poll = nullptr;
        }
        ConnectLocked(task, *t, incarnation);
        StateChangedLocked(&out);
        join_init_barrier = options_.register_with_barrier;
      } else {
        absl::Status error = Error(
            absl::StatusCode::kAborted,
            absl::StrCat("task ", task.ToString(),
                         " restarted: it registered with incarnation ",
                         t->incarnation, " and now with ", incarnation,
                         "; the job is not recoverable, so it fails (restart "
                         "the whole job, or mark job \"",
                         task.job, "\" recoverable)"),
            &task);
        SetTaskErrorLocked(task, *t, error, &out);
        result = error;
      }
    } else if (t->state == TaskState::kError) {
      if (t->recoverable || (options_.allow_new_incarnation_to_reconnect &&
                             t->heartbeat_timeout_error)) {
        ConnectLocked(task, *t, incarnation);
        StateChangedLocked(&out);
        join_init_barrier = options_.register_with_barrier;
      } else {
        result = Error(
            absl::StatusCode::kAborted,
            absl::StrCat("task ", task.ToString(), " is in error since ",
                         FormatUtc(t->error_time), " (", t->error.message(),
                         "); it cannot register again until reset (ResetTask) "
                         "or the job restarts"),
            &task);
      }
    } else {
      ConnectLocked(task, *t, incarnation);
      StateChangedLocked(&out);
      join_init_barrier = options_.register_with_barrier;
    }
  }
  RunAll(out);
  if (!join_init_barrier) {
    done(result);
    return;
  }
  const uint64_t service_incarnation = incarnation_;
  BarrierAsync(kInitBarrierId, 0, options_.cluster_register_timeout, task, {},
               [done = std::move(done), service_incarnation,
                this](absl::StatusOr<int64_t> r) {
                 if (r.ok()) {
                   done(service_incarnation);
                 } else {
                   absl::Status s = r.status();
                   done(Error(absl::StatusCode::kInternal,
                              absl::StrCat("cluster registration failed: ",
                                           s.message())));
                 }
               });
}

absl::StatusOr<uint64_t> CoordinationService::Heartbeat(
    const TaskId& task, uint64_t incarnation, uint64_t service_incarnation) {
  Callbacks out;
  absl::StatusOr<uint64_t> result = incarnation_;
  {
    absl::MutexLock lock(&mu_);
    Task* t = FindTaskLocked(task);
    if (absl::Status caller =
            CallerStatusLocked(task, t, service_incarnation);
        !caller.ok()) {
      result = std::move(caller);
    } else if (t->state == TaskState::kError) {
      result = Error(absl::StatusCode::kAborted,
                     absl::StrCat("task ", task.ToString(), " is in error: ",
                                  t->error.message()),
                     &task);
    } else if (t->state == TaskState::kDisconnected) {
      result = Error(
          absl::StatusCode::kInvalidArgument,
          absl::StrCat("task ", task.ToString(),
                       t->shut_down ? " already shut down"
                                    : " is not registered",
                       "; heartbeats are accepted only between RegisterTask "
                       "and ShutdownTask"));
    } else if (t->incarnation != incarnation) {
      if (t->recoverable) {
        result = Error(absl::StatusCode::kAborted,
                       absl::StrCat("task ", task.ToString(), " incarnation ",
                                    incarnation, " is stale: incarnation ",
                                    t->incarnation, " registered since"));
      } else {
        absl::Status error = Error(
            absl::StatusCode::kAborted,
            absl::StrCat("task ", task.ToString(), " sent a heartbeat as "
                         "incarnation ", incarnation, " but incarnation ",
                         t->incarnation,
                         " is registered: two processes claim this task, or "
                         "it restarted"),
            &task);
        SetTaskErrorLocked(task, *t, error, &out);
        result = error;
      }
    } else {
      t->last_heartbeat = env_->Now();
    }
  }
  RunAll(out);
  return result;
}

void CoordinationService::DisconnectLocked(const TaskId& task, Task& t,
                                           Callbacks* out) {
  if (t.heartbeat_timer != 0) {
    timer_->Cancel(t.heartbeat_timer);
    t.heartbeat_timer = 0;
  }
  t.state = TaskState::kDisconnected;
  t.shut_down = true;
  t.disconnect_time = env_->Now();
  LeaveBarriersLocked(task, t, "shut down", out);
  if (t.poll) {
    out->push_back([cb = std::move(t.poll),
                    e = Error(absl::StatusCode::kCancelled,
                              absl::StrCat("task ", task.ToString(),
                                           " shut down"))] { cb(e); });
    t.poll = nullptr;
  }
  ++version_;
  COHORT_LOG(INFO) << "coordination: task " << task.ToString() << " shut down";
}

void CoordinationService::ShutdownTaskAsync(const TaskId& task,
                                            StatusCallback done) {
  Callbacks out;
  absl::Status result;
  bool parked = false;
  {
    absl::MutexLock lock(&mu_);
    Task* t = FindTaskLocked(task);
    if (absl::Status caller = CallerStatusLocked(task, t); !caller.ok()) {
      result = std::move(caller);
    } else if (t->shut_down) {
      // Idempotent.
    } else if (options_.shutdown_barrier_timeout <= absl::ZeroDuration() ||
               t->recoverable || t->state != TaskState::kConnected) {
      DisconnectLocked(task, *t, &out);
      StateChangedLocked(&out);
    } else {
      if (auto it = shutdown_waiting_.find(task);
          it != shutdown_waiting_.end()) {
        out.push_back([cb = std::move(it->second),
                       e = Error(absl::StatusCode::kCancelled,
                                 "replaced by a newer ShutdownTask call")] {
          cb(e);
        });
      }
      shutdown_waiting_[task] = std::move(done);
      parked = true;
      if (shutdown_timer_ == 0) {
        shutdown_deadline_ = env_->Now() + options_.shutdown_barrier_timeout;
        shutdown_timer_ = timer_->Schedule(shutdown_deadline_, [this] {
          Callbacks out;
          {
            absl::MutexLock lock(&mu_);
            shutdown_timer_ = 0;
            if (stopped_ || shutdown_waiting_.empty()) return;
            std::set<TaskId> stragglers;
            for (const auto& [id, t] : tasks_) {
              if (t.state == TaskState::kConnected && !t.recoverable &&
                  shutdown_waiting_.count(id) == 0) {
                stragglers.insert(id);
              }
            }
            absl::Status error = Error(
                absl::StatusCode::kDeadlineExceeded,
                absl::StrCat(
                    "shutdown barrier timed out after ",
                    absl::FormatDuration(options_.shutdown_barrier_timeout),
                    ": still running (did not call Shutdown): ",
                    TaskList(stragglers),
                    "; this task is disconnected cleanly anyway"));
            auto waiting = std::move(shutdown_waiting_);
            shutdown_waiting_.clear();
            for (auto& [id, cb] : waiting) {
              DisconnectLocked(id, tasks_[id], &out);
              out.push_back([cb = std::move(cb), error] { cb(error); });
            }
            StateChangedLocked(&out);
          }
          RunAll(out);
        });
      }
      CheckShutdownBarrierLocked(&out);
    }
  }
  RunAll(out);
  if (!parked) done(result);
}

void CoordinationService::CheckShutdownBarrierLocked(Callbacks* out) {
  if (shutdown_waiting_.empty()) return;
  for (const auto& [id, t] : tasks_) {
    if (t.state == TaskState::kConnected && !t.recoverable &&
        shutdown_waiting_.count(id) == 0) {
      return;
    }
  }
  auto waiting = std::move(shutdown_waiting_);
  shutdown_waiting_.clear();
  if (shutdown_timer_ != 0) {
    timer_->Cancel(shutdown_timer_);
    shutdown_timer_ = 0;
  }
  for (auto& [id, cb] : waiting) {
    DisconnectLocked(id, tasks_[id], out);
    out->push_back([cb = std::move(cb)] { cb(absl::OkStatus()); });
  }
}

absl::Status CoordinationService::ResetTask(const TaskId& task) {
  Callbacks out;
  absl::Status result;
  {
    absl::MutexLock lock(&mu_);
    Task* t = FindTaskLocked(task);
    if (absl::Status caller = CallerStatusLocked(task, t); !caller.ok()) {
      result = std::move(caller);
    } else {
      if (t->heartbeat_timer != 0) {
        timer_->Cancel(t->heartbeat_timer);
        t->heartbeat_timer = 0;
      }
      LeaveBarriersLocked(task, *t, "was reset", &out);
      if (t->poll) {
        out.push_back([cb = std::move(t->poll),
                       e = Error(absl::StatusCode::kCancelled,
                                 absl::StrCat("task ", task.ToString(),
                                              " was reset"))] { cb(e); });
        t->poll = nullptr;
      }
      t->state = TaskState::kDisconnected;
      t->error = absl::OkStatus();
      t->disconnect_time = env_->Now();
      StateChangedLocked(&out);
    }
  }
  RunAll(out);
  return result;
}

absl::Status CoordinationService::ReportErrorToService(
    const TaskId& task, const absl::Status& error) {
  Callbacks out;
  absl::Status result;
  {
    absl::MutexLock lock(&mu_);
    Task* t = FindTaskLocked(task);
    if (absl::Status caller = CallerStatusLocked(task, t); !caller.ok()) {
      result = std::move(caller);
    } else if (t->state != TaskState::kConnected) {
      result = Error(absl::StatusCode::kFailedPrecondition,
                     absl::StrCat("task ", task.ToString(),
                                  " reported an error but is ",
                                  TaskStateName(t->state),
                                  "; only connected tasks can report"));
    } else {
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
      absl::StrCat("the coordination service restarted (task ",
                   task.ToString(), " registered with service incarnation ",
                   known_incarnation, ", the service now has ", incarnation_,
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
    if (absl::Status caller =
            CallerStatusLocked(task, t, service_incarnation, /*long_poll=*/true);
        !caller.ok()) {
      result = std::move(caller);
    } else if (!propagated_error_.ok() && !t->recoverable) {
      result = propagated_error_;
    } else if (t->state == TaskState::kError) {
      result = t->error;
    } else if (t->state != TaskState::kConnected) {
      result = Error(absl::StatusCode::kFailedPrecondition,
                     absl::StrCat("task ", task.ToString(),
                                  " polls for errors but is not connected; "
                                  "register first"));
    } else if (t->incarnation != incarnation) {
      result = Error(absl::StatusCode::kFailedPrecondition,
                     absl::StrCat("task ", task.ToString(), " incarnation ",
                                  incarnation, " is stale (registered: ",
                                  t->incarnation, ")"));
    } else {
      if (t->poll) {
        out.push_back([cb = std::move(t->poll),
                       e = Error(absl::StatusCode::kCancelled,
                                 "replaced by a newer PollForError call")] {
          cb(e);
        });
      }
      t->poll = std::move(done);
      parked = true;
    }
  }
  RunAll(out);
  if (!parked) done(result);
}

TaskStateSnapshot CoordinationService::SnapshotLocked(const TaskId& id,
                                                      const Task& t) {
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

void CoordinationService::StateChangedLocked(Callbacks* out) {
  ++version_;
  CheckShutdownBarrierLocked(out);
  CheckAliveRoundsLocked(out);
  if (watchers_.empty()) return;
  JobStatus status = JobStatusLocked();
  for (auto it = watchers_.begin(); it != watchers_.end();) {
    if (it->second.after_version < version_) {
      if (it->second.timer != 0) timer_->Cancel(it->second.timer);
      out->push_back(
          [cb = std::move(it->second.done), status] { cb(status); });
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
      result = JobStatusLocked();
    } else {
      const uint64_t id = next_watcher_id_++;
      Watcher& w = watchers_[id];
      w.after_version = after_version;
      w.done = std::move(done);
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

// ---------------------------------------------------------------- alive tasks

void CoordinationService::GetAliveTasksAsync(const TaskId& requester,
                                             const std::vector<TaskId>& tasks,
                                             absl::Time deadline,
                                             AliveCallback done) {
  Callbacks out;
  absl::Status error;
  {
    absl::MutexLock lock(&mu_);
    Task* t = FindTaskLocked(requester);
    auto ids = ResolveTasksLocked(tasks, "GetAliveTasks");
    if (absl::Status caller = CallerStatusLocked(requester, t); !caller.ok()) {
      error = std::move(caller);
    } else if (!ids.ok()) {
      error = ids.status();
    } else if (ids->count(requester) == 0) {
      error = Error(absl::StatusCode::kInvalidArgument,
                    absl::StrCat("GetAliveTasks: requesting task ",
                                 requester.ToString(),
                                 " is not in the task list it asks about"));
    } else if (t->state != TaskState::kConnected) {
      error = Error(absl::StatusCode::kFailedPrecondition,
                    absl::StrCat("GetAliveTasks: task ", requester.ToString(),
                                 " is ", TaskStateName(t->state),
                                 ", not connected"));
    } else {
      std::vector<std::string> names;
      for (const TaskId& id : *ids) names.push_back(id.ToString());
      const std::string key = absl::StrJoin(names, ",");
      AliveRound& round = alive_rounds_[key];
      round.tasks = *ids;
      if (auto it = round.waiting.find(requester); it != round.waiting.end()) {
        out.push_back([cb = std::move(it->second),
                       e = Error(absl::StatusCode::kCancelled,
                                 "replaced by a newer GetAliveTasks call")] {
          cb(e);
        });
      }
      round.waiting[requester] = std::move(done);
      if (round.timer == 0 && deadline != absl::InfiniteFuture()) {
        round.timer = timer_->Schedule(deadline, [this, key] {
          Callbacks out;
          {
            absl::MutexLock lock(&mu_);
            auto it = alive_rounds_.find(key);
            if (it == alive_rounds_.end()) return;
            std::set<TaskId> missing;
            for (const TaskId& id : it->second.tasks) {
              if (tasks_[id].state == TaskState::kConnected &&
                  it->second.waiting.count(id) == 0) {
                missing.insert(id);
              }
            }
            absl::Status e = Error(
                absl::StatusCode::kDeadlineExceeded,
                absl::StrCat("GetAliveTasks timed out waiting for connected "
                             "tasks that did not ask: ",
                             TaskList(missing)));
            for (auto& [id, cb] : it->second.waiting) {
              out.push_back([cb = std::move(cb), e] { cb(e); });
            }
            alive_rounds_.erase(it);
          }
          RunAll(out);
        });
      }
      CheckAliveRoundsLocked(&out);
    }
  }
  RunAll(out);
  if (!error.ok()) done(error);
}

void CoordinationService::CheckAliveRoundsLocked(Callbacks* out) {
  for (auto it = alive_rounds_.begin(); it != alive_rounds_.end();) {
    AliveRound& round = it->second;
    bool complete = !round.waiting.empty();
    std::vector<AliveTask> alive;
    for (const TaskId& id : round.tasks) {
      const Task& t = tasks_[id];
      if (t.state != TaskState::kConnected) continue;
      if (round.waiting.count(id) == 0) {
        complete = false;
        break;
      }
      alive.push_back(AliveTask{id, t.incarnation});
    }
    if (!complete) {
      ++it;
      continue;
    }
    if (round.timer != 0) timer_->Cancel(round.timer);
    for (auto& [id, cb] : round.waiting) {
      out->push_back([cb = std::move(cb), alive] { cb(alive); });
    }
    it = alive_rounds_.erase(it);
  }
}

// ---------------------------------------------------------------- barriers

std::string CoordinationService::DescribeMissingLocked(const Barrier& b) {
  std::vector<std::string> parts;
  const absl::Time now = env_->Now();
  for (const TaskId& id : b.participants) {
    if (b.arrived.count(id)) continue;
    const Task& t = tasks_[id];
    std::string why;
    if (t.state == TaskState::kConnected) {
      why = absl::StrCat("connected but did not arrive (last heartbeat ",
                         absl::FormatDuration(absl::Trunc(
                             now - t.last_heartbeat, absl::Milliseconds(1))),
                         " ago): slow or stuck before the barrier");
    } else if (t.state == TaskState::kError) {
      why = absl::StrCat("died at ", FormatUtc(t.error_time), ": ",
                         t.error.message());
    } else if (t.shut_down) {
      why = absl::StrCat("shut down at ", FormatUtc(t.disconnect_time));
    } else if (t.ever_connected) {
      why = absl::StrCat("disconnected (reset) at ",
                         FormatUtc(t.disconnect_time));
    } else {
      why = "never registered: check that it was started and can reach the "
            "coordinator";
    }
    parts.push_back(absl::StrCat(id.ToString(), " (", why, ")"));
  }
  return absl::StrJoin(parts, "; ");
}

void CoordinationService::FinishBarrierLocked(Barrier& b, absl::Status result,
                                              Callbacks* out) {
  if (b.done) return;
  b.done = true;
  b.result = result;
  if (b.timer != 0) {
    timer_->Cancel(b.timer);
    b.timer = 0;
  }
  for (const TaskId& p : b.participants) {
    auto it = tasks_.find(p);
    if (it != tasks_.end()) it->second.barriers.erase(b.id);
  }
  const int64_t counter = b.counter;
  for (auto& [task, cb] : b.waiting) {
    if (result.ok()) {
      out->push_back([cb = std::move(cb), counter] { cb(counter); });
    } else {
      out->push_back([cb = std::move(cb), result] { cb(result); });
    }
  }
  b.waiting.clear();
  for (auto& cb : b.on_done) {
    out->push_back([cb = std::move(cb), result] { cb(result); });
  }
  b.on_done.clear();
}

void CoordinationService::MaybePassBarrierLocked(Barrier& b, Callbacks* out) {
  if (b.done) return;
  for (const TaskId& p : b.participants) {
    if (b.arrived.count(p) == 0) return;
  }
  FinishBarrierLocked(b, absl::OkStatus(), out);
}

void CoordinationService::LeaveBarriersLocked(const TaskId& task, Task& t,
                                              const std::string& why,
                                              Callbacks* out) {
  std::set<std::string> ids = std::move(t.barriers);
  t.barriers.clear();
  for (const std::string& id : ids) {
    auto it = barriers_.find(id);
    if (it == barriers_.end() || it->second.done) continue;
    Barrier& b = it->second;
    if (t.recoverable) {
      b.arrived.erase(task);
      t.barriers.insert(id);  // still a participant
      if (auto w = b.waiting.find(task); w != b.waiting.end()) {
        out->push_back(
            [cb = std::move(w->second),
             e = BarrierStatus(absl::StatusCode::kCancelled,
                               absl::StrCat("barrier '", id, "': task ",
                                            task.ToString(), " ", why,
                                            "; its earlier arrival no longer "
                                            "counts"),
                               b)] { cb(e); });
        b.waiting.erase(w);
      }
      continue;
    }
    FinishBarrierLocked(
        b,
        BarrierStatus(
            absl::StatusCode::kInternal,
            absl::StrCat("barrier '", id, "' (#", b.counter,
                         ") failed: participant ", task.ToString(), " ", why,
                         " while ", b.arrived.size(), "/",
                         b.participants.size(), " tasks had arrived"),
            b),
        out);
  }
}

void CoordinationService::BarrierAsync(const std::string& id, int64_t counter,
                                       absl::Duration timeout,
                                       const TaskId& task,
                                       const std::vector<TaskId>& participants,
                                       CounterCallback done) {
  Callbacks out;
  absl::StatusOr<int64_t> result = int64_t{0};
  bool parked = false;
  {
    absl::MutexLock lock(&mu_);
    Task* t = FindTaskLocked(task);
    auto it = barriers_.find(id);
    bool create = false;
    if (absl::Status caller = CallerStatusLocked(task, t); !caller.ok()) {
      result = std::move(caller);
    } else if (id.empty()) {
      result = Error(absl::StatusCode::kInvalidArgument,
                     "barrier id is empty");
    } else if (it == barriers_.end() &&
               barriers_.size() >= options_.max_barrier_ids) {
      // Ids are chosen by the tasks and each id's counter is kept for its
      // reuse; a job uses a fixed set of ids, so a flood of new ones is a
      // bug or an attack, refused before it can grow the table.
      result = Error(absl::StatusCode::kResourceExhausted,
                     absl::StrCat("barrier '", id.substr(0, 128), "': ",
                                  barriers_.size(),
                                  " distinct barrier ids are in use (cap "
                                  "max_barrier_ids); reuse ids with counters "
                                  "instead of making new ones"));
    } else if (it == barriers_.end()) {
      if (counter == 0 || t->recoverable) {
        counter = 0;
        create = true;
      } else {
        Barrier fake;
        fake.id = id;
        fake.counter = -1;
        result = BarrierStatus(
            absl::StatusCode::kInternal,
            absl::StrCat("barrier '", id, "': task ", task.ToString(),
                         " asks for instance #", counter,
                         " but the service has never seen this barrier: the "
                         "coordination service probably restarted"),
            fake);
      }
    } else {
      Barrier& b = it->second;
      if (t->recoverable && counter == 0 && b.done && b.counter >= 0 &&
          id != kShutdownBarrierId && id != kInitBarrierId) {
        counter = b.counter + 1;  // re-sync a restarted recoverable task
      }
      if (counter == b.counter) {
        if (b.done) {
          // A retry of a finished instance: the cached answer.
          if (b.result.ok()) {
            result = b.counter;
          } else {
            result = b.result;
          }
        }
      } else if (counter == b.counter + 1 && b.done) {
        create = true;
      } else {
        result = BarrierStatus(
            absl::StatusCode::kInternal,
            absl::StrCat("barrier '", id, "': task ", task.ToString(),
                         " asks for instance #", counter,
                         " but the service is at #", b.counter, " (",
                         b.done ? "finished" : "open",
                         "): a task or the service restarted, or one task "
                         "skipped or repeated a barrier call"),
            b);
      }
    }
    if (result.ok() && !stopped_ && t != nullptr &&
        !(it != barriers_.end() && it->second.done && !create)) {
      // Join (creating first if needed).
      auto ids = ResolveTasksLocked(participants,
                                    absl::StrCat("barrier '", id, "'"));
      if (!ids.ok()) {
        result = ids.status();
      } else if (ids->count(task) == 0) {
        result = Error(absl::StatusCode::kInvalidArgument,
                       absl::StrCat("barrier '", id, "': calling task ",
                                    task.ToString(),
                                    " is not in its participant list (",
                                    TaskList(*ids), ")"));
      } else {
        if (create) {
          Barrier& b = barriers_[id];
          b = Barrier();
          b.id = id;
          b.counter = counter;
          b.deadline = env_->Now() + timeout;
          b.initiator = task;
          b.all_tasks = participants.empty();
          b.participants = *ids;
          for (const TaskId& p : b.participants) tasks_[p].barriers.insert(id);
          b.timer = timer_->Schedule(b.deadline, [this, id, counter] {
            Callbacks out;
            {
              absl::MutexLock lock(&mu_);
              auto it = barriers_.find(id);
              if (it == barriers_.end() || it->second.counter != counter ||
                  it->second.done) {
                return;
              }
              Barrier& b = it->second;
              b.timer = 0;
              FinishBarrierLocked(
                  b,
                  BarrierStatus(
                      absl::StatusCode::kDeadlineExceeded,
                      absl::StrCat(
                          "barrier '", id, "' (#", counter, ") timed out: ",
                          b.arrived.size(), "/", b.participants.size(),
                          " tasks arrived (first: ", b.initiator.ToString(),
                          "); missing: ", DescribeMissingLocked(b)),
                      b),
                  &out);
            }
            RunAll(out);
          });
          // A participant that is already dead or gone fails it at once.
          for (const TaskId& p : b.participants) {
            const Task& pt = tasks_[p];
            if (pt.recoverable) continue;
            if (pt.state == TaskState::kError || pt.shut_down) {
              FinishBarrierLocked(
                  b,
                  BarrierStatus(
                      absl::StatusCode::kInternal,
                      absl::StrCat("barrier '", id, "' (#", counter,
                                   ") cannot pass: participant ", p.ToString(),
                                   pt.shut_down
                                       ? " already shut down"
                                       : absl::StrCat(" is in error: ",
                                                      pt.error.message())),
                      b),
                  &out);
              break;
            }
          }
        }
        Barrier& b = barriers_[id];
        const bool same_set = participants.empty()
                                  ? b.all_tasks
                                  : (!b.all_tasks && *ids == b.participants);
        if (b.done) {
          if (b.result.ok()) {
            result = b.counter;
          } else {
            result = b.result;
          }
        } else if (!same_set) {
          absl::Status error = BarrierStatus(
              absl::StatusCode::kInvalidArgument,
              absl::StrCat("barrier '", id, "' (#", b.counter, "): task ",
                           task.ToString(), " passed participants [",
                           participants.empty() ? "all tasks" : TaskList(*ids),
                           "] but the barrier was opened by ",
                           b.initiator.ToString(), " with [",
                           b.all_tasks ? "all tasks"
                                       : TaskList(b.participants),
                           "]; every caller must pass the same set"),
              b);
          FinishBarrierLocked(b, error, &out);
          result = error;
        } else {
          if (auto w = b.waiting.find(task); w != b.waiting.end()) {
            out.push_back(
                [cb = std::move(w->second),
                 e = BarrierStatus(absl::StatusCode::kCancelled,
                                   "replaced by a newer call of the same "
                                   "barrier from the same task",
                                   b)] { cb(e); });
          }
          b.arrived.insert(task);
          b.waiting[task] = std::move(done);
          parked = true;
          MaybePassBarrierLocked(b, &out);
        }
      }
    }
  }
  RunAll(out);
  if (!parked) done(std::move(result));
}

absl::Status CoordinationService::CancelBarrier(const std::string& id,
                                                int64_t counter,
                                                const TaskId& task) {
  Callbacks out;
  absl::Status result;
  {
    absl::MutexLock lock(&mu_);
    auto it = barriers_.find(id);
    const std::string cancelled_message =
        absl::StrCat("barrier '", id, "' (#", counter, ") was cancelled by task ",
                     task.ToString());
    if (absl::Status caller = CallerStatusLocked(task, FindTaskLocked(task)); !caller.ok()) {
      result = std::move(caller);
    } else if (it != barriers_.end() && it->second.counter == counter) {
      Barrier& b = it->second;
      if (b.done) {
        result = Error(absl::StatusCode::kFailedPrecondition,
                       absl::StrCat("barrier '", id, "' (#", counter,
                                    ") already ",
                                    b.result.ok() ? "passed" : "failed",
                                    "; nothing to cancel"));
      } else {
        FinishBarrierLocked(
            b, BarrierStatus(absl::StatusCode::kCancelled, cancelled_message, b),
            &out);
      }
    } else if ((it == barriers_.end() && counter == 0) ||
               (it != barriers_.end() && it->second.done &&
                counter == it->second.counter + 1)) {
      Barrier& b = barriers_[id];
      b = Barrier();
      b.id = id;
      b.counter = counter;
      b.initiator = task;
      b.done = true;
      b.result = BarrierStatus(absl::StatusCode::kCancelled, cancelled_message,
                               b);
    } else {
      result = Error(
          absl::StatusCode::kFailedPrecondition,
          absl::StrCat("cannot cancel barrier '", id, "' (#", counter,
                       "): the service is at #",
                       it == barriers_.end() ? -1 : it->second.counter));
    }
  }
  RunAll(out);
  return result;
}

// ---------------------------------------------------------------- key-value

absl::Status CoordinationService::InsertKeyValue(absl::string_view key,
                                                 std::string value,
                                                 bool allow_overwrite) {
  return kv_.Insert(key, std::move(value), allow_overwrite);
}

absl::StatusOr<std::string> CoordinationService::TryGetKeyValue(
    absl::string_view key) {
  return kv_.TryGet(key);
}

absl::StatusOr<int64_t> CoordinationService::IncrementKeyValue(
    absl::string_view key, int64_t delta) {
  return kv_.Increment(key, delta);
}

absl::StatusOr<CompareAndSwapResult> CoordinationService::CompareAndSwapKeyValue(
    absl::string_view key, const std::optional<std::string>& expected,
    std::string desired) {
  return kv_.CompareAndSwap(key, expected, std::move(desired));
}

absl::StatusOr<std::vector<std::pair<std::string, std::string>>>
CoordinationService::ListKeyValueDir(absl::string_view dir) {
  return kv_.ListDir(dir);
}

absl::Status CoordinationService::DeleteKeyValue(absl::string_view key,
                                                 bool is_directory) {
  return kv_.Delete(key, is_directory);
}

void CoordinationService::GetKeyValueAsync(const std::string& key,
                                           absl::Time deadline,
                                           KeyValueStore::GetCallback done) {
  // No stopped_ check here: Stop() closes the store, which answers this get
  // (parked or not) with the stopped error atomically.
  const uint64_t id = kv_.GetAsync(key, std::move(done));
  if (id != 0 && deadline != absl::InfiniteFuture()) {
    const absl::Time start = env_->Now();
    timer_->Schedule(deadline, [this, id, key, start, deadline] {
      kv_.ExpireGet(
          id, Error(absl::StatusCode::kDeadlineExceeded,
                    absl::StrCat("key \"", KeyValueStore::NormalizeKey(key),
                                 "\" was not set within ",
                                 absl::FormatDuration(absl::Trunc(
                                     deadline - start, absl::Milliseconds(1))),
                                 "; check the task that should publish it")));
    });
  }
}

void CoordinationService::WatchKeyValueAsync(
    const std::string& key, int64_t after_version, absl::Time deadline,
    KeyValueStore::WatchCallback done) {
  const uint64_t id = kv_.WatchAsync(key, after_version, std::move(done));
  if (id != 0 && deadline != absl::InfiniteFuture()) {
    timer_->Schedule(deadline, [this, id, key, after_version] {
      kv_.ExpireWatch(
          id, Error(absl::StatusCode::kDeadlineExceeded,
                    absl::StrCat("key \"", KeyValueStore::NormalizeKey(key),
                                 "\" did not change after version ",
                                 after_version, " before the deadline")));
    });
  }
}

}  // namespace cohort::coord
