#include "cohort/launch/attempt_supervisor.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <optional>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cohort/base/status.h"
#include "cohort/launch/launch_support.h"

namespace cohort::launch {
namespace {

// How long a task's output is read after it exited: a descendant that left
// its process group can hold the pipe open.
constexpr absl::Duration kDrain = absl::Seconds(2);

}  // namespace

// --- AttemptEvents ---------------------------------------------------------

void AttemptEvents::Push(Event e) {
  absl::MutexLock lock(&mu_);
  events_.push_back(std::move(e));
}

void AttemptEvents::TaskExited(int attempt, int task, int restart,
                               ExitInfo exit, absl::Time when) {
  Event e{Event::kExit};
  e.attempt = attempt;
  e.task = task;
  e.restart = restart;
  e.exit = exit;
  e.when = when;
  Push(std::move(e));
}

void AttemptEvents::TaskFailed(int attempt, FailureRecord record) {
  Event e{Event::kTaskFailed};
  e.attempt = attempt;
  e.record = std::move(record);
  Push(std::move(e));
}

void AttemptEvents::TaskOrphaned(int attempt, FailureRecord record) {
  Event e{Event::kTaskFailed};
  e.attempt = attempt;
  e.record = std::move(record);
  e.orphaned = true;
  Push(std::move(e));
}

void AttemptEvents::TaskAdopted(int attempt, int job_task) {
  Event e{Event::kAdopted};
  e.attempt = attempt;
  e.task = job_task;
  Push(std::move(e));
}

void AttemptEvents::Changed() { Push(Event{Event::kChanged}); }

void AttemptEvents::ControlPlaneLost(const absl::Status& error) {
  Event e{Event::kLost};
  e.error = error;
  Push(std::move(e));
}

void AttemptEvents::Stop() {
  absl::MutexLock lock(&mu_);
  stop_requested_ = true;
  events_.push_back(Event{Event::kStop});
}

bool AttemptEvents::stop_requested() {
  absl::MutexLock lock(&mu_);
  return stop_requested_;
}

bool AttemptEvents::stop_pending() {
  absl::MutexLock lock(&mu_);
  return stop_requested_ && !stop_taken_;
}

bool AttemptEvents::AwaitStopOr(const std::atomic<bool>& done) {
  absl::MutexLock lock(&mu_);
  auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return done.load() || (stop_requested_ && !stop_taken_);
  };
  mu_.Await(absl::Condition(&ready));
  return stop_requested_ && !stop_taken_;
}

std::deque<AttemptEvents::Event> AttemptEvents::Wait(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  auto has_events = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !events_.empty();
  };
  env_->AwaitWithDeadline(&mu_, absl::Condition(&has_events), deadline);
  std::deque<Event> batch;
  batch.swap(events_);
  for (const Event& e : batch) {
    if (e.kind == Event::kStop) stop_taken_ = true;
  }
  return batch;
}

// --- AttemptSupervisor -----------------------------------------------------

AttemptPlan::Task PlanTask(TaskEnvironmentInputs inputs,
                           const std::vector<std::string>& command,
                           const std::string& log_dir, int tail_lines,
                           std::function<void(const std::string&)> output,
                           std::function<void(const std::string&)> messages) {
  const TaskSpec& spec = inputs.tasks[inputs.task];
  const std::string stem = absl::StrCat(log_dir, "/", spec.job, "-", spec.index,
                                        ".attempt-", inputs.attempt);
  inputs.epoch_file = stem + ".epoch";
  unlink(inputs.epoch_file.c_str());
  AttemptPlan::Task task;
  task.job_task = inputs.task;
  task.options.spec = spec;
  task.options.command = command;
  task.options.env = EnvironmentWith(TaskEnvironment(inputs));
  task.options.log_path = stem + ".log";
  task.options.tail_lines = tail_lines;
  task.options.output = std::move(output);
  task.options.messages = std::move(messages);
  return task;
}

std::string DescribeRestart(const TaskRestart& r, int task_restarts) {
  return absl::StrCat(
      r.task, " (", r.cause.where, ") ", r.cause.reason, " at ",
      FormatWallTime(r.cause.when), ", ",
      absl::FormatDuration(
          absl::Trunc(r.cause.after_start, absl::Milliseconds(1))),
      " after it started; restarted alone (restart ", r.restart, " of ",
      task_restarts,
      "), the other tasks kept running; its log: ", r.new_log_path);
}

std::vector<std::string> RestartSummaryLines(
    int attempt, const std::vector<TaskRestart>& restarts, int task_restarts) {
  if (restarts.empty()) return {};
  std::vector<std::string> lines = {absl::StrCat(
      restarts.size(), " task restart(s) in attempt ", attempt, ":")};
  for (const TaskRestart& r : restarts) {
    lines.push_back("  " + DescribeRestart(r, task_restarts));
  }
  return lines;
}

std::string SuccessLine(size_t tasks, int attempt, const AttemptEnd& end) {
  if (end.dropped.empty()) {
    return absl::StrCat("job succeeded: all ", tasks, " task(s) of attempt ",
                        attempt, " finished");
  }
  return absl::StrCat(
      "job succeeded: ", tasks - end.dropped.size(), " of ", tasks,
      " task(s) of attempt ", attempt, " finished; ",
      absl::StrJoin(end.dropped, ", ",
                    [](std::string* out, const FailureRecord& r) {
                      absl::StrAppend(out, r.task, " (", r.reason, ")");
                    }),
      " left the elastic job with no restart left");
}

struct AttemptSupervisor::State {
  struct Running {
    std::unique_ptr<TaskProcess> process;
    bool exited = false;
    int restart = 0;  // times this task was started again
    // Elastic jobs: the newest generation known when this process started
    // (a later one that lists the task lists this process), and whether
    // one did.
    int64_t started_after = -1;
    bool was_member = false;
    // Elastic jobs: the task failed while the coordination service could
    // not be reached (its host cut off), so it could not leave the
    // membership yet; it is restarted once it has (CheckMembership), or
    // fails the attempt after the plan's wait.
    std::optional<FailureRecord> awaiting_leave;
    absl::Time awaiting_since;
    // Set when the supervisor killed the task to restart it (the
    // coordination service failed it while it ran): the failure its exit
    // answers.
    std::optional<FailureRecord> killed_for;
  };
  std::vector<Running> running;  // the plan's tasks that started, in order
  int exited = 0;
  int done = 0;  // chief/worker/evaluator tasks of this launcher that exited 0
  std::optional<AttemptVerdict> verdict;
  bool stopping = false;
  bool killed = false;
  bool interrupted_here = false;
  bool lost = false;
  absl::Status lost_error;
  absl::Status spawn_error;
  int stopped_running = 0;
  int stopped_others = 0;
  absl::Time kill_at = absl::InfiniteFuture();
  absl::Time next_progress;
  std::string last_progress;
  std::vector<TaskRestart> restarts;
  std::vector<FailureRecord> dropped;
  // Elastic jobs: since when the members are fewer than the minimum.
  absl::Time below_minimum_since = absl::InfiniteFuture();
  bool membership_unreadable = false;
  absl::Time next_minimum_check;
  // The generations read so far: the next to read and the newest.
  int64_t next_generation = 0;
  std::optional<coord::Membership> newest;
  // Other launchers' tasks orphaned by their launcher's loss, by job task,
  // waiting for a replacement (AttemptPlan::replacement_wait) since `when`.
  struct Orphan {
    FailureRecord record;
    absl::Time since;
  };
  std::map<int, Orphan> orphans;
};

const char* OutcomeName(AttemptEnd::Outcome outcome) {
  switch (outcome) {
    case AttemptEnd::Outcome::kSucceeded:
      return "succeeded";
    case AttemptEnd::Outcome::kFailed:
      return "failed";
    case AttemptEnd::Outcome::kStopped:
      return "stopped";
    case AttemptEnd::Outcome::kLost:
      return "lost";
  }
  return "unknown";
}

std::string CauseLine(const AttemptEnd& end) {
  switch (end.outcome) {
    case AttemptEnd::Outcome::kSucceeded:
      return "";
    case AttemptEnd::Outcome::kLost:
      return absl::StrCat("the control plane was lost: ", end.lost.message());
    default:
      if (end.failure.task.empty()) return "stopped before any task failed";
      return absl::StrCat(end.failure.task, " (", end.failure.where, ") ",
                          end.failure.reason);
  }
}

AttemptSupervisor::AttemptSupervisor(Env* env, AttemptEvents* events,
                                     AttemptLedger* ledger, AttemptPlan plan)
    : env_(env), events_(events), ledger_(ledger), plan_(std::move(plan)) {}

AttemptSupervisor::~AttemptSupervisor() = default;

void AttemptSupervisor::Message(const std::string& line) {
  if (plan_.messages) plan_.messages(line);
}

void AttemptSupervisor::Record(State& s, const FailureRecord& record) {
  absl::Status written = ledger_->RecordFailure(record);
  if (written.ok() || s.lost) return;
  // Nobody may ever learn of this failure, so no verdict may ever come:
  // the attempt ends as if the control plane were gone.
  s.lost = true;
  s.lost_error = written;
  BeginStop(s);
}

AttemptEnd AttemptSupervisor::Run() {
  State s;
  Start(s);
  Watch(s);
  return Decide(s);
}

FailureRecord AttemptSupervisor::RecordFor(State& s, int task,
                                           const std::string& reason,
                                           absl::Time when, int code) {
  const AttemptPlan::Task& planned = plan_.tasks[task];
  FailureRecord r;
  r.task = planned.options.spec.Name();
  r.job_task = planned.job_task;
  r.reason = reason;
  r.code = code != 0 ? code : 1;
  r.when = when;
  const std::string on_host = plan_.host.empty() ? "" : " on " + plan_.host;
  if (task < static_cast<int>(s.running.size())) {
    TaskProcess& p = *s.running[task].process;
    r.where = absl::StrCat("pid ", p.pid(), on_host);
    r.after_start = when - p.started();
    r.log_path = p.log_path();
    r.tail = p.Tail();
  } else {
    r.where = plan_.host.empty() ? "on this machine" : "on " + plan_.host;
  }
  return r;
}

absl::StatusOr<std::unique_ptr<TaskProcess>> AttemptSupervisor::Spawn(
    int task, int restart) {
  TaskProcess::Options o = plan_.tasks[task].options;
  o.on_exit = [events = events_, attempt = plan_.attempt, task, restart](
                  ExitInfo exit, absl::Time when) {
    events->TaskExited(attempt, task, restart, exit, when);
  };
  // One entry, whatever the launcher's own environment held.
  const std::string key = absl::StrCat(kEnvTaskRestart, "=");
  o.env.erase(std::remove_if(o.env.begin(), o.env.end(),
                             [&](const std::string& v) {
                               return absl::StartsWith(v, key);
                             }),
              o.env.end());
  o.env.push_back(absl::StrCat(key, restart));
  if (restart > 0 && absl::EndsWith(o.log_path, ".log")) {
    o.log_path = absl::StrCat(o.log_path.substr(0, o.log_path.size() - 4),
                              ".restart-", restart, ".log");
  }
  absl::StatusOr<std::unique_ptr<TaskProcess>> process =
      TaskProcess::Start(env_, std::move(o));
  if (process.ok() && plan_.board != nullptr) {
    const TaskProcess& p = **process;
    plan_.board->TaskStarted(
        p.spec().Name(), plan_.host.empty() ? plan_.local_host : plan_.host,
        p.pid(), plan_.attempt, restart, p.log_path(), p.started());
  }
  return process;
}

void AttemptSupervisor::Start(State& s) {
  const int attempt = plan_.attempt;
  for (int i = 0; i < static_cast<int>(plan_.tasks.size()); ++i) {
    const int restart = plan_.tasks[i].first_restart;
    absl::StatusOr<std::unique_ptr<TaskProcess>> process = Spawn(i, restart);
    if (!process.ok()) {
      s.spawn_error =
          Annotate(process.status(), absl::StrCat("of attempt ", attempt));
      Record(s, RecordFor(s, i,
                          absl::StrCat("could not start: ",
                                       process.status().message()),
                          env_->Now(), 1));
      return;
    }
    s.running.push_back({std::move(process).value(), false, restart});
  }
  if (plan_.announce) {
    Message(absl::StrCat(
        "attempt ", attempt, ": started ",
        absl::StrJoin(s.running, ", ",
                      [](std::string* out, const State::Running& r) {
                        absl::StrAppend(out, r.process->spec().Name(), " (pid ",
                                        r.process->pid(), ")");
                      }),
        plan_.host.empty() ? "" : " on " + plan_.host, "; logs in ",
        plan_.log_dir));
  }
}

void AttemptSupervisor::Watch(State& s) {
  s.next_progress = env_->Now();
  const int started = static_cast<int>(s.running.size());
  while (!(s.exited == started && (s.verdict.has_value() || s.lost))) {
    absl::Time deadline = s.kill_at;
    if (plan_.progress_interval != absl::InfiniteDuration()) {
      deadline = std::min(deadline, s.next_progress);
    }
    if (plan_.elastic.min > 0 && plan_.elastic.read && !s.stopping &&
        !s.verdict.has_value()) {
      deadline = std::min(deadline, s.next_minimum_check);
    }
    // (Stopping, orphans wait no more: Tick leaves them.)
    for (const auto& [task, orphan] : s.orphans) {
      if (s.stopping) break;
      deadline = std::min(deadline, orphan.since + plan_.replacement_wait);
    }
    std::deque<AttemptEvents::Event> batch = events_->Wait(deadline);
    for (AttemptEvents::Event& e : batch) Handle(s, e);
    if (!s.verdict.has_value()) {
      s.verdict = ledger_->Verdict();
      if (s.verdict.has_value()) {
        if (!s.verdict->succeeded && plan_.on_failure) {
          plan_.on_failure(s.verdict->failure);
        }
        // A success leaves only ps tasks running: they are stopped too.
        BeginStop(s);
      }
    }
    Tick(s, env_->Now());
  }
}

void AttemptSupervisor::Handle(State& s, AttemptEvents::Event& e) {
  using Event = AttemptEvents::Event;
  switch (e.kind) {
    case Event::kExit:
      // Attempts never overlap (each ends when its tasks have exited), but
      // the rule stands: an older attempt's event changes nothing.
      if (e.attempt == plan_.attempt) {
        OnExit(s, e.task, e.restart, e.exit, e.when);
      }
      return;
    case Event::kTaskFailed: {
      if (e.attempt != plan_.attempt || s.stopping) return;
      // Where the service saw it fail, told with what this launcher knows
      // of the task (pid, log, last lines). A task of this launcher that
      // already exited is judged by its exit: one that exited 0 without
      // shutting its agent down is not failed later for its silence.
      FailureRecord r = e.record;
      const bool restarts = plan_.task_restarts >= 0;
      for (int i = 0; i < static_cast<int>(s.running.size()); ++i) {
        if (plan_.tasks[i].job_task != r.job_task) continue;
        State::Running& running = s.running[i];
        if (running.exited) return;
        r = RecordFor(s, i, e.record.reason, e.record.when, e.record.code);
        if (!restarts) break;
        // A restarted task's failure dated before its new process could
        // have been silent that long is the old process's, reported late
        // (the service's clock is this launcher's Env: the service runs in
        // this launcher, or task 0's, whose supervisor this is).
        if (running.killed_for.has_value() ||
            (running.restart > 0 &&
             r.when < running.process->started() + plan_.service_silence)) {
          return;
        }
        // Still running, yet failed (silent, or it reported an error): it
        // is killed, and its exit answers this failure.
        Message(absl::StrCat(r.task, " (", r.where, ") ", r.reason,
                             "; killing it"));
        running.killed_for = r;
        running.process->SignalGroup(SIGKILL);
        return;
      }
      // Another launcher's task (task 0's supervisor, under an engine):
      // that launcher cannot see this failure. In an elastic job the task
      // leaves the membership: the others re-form without it, and its
      // launcher, seeing it removed, stops and restarts it. Otherwise the
      // attempt fails, as the gang rule does; a program that merely exits is
      // restarted by its own launcher before the service could fail it.
      if (plan_.elastic.min > 0 && plan_.elastic.lose) {
        // As far as this launcher knows, it is a member (or its replacement
        // has not joined yet, and there is nothing to remove).
        const bool member =
            !s.newest.has_value() || s.newest->RankOf(r.task) >= 0;
        absl::StatusOr<coord::Membership> left = plan_.elastic.lose(r.task);
        // With no launcher left to restart it, it leaves the job: done for
        // the verdict (every launcher that saw the loss records it; the
        // first wins), while enough members remain. Below the minimum it
        // is not: the job fails once it stays there for the plan's wait
        // (CheckMinimum), as when a task runs out of restarts.
        const bool enough =
            left.ok() &&
            static_cast<int>(left->members.size()) >= plan_.elastic.min;
        absl::Status dropped = e.orphaned && enough
                                   ? ledger_->RecordDone(r.job_task)
                                   : absl::OkStatus();
        if (left.ok() && dropped.ok()) {
          Message(absl::StrCat(
              r.task, " (", r.where, ") ", r.reason, "; elastic: ",
              e.orphaned ? "removed from the membership; no launcher is left "
                           "to restart it, so it leaves the job"
              : member   ? "removed from the membership, its launcher stops it"
                         : "not a member (its replacement has not joined)",
              "; ", left->members.size(),
              enough ? " task(s) train on (" : " task(s) remain (",
              absl::StrJoin(left->members, ", "), ")",
              enough ? ""
                     : absl::StrCat(", below the elastic minimum of ",
                                    plan_.elastic.min)));
          return;
        }
        absl::StrAppend(
            &r.reason,
            left.ok() ? "; recording that it left the job failed: "
                      : "; removing it from the elastic "
                        "membership failed: ",
            left.ok() ? dropped.message() : left.status().message());
      }
      if (e.orphaned && restarts && plan_.elastic.min <= 0 &&
          plan_.replacement_wait > absl::ZeroDuration()) {
        if (s.orphans.count(r.job_task)) return;
        s.orphans[r.job_task] = {r, env_->Now()};
        Message(absl::StrCat(
            r.task, " (", r.where, ") ", r.reason,
            "; the other tasks run on while a launcher started again for it "
            "(by the engine, or by hand) rejoins the job, within ",
            absl::FormatDuration(plan_.replacement_wait)));
        return;
      }
      Record(s, r);
      return;
    }
    case Event::kAdopted: {
      if (e.attempt != plan_.attempt) return;
      auto it = s.orphans.find(e.task);
      if (it == s.orphans.end()) return;
      Message(absl::StrCat(it->second.record.task,
                           ": a launcher rejoined the job for it and "
                           "restarts it"));
      s.orphans.erase(it);
      return;
    }
    case Event::kChanged:
      return;  // the verdict is read after every batch
    case Event::kLost:
      if (!s.lost) {
        s.lost = true;
        s.lost_error = e.error;
        BeginStop(s);
      }
      return;
    case Event::kStop: {
      if (s.interrupted_here) return;
      s.interrupted_here = true;
      Message(absl::StrCat("interrupted: stopping every task of attempt ",
                           plan_.attempt));
      if (!s.lost && !plan_.tasks.empty()) {
        FailureRecord r = RecordFor(
            s, 0, "was interrupted: its launcher got SIGINT or SIGTERM",
            env_->Now(), 130);
        r.where = plan_.host.empty() ? "on this machine" : "on " + plan_.host;
        r.tail.clear();
        r.log_path.clear();
        r.interrupted = true;
        Record(s, r);
      }
      BeginStop(s);
      return;
    }
  }
}

void AttemptSupervisor::OnExit(State& s, int task, int restart,
                               const ExitInfo& exit, absl::Time when) {
  State::Running& r = s.running[task];
  if (r.exited || restart != r.restart) return;
  const TaskProcess& p = *r.process;
  // Killed to be restarted: a failure, even if it exited 0 before the kill.
  const bool ok = exit.ok() && !r.killed_for.has_value();
  if (plan_.board != nullptr) {
    plan_.board->TaskExited(p.spec().Name(), p.pid(), ok, exit.Describe(),
                            when);
  }
  if (ok || s.stopping || s.lost) {
    r.exited = true;
    ++s.exited;
  }
  if (ok) {
    if (p.spec().job == "ps" || s.lost) return;
    ++s.done;
    // Without this record nobody learns that the task finished and the
    // job would wait for it forever: when it cannot be written, the
    // attempt fails instead.
    absl::Status recorded = ledger_->RecordDone(plan_.tasks[task].job_task);
    if (!recorded.ok()) {
      Record(s, RecordFor(s, task,
                          absl::StrCat("finished, but its launcher could not "
                                       "record that: ",
                                       recorded.message()),
                          env_->Now(), 1));
    }
    return;
  }
  // Exits after the verdict (often caused by the stop) change nothing.
  if (s.stopping || s.lost) return;
  // The record carries the last lines: read what is left in the pipe.
  r.process->Finish(env_->Now() + kDrain);
  FailureRecord cause =
      RecordFor(s, task, exit.Describe(), when, exit.ShellCode());
  if (r.killed_for.has_value()) {
    // The service's reason, with the last lines read after the exit.
    std::vector<std::string> tail = std::move(cause.tail);
    cause = *r.killed_for;
    cause.tail = std::move(tail);
    absl::StrAppend(&cause.reason,
                    " (killed by its launcher: ", exit.Describe(), ")");
  }
  if (RestartAlone(s, task, cause)) return;
  r.exited = true;
  ++s.exited;
  Record(s, cause);
}

absl::StatusOr<coord::Membership> AttemptSupervisor::LeaveMembership(
    State& s, int task, const FailureRecord& cause) {
  absl::StatusOr<coord::Membership> newest = plan_.elastic.lose(cause.task);
  if (!newest.ok()) {
    return Annotate(
        newest.status(),
        absl::StrCat("removing ", cause.task, " from the elastic membership"));
  }
  const std::vector<std::string>& left = newest->members;
  const bool enough = static_cast<int>(left.size()) >= plan_.elastic.min;
  if (!enough && s.below_minimum_since == absl::InfiniteFuture()) {
    s.below_minimum_since = env_->Now();
  }
  Message(absl::StrCat(
      "elastic: ", cause.task, " left the membership; ", left.size(),
      " task(s) train on (", absl::StrJoin(left, ", "), "), minimum ",
      plan_.elastic.min,
      enough ? std::string()
             : absl::StrCat("; below it, the others wait up to ",
                            absl::FormatDuration(plan_.elastic.wait),
                            " for a replacement")));
  return *std::move(newest);
}

void AttemptSupervisor::CheckMembership(State& s, absl::Time now) {
  if (plan_.elastic.min <= 0 || !plan_.elastic.read || s.stopping ||
      s.verdict.has_value() || now < s.next_minimum_check) {
    return;
  }
  s.next_minimum_check = now + absl::Milliseconds(250);
  for (int i = 0; i < static_cast<int>(s.running.size()); ++i) {
    // A failure recorded here may end the attempt (BeginStop).
    if (s.stopping) return;
    State::Running& r = s.running[i];
    if (r.exited || !r.awaiting_leave.has_value()) continue;
    FailureRecord cause = *r.awaiting_leave;
    if (RestartAlone(s, i, cause)) continue;
    r.awaiting_leave.reset();
    r.exited = true;
    ++s.exited;
    Record(s, cause);
  }
  if (s.stopping || !ReadNewGenerations(s) || !s.newest.has_value()) return;
  StopRemovedTasks(s);
  if (plan_.elastic.enforce_minimum) CheckMinimum(s, now, s.newest->members);
}

bool AttemptSupervisor::ReadNewGenerations(State& s) {
  // Bounded per look: a store that holds many generations is caught up
  // with over several looks, never in one long stall of this thread.
  constexpr int kMaxReadsPerLook = 64;
  for (int k = 0; k < kMaxReadsPerLook; ++k) {
    absl::StatusOr<coord::Membership> g = plan_.elastic.read(s.next_generation);
    if (absl::IsNotFound(g.status())) break;
    if (!g.ok()) {
      // Said once; the next look tries again (a launcher cut off from the
      // service reads again once it is back).
      if (!s.membership_unreadable) {
        Message(absl::StrCat("elastic: cannot read the membership: ",
                             g.status().message()));
      }
      s.membership_unreadable = true;
      return false;
    }
    for (int i = 0; i < static_cast<int>(s.running.size()); ++i) {
      State::Running& r = s.running[i];
      if (g->generation > r.started_after &&
          g->RankOf(plan_.tasks[i].options.spec.Name()) >= 0) {
        r.was_member = true;
      }
    }
    ++s.next_generation;
    s.newest = *std::move(g);
  }
  s.membership_unreadable = false;
  return true;
}

void AttemptSupervisor::StopRemovedTasks(State& s) {
  for (int i = 0; i < static_cast<int>(s.running.size()); ++i) {
    State::Running& r = s.running[i];
    // A replacement is not a member until it adds itself; one that was
    // and is no longer was removed by another launcher while it ran.
    if (r.exited || r.killed_for.has_value() || r.awaiting_leave.has_value() ||
        !r.was_member ||
        s.newest->RankOf(plan_.tasks[i].options.spec.Name()) >= 0) {
      continue;
    }
    FailureRecord cause =
        RecordFor(s, i,
                  "was removed from the elastic membership while running (the "
                  "coordination service failed it: silent or cut off)",
                  env_->Now(), 1);
    Message(absl::StrCat(cause.task, " (", cause.where, ") ", cause.reason,
                         "; killing it"));
    r.killed_for = cause;
    r.process->SignalGroup(SIGKILL);
  }
}

void AttemptSupervisor::CheckMinimum(State& s, absl::Time now,
                                     const std::vector<std::string>& members) {
  if (static_cast<int>(members.size()) >= plan_.elastic.min) {
    s.below_minimum_since = absl::InfiniteFuture();
    return;
  }
  if (s.below_minimum_since == absl::InfiniteFuture()) {
    s.below_minimum_since = now;
  }
  if (now - s.below_minimum_since < plan_.elastic.wait) return;
  // The job's tasks (every launcher's) that are not members.
  std::vector<std::string> missing;
  int first_missing = -1;
  for (int i = 0; i < static_cast<int>(plan_.elastic.tasks.size()); ++i) {
    const std::string& name = plan_.elastic.tasks[i];
    if (std::find(members.begin(), members.end(), name) != members.end()) {
      continue;
    }
    missing.push_back(name);
    if (first_missing < 0) first_missing = i;
  }
  if (first_missing < 0) return;
  const std::string reason = absl::StrCat(
      "is missing from the elastic job, which stayed below its minimum of ",
      plan_.elastic.min, " task(s) for ",
      absl::FormatDuration(plan_.elastic.wait), ": members ",
      members.empty() ? std::string("none") : absl::StrJoin(members, ", "),
      "; missing ", absl::StrJoin(missing, ", "),
      " (lost, and not back: see the lines above and their logs)");
  Message(absl::StrCat("elastic: ", missing.front(), " ", reason));
  // The record names the missing task, which may be another launcher's.
  FailureRecord r;
  r.task = missing.front();
  r.job_task = first_missing;
  r.reason = reason;
  r.when = now;
  r.where = plan_.host.empty() ? "on this machine" : "on " + plan_.host;
  for (int i = 0; i < static_cast<int>(plan_.tasks.size()); ++i) {
    if (plan_.tasks[i].options.spec.Name() == r.task) {
      r = RecordFor(s, i, reason, now, 1);
    }
  }
  Record(s, r);
}

bool AttemptSupervisor::RestartAlone(State& s, int task, FailureRecord& cause) {
  if (plan_.task_restarts < 0) return false;
  // Once the verdict is in (a success that this failure came too late
  // for), nothing is restarted.
  if (s.verdict.has_value() || ledger_->Verdict().has_value()) return false;
  State::Running& r = s.running[task];
  const bool elastic = plan_.elastic.min > 0;
  bool enough = false;
  int64_t left_generation = -1;
  if (elastic) {
    // A task still in the membership must not be started again: its
    // replacement would join a generation that is already formed.
    absl::StatusOr<coord::Membership> left = LeaveMembership(s, task, cause);
    const absl::Time now = env_->Now();
    if ((absl::IsUnavailable(left.status()) ||
         absl::IsDeadlineExceeded(left.status())) &&
        (!r.awaiting_leave.has_value() ||
         now - r.awaiting_since < plan_.elastic.wait)) {
      // The service is out of reach (a partition): not a reason to fail
      // the job, which goes on elsewhere; the restart waits for it.
      if (!r.awaiting_leave.has_value()) {
        Message(absl::StrCat(
            cause.task, " ", cause.reason, "; ", left.status().message(),
            "; it is restarted once it has left the membership (the "
            "coordination service answers again within ",
            absl::FormatDuration(plan_.elastic.wait), ")"));
        r.awaiting_since = now;
      }
      r.awaiting_leave = cause;
      return true;
    }
    r.awaiting_leave.reset();
    if (!left.ok()) {
      absl::StrAppend(&cause.reason, "; ", left.status().message(),
                      ", so it is not restarted");
      Message(absl::StrCat(cause.task, " ", cause.reason, "; the job fails"));
      return false;
    }
    enough = static_cast<int>(left->members.size()) >= plan_.elastic.min;
    left_generation = left->generation;
  }
  if (r.restart >= plan_.task_restarts) {
    if (enough) {
      // The others train on without it: it counts as finished for the
      // verdict, and the launcher names it at the end.
      Message(absl::StrCat(
          cause.task, " ", cause.reason, " with no restart left (", r.restart,
          " of ", plan_.task_restarts, " used): it leaves the elastic job"));
      r.exited = true;
      ++s.exited;
      s.dropped.push_back(cause);
      absl::Status recorded = ledger_->RecordDone(plan_.tasks[task].job_task);
      if (!recorded.ok()) Record(s, cause);
      return true;
    }
    Message(absl::StrCat(cause.task, " ", cause.reason,
                         " with no restart left (", r.restart, " of ",
                         plan_.task_restarts, " used): the job fails"));
    if (elastic) {
      absl::StrAppend(&cause.reason,
                      "; the elastic job is below its minimum of ",
                      plan_.elastic.min, " task(s)");
    }
    return false;
  }
  const int restart = r.restart + 1;
  absl::StatusOr<std::unique_ptr<TaskProcess>> process = Spawn(task, restart);
  if (!process.ok()) {
    absl::StrAppend(&cause.reason,
                    "; starting it again failed: ", process.status().message());
    Message(absl::StrCat(cause.task, " could not be restarted: ",
                         process.status().message(), "; the job fails"));
    return false;
  }
  TaskRestart restarted{cause.task, restart, cause, (*process)->log_path()};
  Message(DescribeRestart(restarted, plan_.task_restarts));
  s.restarts.push_back(std::move(restarted));
  r.process = *std::move(process);
  r.restart = restart;
  r.killed_for.reset();
  r.started_after = left_generation;
  r.was_member = false;
  return true;
}

void AttemptSupervisor::BeginStop(State& s) {
  if (s.stopping) return;
  s.stopping = true;
  std::optional<int> root;
  if (s.verdict.has_value() && !s.verdict->succeeded) {
    root = s.verdict->failure.job_task;
  }
  for (int i = 0; i < static_cast<int>(s.running.size()); ++i) {
    if (s.running[i].exited) continue;
    if (s.running[i].awaiting_leave.has_value()) {
      // Its process is gone already: nothing to stop.
      s.running[i].awaiting_leave.reset();
      s.running[i].exited = true;
      ++s.exited;
      continue;
    }
    ++s.stopped_running;
    if (root != plan_.tasks[i].job_task) ++s.stopped_others;
    s.running[i].process->SignalGroup(SIGTERM);
  }
  s.kill_at = env_->Now() + plan_.stop_grace;
}

void AttemptSupervisor::Tick(State& s, absl::Time now) {
  CheckMembership(s, now);
  for (auto it = s.orphans.begin(); it != s.orphans.end();) {
    if (s.stopping || now - it->second.since < plan_.replacement_wait) {
      ++it;
      continue;
    }
    FailureRecord r = it->second.record;
    absl::StrAppend(&r.reason, "; no launcher rejoined the job for it within ",
                    absl::FormatDuration(plan_.replacement_wait));
    it = s.orphans.erase(it);
    Message(
        absl::StrCat(r.task, " (", r.where, ") ", r.reason, "; the job fails"));
    Record(s, r);
  }
  if (s.stopping && !s.killed && now >= s.kill_at) {
    for (State::Running& r : s.running) {
      if (!r.exited) r.process->SignalGroup(SIGKILL);
    }
    s.killed = true;
    s.kill_at = absl::InfiniteFuture();
  }
  if (plan_.progress_interval == absl::InfiniteDuration() ||
      now < s.next_progress) {
    return;
  }
  s.next_progress = now + plan_.progress_interval;
  const int up = static_cast<int>(s.running.size()) - s.exited;
  const std::string line = absl::StrCat(
      "attempt ", plan_.attempt, ": ", up, "/", plan_.job_size, " task(s) up, ",
      plan_.waiting_at_barrier ? plan_.waiting_at_barrier() : 0,
      " waiting at a barrier, ", s.done, " done");
  if (line != s.last_progress && up > 0) {
    Message(line);
    s.last_progress = line;
  }
}

AttemptEnd AttemptSupervisor::Decide(State& s) {
  const absl::Time drain_until = env_->Now() + kDrain;
  for (State::Running& r : s.running) r.process->Finish(drain_until);
  AttemptEnd end;
  end.spawn_error = s.spawn_error;
  end.stopped_running = s.stopped_running;
  end.stopped_others = s.stopped_others;
  end.restarts = s.restarts;
  end.dropped = s.dropped;
  if (s.lost) {
    end.outcome = AttemptEnd::Outcome::kLost;
    end.lost = s.lost_error;
    return end;
  }
  if (s.verdict->succeeded) {
    end.outcome = AttemptEnd::Outcome::kSucceeded;
    return end;
  }
  end.failure = s.verdict->failure;
  // An interrupted launcher ends the job, whichever failure came first.
  end.outcome = s.interrupted_here || end.failure.interrupted
                    ? AttemptEnd::Outcome::kStopped
                    : AttemptEnd::Outcome::kFailed;
  return end;
}

// --- GangRestartPolicy -----------------------------------------------------

RestartPolicy::Decision GangRestartPolicy::Decide(const AttemptEnd& end) {
  if (end.outcome != AttemptEnd::Outcome::kFailed) return Decision::kFinish;
  if (restarts_ >= max_restarts_) return Decision::kGiveUp;
  ++restarts_;
  return Decision::kRestart;
}

std::string GangRestartPolicy::RestartMessage(int next_attempt) const {
  return absl::StrCat("restarting the whole gang as attempt ", next_attempt,
                      " (", restarts_left(), " restart(s) left after this)");
}

std::string GangRestartPolicy::GiveUpMessage(int attempts) const {
  return absl::StrCat("giving up after ", attempts,
                      " attempt(s) (--max-restarts ", max_restarts_, ")");
}

// --- TaskRestartPolicy -----------------------------------------------------

RestartPolicy::Decision TaskRestartPolicy::Decide(const AttemptEnd& end) {
  return end.outcome == AttemptEnd::Outcome::kFailed ? Decision::kGiveUp
                                                     : Decision::kFinish;
}

std::string TaskRestartPolicy::GiveUpMessage(int attempts) const {
  return absl::StrCat(
      "giving up: a task failed and was not restarted (--restart task "
      "--max-restarts ",
      max_restarts_, "; the lines above say why)");
}

absl::StatusOr<RestartMode> ParseRestartMode(absl::string_view text) {
  if (text == "gang") return RestartMode::kGang;
  if (text == "task") return RestartMode::kTask;
  return absl::InvalidArgumentError(absl::StrCat(
      "--restart must be gang (a failure restarts every task) or task (the "
      "failed task is restarted alone), got \"",
      text, "\""));
}

std::unique_ptr<RestartPolicy> MakeRestartPolicy(RestartMode mode,
                                                 int max_restarts) {
  if (mode == RestartMode::kTask) {
    return std::make_unique<TaskRestartPolicy>(max_restarts);
  }
  return std::make_unique<GangRestartPolicy>(max_restarts);
}

}  // namespace cohort::launch
