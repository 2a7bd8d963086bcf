// The attempt supervisor both launchers run: `cohort launch -n N` (one
// launcher, every task of the job) and `cohort launch --engine ...` (one
// launcher per task). One attempt goes through four steps on one state:
//
//   start   spawn this launcher's tasks (a task that cannot start fails the
//           attempt, naming it);
//   watch   wait for what changes the attempt: a task's exit, a failure the
//           coordination service saw, the verdict in the ledger, a stop
//           request, the loss of the control plane; record what this
//           launcher's tasks did in the ledger (attempt_ledger.h);
//   stop    once the verdict is in (or the launcher is stopped or lost),
//           SIGTERM every task still running, SIGKILL after the grace;
//   decide  how the attempt ended (AttemptEnd), and, across attempts, the
//           restart policy says whether another one starts.
//
// Task restarts (`cohort launch --restart task`, AttemptPlan::task_restarts):
// a task of this launcher that fails is started again alone, on the same
// address with the same environment, while every other task keeps running;
// only a task that fails with no restart left fails the attempt.
//
//   AttemptEvents events(env);                  // for the whole run
//   LocalAttemptLedger ledger(must_finish, [&] { events.Changed(); });
//   AttemptPlan plan = ...;                     // tasks, grace, sinks
//   AttemptEnd end = AttemptSupervisor(env, &events, &ledger, plan).Run();
//
// Thread safety: AttemptEvents is thread-safe (tasks' threads, the
// coordination service's callbacks, signal threads and ledgers feed it);
// an AttemptSupervisor runs on one thread.
#ifndef COHORT_LAUNCH_ATTEMPT_SUPERVISOR_H_
#define COHORT_LAUNCH_ATTEMPT_SUPERVISOR_H_

#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "cohort/base/env.h"
#include "cohort/coord/elastic_membership.h"
#include "cohort/launch/attempt_ledger.h"
#include "cohort/launch/job_board.h"
#include "cohort/launch/job_plan.h"
#include "cohort/launch/process.h"
#include "cohort/launch/task_process.h"

namespace cohort::launch {

// What wakes an attempt's watch step. One per launcher, for its whole run:
// a stop request made between attempts is seen by the next one.
class AttemptEvents {
 public:
  explicit AttemptEvents(Env* env) : env_(env) {}

  // Task `task` (index in the attempt's plan) of `attempt` exited; `restart`
  // counts the times it was started again before (0: its first process).
  void TaskExited(int attempt, int task, int restart, ExitInfo exit,
                  absl::Time when);
  // Something outside the task's process failed it (the coordination
  // service after lost heartbeats or a reported error).
  void TaskFailed(int attempt, FailureRecord record);
  // Another launcher's task failed with its launcher (lost: in an etcd
  // control plane its lease expired), so no launcher is left to stop or
  // restart it. In an elastic job it leaves the membership and, while at
  // least the minimum remain, counts as finished for the verdict; under task
  // restarts it waits for a launcher
  // to replace the lost one (AttemptPlan::replacement_wait); otherwise it
  // fails the attempt.
  void TaskOrphaned(int attempt, FailureRecord record);
  // A launcher replaced the lost one of job task `job_task`: its orphaned
  // task is that launcher's again.
  void TaskAdopted(int attempt, int job_task);
  // The ledger's verdict may have changed.
  void Changed();
  // The launcher lost its control plane: `error` says how.
  void ControlPlaneLost(const absl::Status& error);
  // SIGINT/SIGTERM: stop every task, no restart. Never blocks.
  void Stop();
  bool stop_requested();
  // A stop was requested that no attempt has acted on yet (AwaitStopOr's
  // condition, without waiting).
  bool stop_pending();
  // Blocks until `done` is true (its writer then calls Changed()) or a stop
  // was requested that no attempt has acted on yet; returns whether such a
  // stop is pending. For the waits between attempts (the launchers'
  // start and end barriers).
  bool AwaitStopOr(const std::atomic<bool>& done);

 private:
  friend class AttemptSupervisor;
  struct Event {
    enum Kind { kExit, kTaskFailed, kAdopted, kChanged, kLost, kStop } kind;
    int attempt = 0;
    int task = 0;
    int restart = 0;
    ExitInfo exit;
    absl::Time when;
    FailureRecord record;
    bool orphaned = false;  // kTaskFailed: its launcher is gone too
    absl::Status error;
  };
  void Push(Event e);
  // The events since the last call, once there is one or at `deadline`.
  std::deque<Event> Wait(absl::Time deadline);

  Env* const env_;
  absl::Mutex mu_;
  std::deque<Event> events_ ABSL_GUARDED_BY(mu_);
  bool stop_requested_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_taken_ ABSL_GUARDED_BY(mu_) = false;
};

struct AttemptPlan {
  int attempt = 0;
  struct Task {
    int job_task = 0;  // index among the job's tasks (FailureRecord)
    // on_exit is the supervisor's; the rest is the launcher's.
    TaskProcess::Options options;
    // The restart number of its first process here (COHORT_TASK_RESTART):
    // 1 for a launcher that replaces a lost one, so its program recovers
    // as a restarted one, and one restart fewer is left.
    int first_restart = 0;
  };
  std::vector<Task> tasks;
  int job_size = 0;  // tasks of the whole job, for the progress line
  std::string host;  // where the tasks run, named in records; empty: here
  std::string log_dir;
  // Say which tasks started (pids, log directory).
  bool announce = true;
  absl::Duration stop_grace = absl::Seconds(5);
  // A "k/N task(s) up, W waiting at a barrier, D done" line at most this
  // often, when it changed; InfiniteDuration: none.
  absl::Duration progress_interval = absl::InfiniteDuration();
  std::function<int()> waiting_at_barrier;  // for the progress line
  // Where each task's process starts and how it exits are recorded, for
  // the job's page (may be null). Tasks run on `host`, or, when that is
  // empty, on `local_host` (the address `-n N` tasks listen on).
  JobBoard* board = nullptr;
  std::string local_host;
  std::function<void(const std::string&)> messages;
  // -1: a failed task fails the attempt (the gang rule). N >= 0: a task of
  // this launcher that fails (exits non-zero or by a signal; or, running,
  // is failed by the coordination service) is started again alone, up to N
  // times; the next failure fails the attempt.
  int task_restarts = -1;
  // The silence after which the coordination service fails a task. A
  // failure it reports for a restarted task sooner than this after the new
  // process started is the old process's (its heartbeats stopped before
  // the restart) and is dropped.
  absl::Duration service_silence = absl::ZeroDuration();
  // With task_restarts, outside elastic jobs: how long another launcher's
  // task orphaned by its launcher's loss waits for a launcher to replace
  // the lost one (AttemptEvents::TaskAdopted) before it fails the attempt,
  // naming it; the other tasks run on meanwhile. Zero: it fails at once.
  absl::Duration replacement_wait = absl::ZeroDuration();
  // Elastic jobs (`cohort launch --elastic MIN:MAX`, with task_restarts):
  // a task that fails leaves the membership (lose(task) writes the
  // generation without it and returns the newest generation) before it is
  // restarted; one that fails with no restart left is dropped, and the
  // others train on, while at least `min` members remain. Every 250 ms the
  // supervisor reads the generations written since it last looked
  // (read(G): NotFound while G is not written): a task of this launcher
  // that a generation after its process started listed, and the newest no
  // longer lists (another launcher removed it: the coordination service
  // failed it, silent or cut off), is killed and restarted as any failed
  // task. With `enforce_minimum` (one launcher of the job), the attempt
  // fails when fewer than `min` stay members for `wait`, naming the missing
  // tasks. A task of another launcher that the coordination service fails
  // leaves the membership (its launcher stops it) instead of failing the
  // attempt. A failed task whose launcher cannot reach the service (a
  // partition) waits up to `wait` to leave the membership before it is
  // restarted; after that it fails the attempt.
  struct Elastic {
    int min = 0;  // 0: not an elastic job
    absl::Duration wait = absl::Seconds(60);
    std::function<absl::StatusOr<coord::Membership>(const std::string& task)>
        lose;
    std::function<absl::StatusOr<coord::Membership>(int64_t generation)> read;
    bool enforce_minimum = false;
    // Every task of the job by its index among the job's tasks (with
    // enforce_minimum, to name the missing ones).
    std::vector<std::string> tasks;
  };
  Elastic elastic;
  // Runs once, on the supervisor's thread, when the attempt's failure is
  // first known, before any task is stopped (the launcher clears the
  // attempt's barriers so tasks waiting there learn why).
  std::function<void(const FailureRecord&)> on_failure;
};

// The plan entry both launchers make for job task `inputs.task`: its
// environment (TaskEnvironment), its log <log_dir>/<job>-<index>.attempt-<A>
// .log (a restarted task's: ...attempt-<A>.restart-<R>.log), and a fresh
// epoch file beside it (a reused --log-dir starts at epoch 0; a restarted
// task keeps its epoch).
AttemptPlan::Task PlanTask(TaskEnvironmentInputs inputs,
                           const std::vector<std::string>& command,
                           const std::string& log_dir, int tail_lines,
                           std::function<void(const std::string&)> output,
                           std::function<void(const std::string&)> messages);

// One restart of a task alone (AttemptPlan::task_restarts).
struct TaskRestart {
  std::string task;          // "worker:1"
  int restart = 0;           // 1 for its first restart
  FailureRecord cause;       // the failure that the restart answered
  std::string new_log_path;  // the restarted process's log
};

// "worker:1 (pid 42) killed by signal 9 (SIGKILL) at TIME, 12.3s after it
// started; restarted alone (restart 1 of 2), the other tasks kept running;
// its log: LOG".
std::string DescribeRestart(const TaskRestart& r, int task_restarts);

// What a launcher prints once an attempt in which tasks were restarted
// alone has ended: "N task restart(s) in attempt A:", then each restart
// (DescribeRestart), indented; nothing when there were none.
std::vector<std::string> RestartSummaryLines(
    int attempt, const std::vector<TaskRestart>& restarts, int task_restarts);

struct AttemptEnd;

// What a launcher prints when attempt `attempt` of a job of `tasks` tasks
// succeeded: "job succeeded: all 4 task(s) of attempt 0 finished", or, when
// an elastic job dropped tasks of this launcher, "job succeeded: 3 of 4
// task(s) ... finished; worker:3 (killed by signal 9 ...) left the elastic
// job with no restart left".
std::string SuccessLine(size_t tasks, int attempt, const AttemptEnd& end);

struct AttemptEnd {
  enum class Outcome { kSucceeded, kFailed, kStopped, kLost };
  Outcome outcome = Outcome::kFailed;
  // kFailed, kStopped: the attempt's first failure, possibly of another
  // launcher's task.
  FailureRecord failure;
  // A task of this launcher could not be started (it is also the failure).
  absl::Status spawn_error;
  absl::Status lost;  // kLost: how the control plane was lost
  // This launcher's tasks that were still running when it stopped them;
  // `stopped_others` leaves out the failed task itself (a task the
  // coordination service failed can still be running).
  int stopped_running = 0;
  int stopped_others = 0;
  // Each restart of a task of this launcher, in order.
  std::vector<TaskRestart> restarts;
  // Elastic jobs: the tasks that failed with no restart left and were
  // dropped while the others trained on.
  std::vector<FailureRecord> dropped;
};

// "succeeded", "failed", "stopped", "lost" (the job page's names).
const char* OutcomeName(AttemptEnd::Outcome outcome);
// One line naming the attempt's root cause: "worker:1 (pid 42) exited with
// code 3"; how the control plane was lost; empty on success.
std::string CauseLine(const AttemptEnd& end);

class AttemptSupervisor {
 public:
  // `events` and `ledger` must outlive Run().
  AttemptSupervisor(Env* env, AttemptEvents* events, AttemptLedger* ledger,
                    AttemptPlan plan);
  ~AttemptSupervisor();
  AttemptSupervisor(const AttemptSupervisor&) = delete;
  AttemptSupervisor& operator=(const AttemptSupervisor&) = delete;

  // Runs the attempt to its end: every task of this launcher has exited and
  // the verdict is known (or the control plane was lost). Blocks.
  AttemptEnd Run();

 private:
  struct State;
  void Start(State& s);
  void Watch(State& s);
  void Handle(State& s, AttemptEvents::Event& e);
  void OnExit(State& s, int task, int restart, const ExitInfo& exit,
              absl::Time when);
  // Whether plan task `task`, which failed as `cause`, is started again
  // alone; when it is, its process is replaced. A restart that cannot
  // start the program adds why to `cause`.
  bool RestartAlone(State& s, int task, FailureRecord& cause);
  // Elastic jobs: `task` leaves the membership; the newest generation.
  absl::StatusOr<coord::Membership> LeaveMembership(State& s, int task,
                                                    const FailureRecord& cause);
  // Elastic jobs, every 250 ms: kills this launcher's tasks removed from
  // the membership while running, and fails the attempt once the members
  // stayed below the minimum for the plan's wait (enforce_minimum).
  void CheckMembership(State& s, absl::Time now);
  // Reads the generations written since the last look (at most a bounded
  // number per call); false when the store could not be read.
  bool ReadNewGenerations(State& s);
  void StopRemovedTasks(State& s);
  void CheckMinimum(State& s, absl::Time now,
                    const std::vector<std::string>& members);
  absl::StatusOr<std::unique_ptr<TaskProcess>> Spawn(int task, int restart);
  void BeginStop(State& s);
  void Tick(State& s, absl::Time now);
  AttemptEnd Decide(State& s);
  // Writes `record` to the ledger; one that cannot be written ends the
  // attempt as lost (no verdict might ever come).
  void Record(State& s, const FailureRecord& record);
  // A record naming plan task `task` of this launcher.
  FailureRecord RecordFor(State& s, int task, const std::string& reason,
                          absl::Time when, int code);
  void Message(const std::string& line);

  Env* const env_;
  AttemptEvents* const events_;
  AttemptLedger* const ledger_;
  const AttemptPlan plan_;
};

// What a task's failure restarts (`cohort launch --restart`): every task of
// the job (kGang, a new attempt) or the failed task alone (kTask,
// AttemptPlan::task_restarts).
enum class RestartMode { kGang, kTask };

// "gang" or "task"; anything else is InvalidArgument naming --restart.
absl::StatusOr<RestartMode> ParseRestartMode(absl::string_view text);

// Across attempts: whether a finished attempt is followed by another.
class RestartPolicy {
 public:
  enum class Decision { kFinish, kRestart, kGiveUp };
  virtual ~RestartPolicy() = default;
  virtual Decision Decide(const AttemptEnd& end) = 0;
  // What the launcher says when it restarts ("restarting the whole gang as
  // attempt 2 (1 restart(s) left after this)").
  virtual std::string RestartMessage(int next_attempt) const = 0;
  // What it says when it gives up after `attempts` attempts.
  virtual std::string GiveUpMessage(int attempts) const = 0;
  virtual int restarts_left() const = 0;
};

// The policy for `mode`: GangRestartPolicy, or TaskRestartPolicy (whose
// restarts the attempt's supervisor makes).
std::unique_ptr<RestartPolicy> MakeRestartPolicy(RestartMode mode,
                                                 int max_restarts);

// Spark's barrier-stage rule: any failure restarts every task of the job,
// up to `max_restarts` times; a stop or a lost control plane never does.
class GangRestartPolicy : public RestartPolicy {
 public:
  explicit GangRestartPolicy(int max_restarts) : max_restarts_(max_restarts) {}
  Decision Decide(const AttemptEnd& end) override;
  std::string RestartMessage(int next_attempt) const override;
  std::string GiveUpMessage(int attempts) const override;
  int restarts_left() const override { return max_restarts_ - restarts_; }

 private:
  const int max_restarts_;
  int restarts_ = 0;
};

// Task restarts: each task may be restarted alone `max_restarts` times
// within the one attempt (the supervisor does it); an attempt that still
// fails is never followed by another.
class TaskRestartPolicy : public RestartPolicy {
 public:
  explicit TaskRestartPolicy(int max_restarts) : max_restarts_(max_restarts) {}
  Decision Decide(const AttemptEnd& end) override;
  std::string RestartMessage(int next_attempt) const override { return ""; }
  std::string GiveUpMessage(int attempts) const override;
  int restarts_left() const override { return 0; }

 private:
  const int max_restarts_;
};

}  // namespace cohort::launch

#endif  // COHORT_LAUNCH_ATTEMPT_SUPERVISOR_H_
