#include "cohort/launch/launcher.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <deque>
#include <thread>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "cohort/barrier/barrier_coordinator.h"
#include "cohort/barrier/barrier_grpc_service.h"
#include "cohort/barrier/barrier_tcp_server.h"
#include "cohort/base/status.h"
#include "cohort/coord/coordination_server.h"
#include "cohort/launch/launch_support.h"
#include "cohort/launch/process.h"
#include "cohort/launch/task_process.h"
#include "cohort/rpc/socket.h"
#include "cohort/rpc/transport.h"

namespace cohort::launch {
namespace {

using barrier::BarrierCoordinator;
using barrier::BarrierServer;
using barrier::BarrierTcpServer;
using barrier::GangSnapshot;

// How often the progress line may change.
constexpr absl::Duration kProgressInterval = absl::Seconds(1);
// How often the coordination service's view of the tasks is checked.
constexpr absl::Duration kHealthInterval = absl::Milliseconds(250);

}  // namespace

// --- Launcher -------------------------------------------------------------

struct Launcher::Impl {
  struct Event {
    enum Kind { kExit, kStop } kind;
    int attempt = 0;
    int task = 0;
    ExitInfo exit;
    absl::Time when;
  };

  // One task of the running attempt.
  struct Running {
    std::unique_ptr<TaskProcess> process;
    bool exited = false;
  };

  enum class Outcome { kSucceeded, kFailed, kStopped };

  Impl(Env* e, LaunchOptions o) : env(e), options(std::move(o)) {
    if (!options.output) options.output = LineWriter(stdout);
    if (!options.messages) options.messages = LineWriter(stderr);
  }

  void Message(const std::string& line) {
    absl::MutexLock lock(&out_mu);
    options.messages("[cohort] " + line);
  }

  void PushEvent(Event e) {
    absl::MutexLock lock(&mu);
    events.push_back(std::move(e));
  }

  absl::StatusOr<LaunchResult> Run();
  absl::StatusOr<Outcome> RunAttempt(int attempt, AttemptTracker& tracker,
                                     LaunchResult& result);
  // Serialised sinks, as the tasks' threads call them.
  void Output(const std::string& line) {
    absl::MutexLock lock(&out_mu);
    options.output(line);
  }

  Env* const env;
  LaunchOptions options;
  std::vector<TaskSpec> tasks;
  int gang_size = 0;

  absl::Mutex mu;
  std::deque<Event> events ABSL_GUARDED_BY(mu);
  bool stop_requested ABSL_GUARDED_BY(mu) = false;
  std::string barrier_address ABSL_GUARDED_BY(mu);

  // Serialises the output and message sinks.
  absl::Mutex out_mu;

  rpc::TransportSecurity security;
  std::unique_ptr<BarrierCoordinator> coordinator;
  std::unique_ptr<BarrierServer> server;
  std::unique_ptr<BarrierTcpServer> tcp_server;
};

Launcher::Launcher(Env* env, LaunchOptions options)
    : impl_(std::make_unique<Impl>(env, std::move(options))) {}

Launcher::~Launcher() = default;

absl::StatusOr<LaunchResult> Launcher::Run() { return impl_->Run(); }

void Launcher::Stop() {
  absl::MutexLock lock(&impl_->mu);
  impl_->stop_requested = true;
  impl_->events.push_back(Impl::Event{Impl::Event::kStop});
}

std::string Launcher::barrier_address() const {
  absl::MutexLock lock(&impl_->mu);
  return impl_->barrier_address;
}

absl::StatusOr<Launcher::Impl::Outcome> Launcher::Impl::RunAttempt(
    int attempt, AttemptTracker& tracker, LaunchResult& result) {
  const int n = static_cast<int>(tasks.size());
  // The coordinator serves only the gang this attempt starts, with the size
  // the launcher chose; the gang's state is freed when the attempt ends,
  // whichever way it ends.
  COHORT_RETURN_IF_ERROR(coordinator->OpenGang(kStageId, attempt, gang_size));
  struct CloseGangOnExit {
    BarrierCoordinator* coordinator;
    int attempt;
    ~CloseGangOnExit() {
      coordinator->CloseGang(kStageId, attempt,
                             absl::StrCat("attempt ", attempt, " ended"));
    }
  } close_gang{coordinator.get(), attempt};
  std::vector<std::string> addresses;
  for (int i = 0; i < n; ++i) {
    COHORT_ASSIGN_OR_RETURN(int port, rpc::PickFreePort(options.host));
    addresses.push_back(absl::StrCat(options.host, ":", port));
  }
  std::string coordinator_address;
  {
    absl::MutexLock lock(&mu);
    coordinator_address = barrier_address;
  }

  std::unique_ptr<coord::CoordinationServer> coordination;
  if (options.coordination_service) {
    coord::CoordinationServerOptions co;
    co.address = absl::StrCat(options.host, ":0");
    co.service.env = env;
    co.service.heartbeat_timeout = options.heartbeat_timeout;
    co.security = security;
    for (const TaskSpec& t : tasks) ++co.service.jobs[t.job];
    COHORT_ASSIGN_OR_RETURN(coordination,
                            coord::CoordinationServer::Start(std::move(co)));
  }

  std::vector<std::unique_ptr<Running>> running;
  absl::Status spawn_error;
  TaskEnvironmentInputs inputs;
  inputs.tasks = tasks;
  inputs.addresses = addresses;
  inputs.attempt = attempt;
  inputs.job_token = security.job_token;
  if (coordination != nullptr) {
    inputs.coordination_address = coordination->target();
  }
  inputs.barrier_address = coordinator_address;
  inputs.barrier_tcp_address = tcp_server->address();
  inputs.barrier_timeout = options.barrier_timeout;
  inputs.extra_env = options.extra_env;
  for (int i = 0; i < n; ++i) {
    const TaskSpec& spec = tasks[i];
    const std::string stem = absl::StrCat(result.log_dir, "/", spec.job, "-",
                                          spec.index, ".attempt-", attempt);
    inputs.task = i;
    inputs.epoch_file = stem + ".epoch";
    unlink(inputs.epoch_file.c_str());  // a reused --log-dir starts at epoch 0
    TaskProcess::Options to;
    to.spec = spec;
    to.command = options.command;
    to.env = EnvironmentWith(TaskEnvironment(inputs));
    to.log_path = stem + ".log";
    to.tail_lines = options.summary_lines;
    to.output = [this](const std::string& line) { Output(line); };
    to.messages = [this](const std::string& line) { Message(line); };
    to.on_exit = [this, attempt, i](ExitInfo exit, absl::Time when) {
      PushEvent(Event{Event::kExit, attempt, i, exit, when});
    };
    absl::StatusOr<std::unique_ptr<TaskProcess>> process =
        TaskProcess::Start(env, std::move(to));
    if (!process.ok()) {
      spawn_error =
          Annotate(process.status(), absl::StrCat("of attempt ", attempt));
      break;
    }
    running.push_back(std::make_unique<Running>());
    running.back()->process = std::move(process).value();
  }

  const int started = static_cast<int>(running.size());
  Outcome outcome = Outcome::kSucceeded;
  bool stopping = false;
  bool killed = false;
  bool succeeded = false;
  int exited = 0;
  int gang_done = 0;  // chief/worker/evaluator tasks that exited 0
  const int must_finish = static_cast<int>(
      std::count_if(tasks.begin(), tasks.end(),
                    [](const TaskSpec& t) { return t.job != "ps"; }));
  int root_cause = -1;
  std::string root_reason;  // "exited with code 3", "lost heartbeat: ..."
  absl::Time root_when;
  int root_code = 1;
  int stopped_others = 0;  // tasks still running when the attempt failed
  absl::Time kill_at = absl::InfiniteFuture();
  absl::Time next_health_check = env->Now() + kHealthInterval;
  absl::Time next_progress = env->Now();
  std::string last_progress;

  auto stop_all = [&](int sig) {
    for (auto& t : running) {
      if (!t->exited) t->process->SignalGroup(sig);
    }
  };
  auto begin_stop = [&]() {
    if (stopping) return;
    stopping = true;
    stop_all(SIGTERM);
    kill_at = env->Now() + options.stop_grace;
  };

  // The first failure of this attempt stops it; later ones change nothing
  // (AttemptTracker::kAlreadyFailing, often the tasks our SIGTERM ended).
  auto fail = [&](int task, const std::string& reason, absl::Time when,
                  int code) {
    const AttemptTracker::Decision decision = tracker.ReportFailure(attempt);
    if (decision != AttemptTracker::Decision::kRetry &&
        decision != AttemptTracker::Decision::kGiveUp) {
      return;
    }
    root_cause = task;
    root_reason = reason;
    root_when = when;
    root_code = code != 0 ? code : 1;
    outcome = Outcome::kFailed;
    for (int i = 0; i < static_cast<int>(running.size()); ++i) {
      if (i != task && !running[i]->exited) ++stopped_others;
    }
    std::optional<GangSnapshot> gang = coordinator->Snapshot(kStageId, attempt);
    if (gang.has_value() && !gang->failure.ok()) {
      result.failure_summary =
          absl::StrCat("barrier: ", gang->failure.message());
    }
    coordinator->ClearStage(
        kStageId, attempt,
        absl::StrCat("task ", running[task]->process->spec().Name(), " ",
                     reason));
    begin_stop();
  };

  if (!spawn_error.ok()) {
    outcome = Outcome::kFailed;
    coordinator->ClearStage(kStageId, attempt, spawn_error.ToString());
    begin_stop();
  } else if (options.progress) {
    Message(absl::StrCat("attempt ", attempt, ": started ", n, " task(s): ",
                         absl::StrJoin(running, ", ",
                                       [](std::string* out, const auto& t) {
                                         absl::StrAppend(
                                             out, t->process->spec().Name(),
                                             " (pid ", t->process->pid(), ")");
                                       }),
                         "; logs in ", result.log_dir));
  }

  while (exited < started) {
    std::deque<Event> batch;
    {
      absl::MutexLock lock(&mu);
      auto has_events = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
        return !events.empty();
      };
      absl::Time deadline = kill_at;
      if (options.progress) deadline = std::min(deadline, next_progress);
      if (coordination != nullptr) {
        deadline = std::min(deadline, next_health_check);
      }
      env->AwaitWithDeadline(&mu, absl::Condition(&has_events), deadline);
      batch.swap(events);
    }
    for (Event& e : batch) {
      if (e.kind == Event::kStop) {
        if (outcome != Outcome::kStopped && !succeeded) {
          Message(absl::StrCat("interrupted: stopping every task of attempt ",
                               attempt));
          outcome = Outcome::kStopped;
          coordinator->ClearStage(kStageId, attempt,
                                  "the launcher was interrupted");
        }
        begin_stop();
        continue;
      }
      if (e.attempt != attempt) {
        // Cannot happen while attempts are joined before the next starts,
        // but the rule stands: an older attempt never triggers a retry.
        tracker.ReportFailure(e.attempt);
        continue;
      }
      Running& t = *running[e.task];
      t.exited = true;
      ++exited;
      if (e.exit.ok()) {
        if (t.process->spec().job != "ps") ++gang_done;
        if (gang_done == must_finish && !stopping) {
          succeeded = true;
          begin_stop();  // only ps tasks can be left
        }
        continue;
      }
      if (succeeded || outcome == Outcome::kStopped) continue;
      fail(e.task, e.exit.Describe(), e.when, e.exit.ShellCode());
      // kAlreadyFailing: a second failure of a failing attempt (often our own
      // SIGTERM): it changes nothing.
    }
    const absl::Time now = env->Now();
    if (coordination != nullptr && now >= next_health_check) {
      next_health_check = now + kHealthInterval;
      if (!stopping) {
        absl::StatusOr<std::vector<coord::TaskStateSnapshot>> states =
            coordination->service()->GetTaskState({});
        if (states.ok()) {
          for (const coord::TaskStateSnapshot& st : *states) {
            if (st.state != coord::TaskState::kError) continue;
            for (int i = 0; i < started; ++i) {
              const TaskSpec& spec = running[i]->process->spec();
              if (running[i]->exited || spec.job != st.task.job ||
                  spec.index != st.task.index) {
                continue;
              }
              fail(i,
                   absl::StrCat("was failed by the coordination service: ",
                                st.error.message()),
                   st.error_time, 1);
            }
            if (stopping) break;
          }
        }
      }
    }
    if (stopping && !killed && now >= kill_at) {
      stop_all(SIGKILL);
      killed = true;
      kill_at = absl::InfiniteFuture();
    }
    if (options.progress && now >= next_progress) {
      int waiting = 0;
      if (std::optional<GangSnapshot> gang =
              coordinator->Snapshot(kStageId, attempt)) {
        waiting = static_cast<int>(gang->waiting.size());
      }
      const std::string line = absl::StrCat(
          "attempt ", attempt, ": ", started - exited, "/", n, " task(s) up, ",
          waiting, " waiting at a barrier, ", gang_done, " done");
      if (line != last_progress && exited < started) {
        Message(line);
        last_progress = line;
      }
      next_progress = now + kProgressInterval;
    }
  }

  // Every leader has exited; clean up descendants left in the groups, then
  // let the readers drain what is left in the pipes.
  // Readers stop at EOF; a pipe held open by a descendant that escaped the
  // process group is abandoned after a short drain.
  const absl::Time drain_until = env->Now() + absl::Seconds(2);
  for (auto& t : running) t->process->Finish(drain_until);

  if (!spawn_error.ok()) {
    if (attempt == 0) return spawn_error;
    result.failure_summary = spawn_error.ToString();
    result.exit_code = 1;
    Message(
        absl::StrCat("attempt ", attempt, " failed: ", spawn_error.ToString()));
    return Outcome::kFailed;
  }
  if (outcome == Outcome::kFailed && root_cause >= 0) {
    TaskProcess& t = *running[root_cause]->process;
    FailureReport report;
    report.attempt = attempt;
    report.task = t.spec().Name();
    report.where = absl::StrCat("pid ", t.pid());
    report.reason = root_reason;
    report.when = root_when;
    report.after_start = root_when - t.started();
    report.barrier = result.failure_summary;
    report.log_path = t.log_path();
    report.tail = t.Tail();
    report.stopped_others = stopped_others;
    const std::vector<std::string> lines = FailureSummaryLines(report);
    result.failure_summary = absl::StrJoin(lines, "\n");
    result.exit_code = root_code;
    for (const std::string& l : lines) Message(l);
  }
  if (outcome == Outcome::kStopped) result.exit_code = 130;
  if (coordination != nullptr) coordination->Stop();
  return outcome;
}

absl::StatusOr<LaunchResult> Launcher::Impl::Run() {
  if (options.command.empty()) {
    return absl::InvalidArgumentError(
        "no program to launch; put it after `--`, e.g. `cohort launch -n 2 -- "
        "./my_task`");
  }
  if (options.max_restarts < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--max-restarts must not be negative, got ", options.max_restarts));
  }
  if (options.barrier_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--barrier-timeout must be positive, got ",
                     absl::FormatDuration(options.barrier_timeout)));
  }
  COHORT_ASSIGN_OR_RETURN(tasks, PlanTasks(options));
  gang_size = static_cast<int>(
      std::count_if(tasks.begin(), tasks.end(),
                    [](const TaskSpec& t) { return t.partition_id >= 0; }));
  const int needed = static_cast<int>(tasks.size());
  if (options.slots >= 0 && needed > options.slots) {
    return absl::FailedPreconditionError(absl::StrCat(
        "[barrier] the job launches ", needed,
        " task(s) at once, which requires more slots than the total number "
        "of slots (",
        options.slots,
        " from --slots); nothing was started. Lower -n/--workers/--ps or "
        "raise --slots."));
  }

  LaunchResult result;
  COHORT_ASSIGN_OR_RETURN(result.log_dir, PrepareLogDir(options.log_dir));

  // Every server of the job checks one token: the user's, or a fresh random
  // one that the tasks learn through their environment and the user through
  // a file only they can read (for `cohort status --token-file`).
  security.job_token = options.job_token.empty()
                           ? absl::BytesToHexString(rpc::RandomNonce())
                           : options.job_token;
  COHORT_RETURN_IF_ERROR(WritePrivateFile(result.log_dir + "/job-token",
                                          security.job_token + "\n"));
  coordinator =
      std::make_unique<BarrierCoordinator>(env, options.barrier_timeout);
  COHORT_ASSIGN_OR_RETURN(
      server,
      BarrierServer::Start(coordinator.get(), options.host, 0, security));
  rpc::FramedServerOptions tcp_options;
  tcp_options.host = options.host;
  tcp_options.job_token = security.job_token;
  COHORT_ASSIGN_OR_RETURN(
      tcp_server, BarrierTcpServer::Start(coordinator.get(), tcp_options));
  {
    absl::MutexLock lock(&mu);
    barrier_address = server->address();
  }

  AttemptTracker tracker(options.max_restarts);
  while (true) {
    {
      absl::MutexLock lock(&mu);
      if (stop_requested) {
        result.exit_code = 130;
        break;
      }
    }
    const int attempt = tracker.current();
    result.attempts = attempt + 1;
    COHORT_ASSIGN_OR_RETURN(Outcome outcome,
                            RunAttempt(attempt, tracker, result));
    if (outcome == Outcome::kSucceeded) {
      result.succeeded = true;
      result.exit_code = 0;
      result.failure_summary.clear();
      Message(absl::StrCat("job succeeded: all ", tasks.size(),
                           " task(s) of attempt ", attempt, " finished"));
      break;
    }
    if (outcome == Outcome::kStopped) {
      result.exit_code = 130;
      break;
    }
    if (tracker.restarts_left() <= 0) {
      Message(absl::StrCat("giving up after ", attempt + 1,
                           " attempt(s) (--max-restarts ", options.max_restarts,
                           "); logs in ", result.log_dir));
      break;
    }
    const int next = tracker.StartNextAttempt();
    Message(absl::StrCat("restarting the whole gang as attempt ", next, " (",
                         tracker.restarts_left(),
                         " restart(s) left after this)"));
  }
  tcp_server.reset();
  server.reset();
  coordinator.reset();
  return result;
}

}  // namespace cohort::launch
