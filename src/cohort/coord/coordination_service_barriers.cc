// CoordinationService, alive-task agreement and named barriers
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

using internal::FirstDifference;
using internal::FormatUtc;
using internal::RunAll;
using internal::TaskList;

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
      error = Error(
          absl::StatusCode::kInvalidArgument,
          absl::StrCat("GetAliveTasks: requesting task ", requester.ToString(),
                       " is not in the task list it asks about"));
    } else if (t->state != TaskState::kConnected) {
      error = Error(
          absl::StatusCode::kFailedPrecondition,
          absl::StrCat("GetAliveTasks: task ", requester.ToString(), " is ",
                       TaskStateName(t->state), ", not connected"));
    } else {
      std::vector<std::string> names;
      for (const TaskId& id : *ids) names.push_back(id.ToString());
      const std::string key = absl::StrJoin(names, ",");
      AliveRound& round = alive_rounds_[key];
      round.tasks = *ids;
      if (auto it = round.waiting.find(requester); it != round.waiting.end()) {
        out.push_back(
            [cb = std::move(it->second),
             e = Error(absl::StatusCode::kCancelled,
                       "replaced by a newer GetAliveTasks call")] { cb(e); });
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
  // Every waiter gets this message: name a few, count the rest, so that a
  // barrier of 16k tasks does not answer each of them with all the others.
  constexpr int kNamed = 16;
  std::vector<std::string> parts;
  int unnamed = 0;
  const absl::Time now = env_->Now();
  for (const TaskId& id : b.participants) {
    if (b.arrived.count(id)) continue;
    if (static_cast<int>(parts.size()) >= kNamed) {
      ++unnamed;
      continue;
    }
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
      why =
          "never registered: check that it was started and can reach the "
          "coordinator";
    }
    parts.push_back(absl::StrCat(id.ToString(), " (", why, ")"));
  }
  if (unnamed > 0) parts.push_back(absl::StrCat("and ", unnamed, " more"));
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
}

void CoordinationService::MaybePassBarrierLocked(Barrier& b, Callbacks* out) {
  if (b.done) return;
  // Only participants arrive, so counting is enough until the last one: a
  // barrier of N tasks costs O(N) in all, not O(N) per arrival.
  if (b.arrived.size() < b.participants.size()) return;
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
        BarrierStatus(absl::StatusCode::kInternal,
                      absl::StrCat("barrier '", id, "' (#", b.counter,
                                   ") failed: participant ", task.ToString(),
                                   " ", why, " while ", b.arrived.size(), "/",
                                   b.participants.size(), " tasks had arrived"),
                      b),
        out);
  }
}

void CoordinationService::BarrierAsync(const std::string& id, int64_t counter,
                                       absl::Duration timeout,
                                       const TaskId& task,
                                       const std::vector<TaskId>& participants,
                                       CounterCallback done,
                                       uint64_t incarnation) {
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
    } else if (absl::Status stale = StaleIncarnationLocked(
                   task, *t, incarnation,
                   absl::StrCat("barrier '", id.substr(0, 128), "' (#", counter,
                                ")"));
               !stale.ok()) {
      // Before anything is created or joined: the barrier stays the
      // present attempt's alone.
      result = std::move(stale);
    } else if (id.empty()) {
      result = Error(absl::StatusCode::kInvalidArgument, "barrier id is empty");
    } else if (it == barriers_.end() &&
               barriers_.size() >= options_.max_barrier_ids) {
      // Ids are chosen by the tasks and each id's counter is kept for its
      // reuse; a job uses a fixed set of ids, so a flood of new ones is a
      // bug or an attack, refused before it can grow the table.
      result = Error(
          absl::StatusCode::kResourceExhausted,
          absl::StrCat("barrier '", id.substr(0, 128), "': ", barriers_.size(),
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
      if (t->recoverable && counter == 0 && b.counter >= 0 &&
          id != kShutdownBarrierId && id != kInitBarrierId) {
        // Re-sync a restarted recoverable task (its counters start at 0
        // again): it joins the open instance, or the next one.
        counter = b.done ? b.counter + 1 : b.counter;
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
      // Join (creating first if needed). Joining an open barrier of all
      // tasks reuses its participant set: resolving "all tasks" again would
      // cost O(N) per arrival.
      absl::StatusOr<std::set<TaskId>> resolved;
      const std::set<TaskId>* ids = nullptr;
      if (participants.empty() && !create && it != barriers_.end() &&
          it->second.all_tasks) {
        ids = &it->second.participants;
      } else {
        resolved = ResolveTasksLocked(participants,
                                      absl::StrCat("barrier '", id, "'"));
        if (resolved.ok()) ids = &*resolved;
      }
      if (ids == nullptr) {
        result = resolved.status();
      } else if (ids->count(task) == 0) {
        result = Error(
            absl::StatusCode::kInvalidArgument,
            absl::StrCat("barrier '", id, "': calling task ", task.ToString(),
                         " is not in its participant list (", TaskList(*ids),
                         ")"));
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
          b.generation = next_barrier_generation_++;
          for (const TaskId& p : b.participants) tasks_[p].barriers.insert(id);
          b.timer = timer_->Schedule(
              b.deadline, [this, id, counter, generation = b.generation] {
                Callbacks out;
                {
                  absl::MutexLock lock(&mu_);
                  auto it = barriers_.find(id);
                  // (id, counter) alone is not enough: after
                  // ResetForNextAttempt the next attempt's barrier may have
                  // both again.
                  if (it == barriers_.end() ||
                      it->second.generation != generation ||
                      it->second.counter != counter || it->second.done) {
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
                           b.all_tasks ? "all tasks" : TaskList(b.participants),
                           "]", FirstDifference(*ids, b.participants),
                           "; every caller must pass the same set"),
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
                                                const TaskId& task,
                                                uint64_t incarnation) {
  Callbacks out;
  absl::Status result;
  {
    absl::MutexLock lock(&mu_);
    auto it = barriers_.find(id);
    const std::string cancelled_message =
        absl::StrCat("barrier '", id, "' (#", counter,
                     ") was cancelled by task ", task.ToString());
    const Task* t = FindTaskLocked(task);
    if (absl::Status caller = CallerStatusLocked(task, t); !caller.ok()) {
      result = std::move(caller);
    } else if (absl::Status stale = StaleIncarnationLocked(
                   task, *t, incarnation,
                   absl::StrCat("cancelling barrier '", id.substr(0, 128),
                                "' (#", counter, ")"));
               !stale.ok()) {
      result = std::move(stale);
    } else if (it != barriers_.end() && it->second.counter == counter) {
      Barrier& b = it->second;
      if (b.done) {
        result =
            Error(absl::StatusCode::kFailedPrecondition,
                  absl::StrCat("barrier '", id, "' (#", counter, ") already ",
                               b.result.ok() ? "passed" : "failed",
                               "; nothing to cancel"));
      } else {
        FinishBarrierLocked(
            b,
            BarrierStatus(absl::StatusCode::kCancelled, cancelled_message, b),
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
      b.result =
          BarrierStatus(absl::StatusCode::kCancelled, cancelled_message, b);
    } else {
      result =
          Error(absl::StatusCode::kFailedPrecondition,
                absl::StrCat("cannot cancel barrier '", id, "' (#", counter,
                             "): the service is at #",
                             it == barriers_.end() ? -1 : it->second.counter));
    }
  }
  RunAll(out);
  return result;
}

}  // namespace cohort::coord
