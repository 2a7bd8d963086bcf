// CoordinationService, part 1: creation, the error builders, Stop, and
// membership (registration, heartbeats, shutdown). Error reporting and job
// state are in coordination_service_state.cc, barriers and alive-task
// agreement in coordination_service_barriers.cc, the key-value calls in
// coordination_service_kv.cc.
#include "cohort/coord/coordination_service.h"

#include <random>

#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "cohort/base/logging.h"
#include "cohort/base/status.h"
#include "cohort/coord/coordination_service_util.h"
#include "cohort/coordination.pb.h"

namespace cohort::coord {

using internal::FormatUtc;
using internal::RunAll;
using internal::TaskList;

namespace {

// A service incarnation is random so that a restarted service (in a new
// process, with none of the old state) never matches what clients of its
// predecessor remember; never 0, which callers send to mean "not known yet".
uint64_t RandomIncarnation() {
  std::random_device rd;
  uint64_t value = 0;
  while (value == 0) {
    value = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  }
  return value;
}

}  // namespace

std::string TaskId::ToString() const { return absl::StrCat(job, ":", index); }

absl::StatusOr<TaskId> TaskId::Parse(absl::string_view text) {
  // The index follows the last colon; everything before it is the job, so a
  // bad text is refused whole, with the text in the message.
  const size_t colon = text.rfind(':');
  TaskId task;
  if (colon == absl::string_view::npos || colon == 0 ||
      !absl::SimpleAtoi(text.substr(colon + 1), &task.index) ||
      task.index < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("task \"", text, "\": expected JOB:INDEX, e.g. worker:1"));
  }
  task.job = std::string(text.substr(0, colon));
  return task;
}

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

// Options are checked here, not on first use: a service with no tasks or a
// zero heartbeat timeout would accept calls and fail every task later, far
// from the mistake.
absl::StatusOr<std::unique_ptr<CoordinationService>>
CoordinationService::Create(CoordinationServiceOptions options) {
  if (options.jobs.empty()) {
    return absl::InvalidArgumentError(
        "coordination service: no jobs to coordinate (the cluster is empty)");
  }
  for (const auto& [job, count] : options.jobs) {
    if (job.empty() || count <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("coordination service: job \"", job, "\" has ", count,
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
  // Membership is fixed when the service starts, as in TSL: every task of
  // the cluster has an entry from the start, so a barrier or an error
  // message can name tasks that never registered, and a task the cluster
  // does not list is refused instead of silently joining.
  absl::MutexLock lock(&mu_);
  for (const auto& [job, count] : options_.jobs) {
    for (int i = 0; i < count; ++i) {
      Task& t = tasks_[TaskId{job, i}];
      t.recoverable = options_.recoverable_jobs.count(job) > 0;
    }
  }
  timer_ = std::make_unique<DeadlineTimer>(env_);
}

// Stop first: it answers every parked call while the timer still exists,
// and no timer callback can then find a half-destroyed service.
CoordinationService::~CoordinationService() {
  Stop();
  timer_.reset();
}

// Every error the service returns carries a CoordinationServiceError
// payload, because callers branch on it, never on the text: the service's
// incarnation (an agent can tell a restarted service), the task the error is
// about (ErrorSourceTask), and whether a task reported it itself or the
// service detected it.
absl::Status CoordinationService::Error(absl::StatusCode code,
                                        const std::string& message,
                                        const TaskId* source,
                                        bool reported) const {
  return internal::ServiceError(code, message, incarnation_, source, reported);
}

absl::Status CoordinationService::BarrierStatus(absl::StatusCode code,
                                                const std::string& message,
                                                const Barrier& barrier) const {
  return internal::WithBarrierPayload(Error(code, message), barrier.id,
                                      barrier.counter);
}

namespace internal {

absl::Status ServiceError(absl::StatusCode code, const std::string& message,
                          uint64_t incarnation, const TaskId* source,
                          bool reported) {
  absl::Status status(code, message);
  CoordinationServiceError payload;
  payload.set_is_reported_error(reported);
  payload.set_service_incarnation(incarnation);
  if (source != nullptr) {
    payload.mutable_source_task()->set_job_name(source->job);
    payload.mutable_source_task()->set_task_id(source->index);
  }
  status.SetPayload(kCoordinationErrorUrl,
                    absl::Cord(payload.SerializeAsString()));
  return status;
}

absl::Status WithBarrierPayload(absl::Status status, const std::string& id,
                                int64_t counter) {
  BarrierError payload;
  payload.set_barrier_id(id);
  payload.set_counter(counter);
  status.SetPayload(kBarrierErrorUrl, absl::Cord(payload.SerializeAsString()));
  return status;
}

}  // namespace internal

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

// Two codes for one event: a parked long poll (error polling, a watch) ends
// Cancelled, which its owner treats as "stop quietly"; any other call made
// after Stop is a caller still using a dead service, Internal, as in TSL.
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
  // In this order: after Stop nothing else matters; a caller that knows an
  // older service incarnation holds state this service never had, so it
  // must register again before anything it says makes sense; only then is
  // the task itself looked up.
  if (stopped_) return long_poll ? StopCancelled() : StoppedError();
  if (service_incarnation != 0 && service_incarnation != incarnation_) {
    return ServiceRestartedError(task, service_incarnation);
  }
  if (t == nullptr) return UnknownTaskError(task);
  return absl::OkStatus();
}

absl::Status CoordinationService::StaleIncarnationLocked(
    const TaskId& task, const Task& t, uint64_t incarnation,
    absl::string_view what) const {
  // 0 is "not given" (a caller that predates the field), never a real
  // incarnation (RegisterTask's are random and nonzero).
  if (incarnation == 0 || incarnation == t.incarnation) {
    return absl::OkStatus();
  }
  return Error(
      absl::StatusCode::kFailedPrecondition,
      absl::StrCat(
          "refused ", what, " from task ", task.ToString(), " incarnation ",
          incarnation, ": the task's current incarnation is ", t.incarnation,
          t.incarnation == 0 ? " (not registered)" : "",
          "; a process of an ended attempt?",
          t.retired.count(incarnation) > 0
              ? " Yes: that incarnation belongs to an attempt of the job that "
                "has ended."
              : "",
          " It should have been stopped (check that the launcher could kill "
          "it)"));
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

// Every parked call (error polls, barriers, alive-task rounds, watches,
// shutdown waits) is answered exactly once: its callback is taken out under
// the lock and run after it is released, so that a callback that calls back
// into the service cannot deadlock.
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
                                        uint64_t incarnation, Callbacks* out) {
  // A (re)connection starts the task afresh: a recoverable task that was in
  // error is healthy again, and ever_connected lets timeouts tell "never
  // registered" from "registered, then died".
  t.state = TaskState::kConnected;
  t.incarnation = incarnation;
  t.last_heartbeat = env_->Now();
  t.error = absl::OkStatus();
  t.error_time = absl::InfinitePast();
  t.ever_connected = true;
  t.shut_down = false;
  t.heartbeat_timeout_error = false;
  ScheduleHeartbeatCheckLocked(task, t);
  NotifyTaskLocked(task, t, out);
  COHORT_LOG(INFO) << "coordination: task " << task.ToString()
                   << " connected (incarnation " << incarnation << ")";
}

// One timer per task, due when its heartbeat would be late, instead of a
// periodic sweep over all tasks: a heartbeat only moves last_heartbeat (no
// timer work on the hot path, which matters with thousands of tasks), and
// the timer, when it fires early because a heartbeat came meanwhile, simply
// re-arms for the new due time. The incarnation is captured so that a timer
// armed for a task's previous process does nothing.
void CoordinationService::ScheduleHeartbeatCheckLocked(const TaskId& task,
                                                       Task& t) {
  if (t.heartbeat_timer != 0) timer_->Cancel(t.heartbeat_timer);
  const uint64_t incarnation = t.incarnation;
  t.heartbeat_timer = timer_->Schedule(
      t.last_heartbeat + options_.heartbeat_timeout, [this, task, incarnation] {
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
              absl::StrCat("task ", task.ToString(), " (incarnation ",
                           incarnation, ") sent no heartbeat for ",
                           absl::FormatDuration(now - t->last_heartbeat),
                           " (timeout ",
                           absl::FormatDuration(options_.heartbeat_timeout),
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
    } else if (t->retired.count(incarnation) > 0) {
      // A process of an attempt that ended (ResetForNextAttempt) still runs:
      // it must not join the next attempt, whose peers never knew it.
      result = Error(
          absl::StatusCode::kFailedPrecondition,
          absl::StrCat("task ", task.ToString(), " incarnation ", incarnation,
                       " belongs to an attempt of the job that has ended; "
                       "this process should have been stopped (check that "
                       "the launcher could kill it)"),
          &task);
    } else if (t->state == TaskState::kConnected &&
               t->incarnation == incarnation) {
      // A retry of a registration that succeeded (its reply was lost):
      // idempotent.
      t->last_heartbeat = env_->Now();
      join_init_barrier = options_.register_with_barrier;
    } else if (t->state == TaskState::kConnected) {
      // A new process for a task that is still connected: it restarted
      // before its heartbeat timed out. A recoverable task simply replaces
      // its predecessor (whose barrier arrivals and error poll belong to the
      // old process and end here); any other task's peers may hold state
      // from the old process, so the task fails, as in TSL.
      if (t->recoverable) {
        COHORT_LOG(WARNING) << "coordination: recoverable task "
                            << task.ToString() << " restarted (incarnation "
                            << t->incarnation << " -> " << incarnation << ")";
        LeaveBarriersLocked(task, *t, "restarted with a new incarnation", &out);
        if (t->poll) {
          out.push_back(
              [cb = std::move(t->poll),
               e = Error(absl::StatusCode::kCancelled,
                         absl::StrCat("task ", task.ToString(),
                                      " re-registered with a new "
                                      "incarnation; this poll "
                                      "belongs to the old one"))] { cb(e); });
          t->poll = nullptr;
        }
        ConnectLocked(task, *t, incarnation, &out);
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
      // A task in error comes back only when the job allows it: recoverable
      // tasks always, and a task that was only late with its heartbeats
      // (stalled, not dead) when the owner asks for that.
      if (t->recoverable || (options_.allow_new_incarnation_to_reconnect &&
                             t->heartbeat_timeout_error)) {
        ConnectLocked(task, *t, incarnation, &out);
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
      ConnectLocked(task, *t, incarnation, &out);
      StateChangedLocked(&out);
      join_init_barrier = options_.register_with_barrier;
    }
  }
  RunAll(out);
  if (!join_init_barrier) {
    done(result);
    return;
  }
  // With register_with_barrier (TSL's cluster_register_with_barrier) the
  // reply waits until every task has registered, so no task starts work
  // while a peer is still missing; a failure there is Internal, as in TSL.
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
    if (absl::Status caller = CallerStatusLocked(task, t, service_incarnation);
        !caller.ok()) {
      result = std::move(caller);
    } else if (t->state == TaskState::kError) {
      result = Error(absl::StatusCode::kAborted,
                     absl::StrCat("task ", task.ToString(),
                                  " is in error: ", t->error.message()),
                     &task);
    } else if (t->state == TaskState::kDisconnected) {
      result =
          Error(absl::StatusCode::kInvalidArgument,
                absl::StrCat(
                    "task ", task.ToString(),
                    t->shut_down ? " already shut down" : " is not registered",
                    "; heartbeats are accepted only between RegisterTask "
                    "and ShutdownTask"));
    } else if (t->incarnation != incarnation) {
      // A heartbeat from another process than the registered one. For a
      // recoverable task it is the old process, replaced: only it is told.
      // Otherwise two processes claim one task (or it restarted unseen), and
      // the task fails rather than let both run.
      if (t->recoverable) {
        result = Error(absl::StatusCode::kAborted,
                       absl::StrCat("task ", task.ToString(), " incarnation ",
                                    incarnation, " is stale: incarnation ",
                                    t->incarnation, " registered since"));
      } else {
        absl::Status error = Error(
            absl::StatusCode::kAborted,
            absl::StrCat("task ", task.ToString(),
                         " sent a heartbeat as "
                         "incarnation ",
                         incarnation, " but incarnation ", t->incarnation,
                         " is registered: two processes claim this task, or "
                         "it restarted"),
            &task);
        SetTaskErrorLocked(task, *t, error, &out);
        result = error;
      }
    } else {
      // The hot path: no timer work (see ScheduleHeartbeatCheckLocked).
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
  NotifyTaskLocked(task, t, out);
  LeaveBarriersLocked(task, t, "shut down", out);
  if (t.poll) {
    out->push_back([cb = std::move(t.poll),
                    e = Error(absl::StatusCode::kCancelled,
                              absl::StrCat("task ", task.ToString(),
                                           " shut down"))] { cb(e); });
    t.poll = nullptr;
  }
  // Watchers of the job state compare versions to learn that it changed.
  ++version_;
  COHORT_LOG(INFO) << "coordination: task " << task.ToString() << " shut down";
}

void CoordinationService::ShutdownTaskAsync(const TaskId& task,
                                            StatusCallback done,
                                            uint64_t incarnation) {
  Callbacks out;
  absl::Status result;
  bool parked = false;
  {
    absl::MutexLock lock(&mu_);
    Task* t = FindTaskLocked(task);
    if (absl::Status caller = CallerStatusLocked(task, t); !caller.ok()) {
      result = std::move(caller);
    } else if (absl::Status stale = StaleIncarnationLocked(
                   task, *t, incarnation, "ShutdownTask");
               !stale.ok()) {
      result = std::move(stale);
    } else if (t->shut_down) {
      // Idempotent.
    } else if (options_.shutdown_barrier_timeout <= absl::ZeroDuration() ||
               t->recoverable || t->state != TaskState::kConnected) {
      DisconnectLocked(task, *t, &out);
      StateChangedLocked(&out);
    } else {
      // The shutdown barrier (TSL's shutdown_barrier_timeout): a task's
      // ShutdownTask returns only when every connected non-recoverable task
      // is shutting down too, so that no task leaves while peers may still
      // need it. Recoverable and unconnected tasks leave at once (above). A
      // second call from the same task replaces the first (a client retry).
      if (auto it = shutdown_waiting_.find(task);
          it != shutdown_waiting_.end()) {
        out.push_back(
            [cb = std::move(it->second),
             e = Error(absl::StatusCode::kCancelled,
                       "replaced by a newer ShutdownTask call")] { cb(e); });
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
      // The timer above lets the waiting tasks go, naming the stragglers:
      // leaving is never blocked forever by a task that never shuts down.
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

// ResetTask (TSL's) lets a task in error register again without restarting
// the job: the owner decided the failure is handled.
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
      NotifyTaskLocked(task, *t, &out);
      StateChangedLocked(&out);
    }
  }
  RunAll(out);
  return result;
}

}  // namespace cohort::coord
