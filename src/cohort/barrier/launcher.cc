#include "cohort/barrier/launcher.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <deque>
#include <iostream>
#include <thread>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "cohort/barrier/barrier_coordinator.h"
#include "cohort/barrier/barrier_grpc_service.h"
#include "cohort/barrier/barrier_task_context.h"
#include "cohort/barrier/barrier_tcp_server.h"
#include "cohort/barrier/process.h"
#include "cohort/base/logging.h"
#include "cohort/base/status.h"
#include "cohort/coord/coordination_server.h"
#include "cohort/rpc/frame.h"
#include "cohort/rpc/socket.h"
#include "cohort/rpc/transport.h"

namespace cohort::barrier {
namespace {

constexpr int64_t kStageId = 0;
// How often the progress line may change.
constexpr absl::Duration kProgressInterval = absl::Seconds(1);
// How often the coordination service's view of the tasks is checked.
constexpr absl::Duration kHealthInterval = absl::Milliseconds(250);

std::string FormatWallTime(absl::Time t) {
  return absl::FormatTime("%Y-%m-%d %H:%M:%E3S UTC", t, absl::UTCTimeZone());
}

absl::Status MakeDirs(const std::string& path) {
  std::string partial;
  for (size_t i = 0; i <= path.size(); ++i) {
    if (i == path.size() || (path[i] == '/' && i > 0)) {
      partial = path.substr(0, i);
      if (mkdir(partial.c_str(), 0755) != 0 && errno != EEXIST) {
        return absl::FailedPreconditionError(
            absl::StrCat("cannot create log directory ", partial, ": ",
                         strerror(errno), "; check --log-dir"));
      }
    }
  }
  return absl::OkStatus();
}

// Writes `contents` to a new file at `path` readable by the owner only.
absl::Status WritePrivateFile(const std::string& path,
                              const std::string& contents) {
  unlink(path.c_str());  // a reused --log-dir: never write through a link
  const int fd =
      open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot create ", path, ": ", strerror(errno), "; check --log-dir"));
  }
  const bool ok = write(fd, contents.data(), contents.size()) ==
                  static_cast<ssize_t>(contents.size());
  close(fd);
  if (!ok) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot write ", path, ": ", strerror(errno)));
  }
  return absl::OkStatus();
}

// The output of one running task: its log file and its last lines.
struct TaskOutput {
  absl::Mutex mu;
  std::deque<std::string> tail ABSL_GUARDED_BY(mu);
};

}  // namespace

// --- Job planning ---------------------------------------------------------

absl::StatusOr<std::vector<TaskSpec>> PlanTasks(const LaunchOptions& options) {
  if (options.num_workers < 0 || options.num_ps < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("task counts must not be negative (workers ",
                     options.num_workers, ", ps ", options.num_ps, ")"));
  }
  std::vector<TaskSpec> tasks;
  int partition = 0;
  if (options.chief) tasks.push_back({"chief", 0, partition++});
  for (int i = 0; i < options.num_workers; ++i) {
    tasks.push_back({"worker", i, partition++});
  }
  for (int i = 0; i < options.num_ps; ++i) tasks.push_back({"ps", i, -1});
  if (options.evaluator) tasks.push_back({"evaluator", 0, -1});
  if (partition == 0) {
    return absl::InvalidArgumentError(
        "the job has no chief and no workers; give -n N (N >= 1), --workers "
        "W or --chief");
  }
  return tasks;
}

Json MakeTfConfig(const std::vector<TaskSpec>& tasks,
                  const std::vector<std::string>& addresses,
                  const TaskSpec& task) {
  Json cluster = Json::object();
  for (size_t i = 0; i < tasks.size(); ++i) {
    if (tasks[i].job == "evaluator") continue;
    cluster[tasks[i].job].push_back(addresses[i]);
  }
  return Json{{"cluster", cluster},
              {"task", {{"type", task.job}, {"index", task.index}}}};
}

// --- AttemptTracker -------------------------------------------------------

AttemptTracker::Decision AttemptTracker::ReportFailure(int attempt) {
  if (attempt != current_) return Decision::kIgnoreOldAttempt;
  if (current_failed_) return Decision::kAlreadyFailing;
  current_failed_ = true;
  return current_ < max_restarts_ ? Decision::kRetry : Decision::kGiveUp;
}

int AttemptTracker::StartNextAttempt() {
  ++current_;
  current_failed_ = false;
  return current_;
}

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
    TaskSpec spec;
    std::unique_ptr<Subprocess> process;
    std::string log_path;
    std::shared_ptr<TaskOutput> output;
    std::thread reader;
    std::thread waiter;
    absl::Time started;
    bool exited = false;
    ExitInfo exit;
    absl::Time exited_at;
  };

  enum class Outcome { kSucceeded, kFailed, kStopped };

  Impl(Env* e, LaunchOptions o) : env(e), options(std::move(o)) {
    if (!options.output) {
      options.output = [](const std::string& line) {
        std::string l = line + "\n";
        fwrite(l.data(), 1, l.size(), stdout);
        fflush(stdout);
      };
    }
    if (!options.messages) {
      options.messages = [](const std::string& line) {
        std::string l = line + "\n";
        fwrite(l.data(), 1, l.size(), stderr);
        fflush(stderr);
      };
    }
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
  // Copies a task's output to the console and its log until EOF, or until
  // the clock passes *abandon_at (unix nanos).
  void ReadOutput(Running* task, std::atomic<int64_t>* abandon_at);

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

void Launcher::Impl::ReadOutput(Running* task,
                                std::atomic<int64_t>* abandon_at) {
  FILE* log = fopen(task->log_path.c_str(), "a");
  if (log == nullptr) {
    Message(absl::StrCat("cannot open ", task->log_path, ": ", strerror(errno),
                         "; ", task->spec.Name(),
                         "'s output goes only to the "
                         "console"));
  }
  const std::string prefix = absl::StrCat("[", task->spec.Name(), "] ");
  const int fd = task->process->output_fd();
  std::string pending;
  char buf[4096];
  auto emit = [&](std::string line) {
    if (log != nullptr) {
      fwrite(line.data(), 1, line.size(), log);
      fputc('\n', log);
      fflush(log);
    }
    {
      absl::MutexLock lock(&out_mu);
      options.output(prefix + line);
    }
    absl::MutexLock lock(&task->output->mu);
    task->output->tail.push_back(std::move(line));
    while (static_cast<int>(task->output->tail.size()) >
           std::max(1, options.summary_lines)) {
      task->output->tail.pop_front();
    }
  };
  while (true) {
    pollfd pfd{fd, POLLIN, 0};
    const int n = poll(&pfd, 1, 200);
    if (n == 0) {
      // Descendants that left the process group can keep the pipe open;
      // stop reading once the attempt is over.
      if (absl::ToUnixNanos(env->Now()) > abandon_at->load()) break;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    const ssize_t got = read(fd, buf, sizeof(buf));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    pending.append(buf, static_cast<size_t>(got));
    size_t start = 0;
    for (size_t nl; (nl = pending.find('\n', start)) != std::string::npos;
         start = nl + 1) {
      emit(pending.substr(start, nl - start));
    }
    pending.erase(0, start);
  }
  if (!pending.empty()) emit(std::move(pending));
  if (log != nullptr) fclose(log);
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
  std::vector<std::string> gang_addresses;
  for (int i = 0; i < n; ++i) {
    if (tasks[i].partition_id >= 0) gang_addresses.push_back(addresses[i]);
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
  std::atomic<int64_t> abandon_output{INT64_MAX};
  absl::Status spawn_error;
  for (int i = 0; i < n; ++i) {
    const TaskSpec& spec = tasks[i];
    std::vector<std::string> vars = options.extra_env;
    vars.push_back(absl::StrCat(
        "TF_CONFIG=", JsonDump(MakeTfConfig(tasks, addresses, spec))));
    vars.push_back(absl::StrCat(kEnvTaskName, "=", spec.Name()));
    // Tasks prove the token to every server of the job; the environment
    // (unlike argv) is not visible to other users in `ps`.
    vars.push_back(absl::StrCat(rpc::kJobTokenEnvVar, "=", security.job_token));
    vars.push_back(absl::StrCat(kEnvAttemptNumber, "=", attempt));
    vars.push_back(absl::StrCat(kEnvStageId, "=", kStageId));
    if (coordination != nullptr) {
      vars.push_back(
          absl::StrCat(kEnvCoordinationAddress, "=", coordination->target()));
    }
    if (spec.partition_id >= 0) {
      vars.push_back(
          absl::StrCat(kEnvBarrierAddress, "=", coordinator_address));
      vars.push_back(
          absl::StrCat(kEnvBarrierTcpAddress, "=", tcp_server->address()));
      vars.push_back(absl::StrCat(kEnvPartitionId, "=", spec.partition_id));
      vars.push_back(absl::StrCat(kEnvNumTasks, "=", gang_size));
      vars.push_back(
          absl::StrCat(kEnvTaskAttemptId, "=",
                       int64_t{attempt} * gang_size + spec.partition_id));
      vars.push_back(absl::StrCat(kEnvTaskAddresses, "=",
                                  absl::StrJoin(gang_addresses, ",")));
      vars.push_back(absl::StrCat(
          kEnvTimeout, "=", absl::ToDoubleSeconds(options.barrier_timeout)));
      const std::string epoch_file =
          absl::StrCat(result.log_dir, "/", spec.job, "-", spec.index,
                       ".attempt-", attempt, ".epoch");
      unlink(epoch_file.c_str());  // a reused --log-dir starts at epoch 0
      vars.push_back(absl::StrCat(kEnvEpochFile, "=", epoch_file));
    } else {
      for (const char* name : {kEnvBarrierAddress, kEnvBarrierTcpAddress,
                               kEnvPartitionId, kEnvNumTasks, kEnvTaskAttemptId,
                               kEnvTaskAddresses, kEnvTimeout, kEnvEpochFile}) {
        vars.push_back(name);  // not a gang member: remove inherited values
      }
    }
    absl::StatusOr<std::unique_ptr<Subprocess>> process =
        Subprocess::Spawn(options.command, EnvironmentWith(vars));
    if (!process.ok()) {
      spawn_error = Annotate(
          process.status(),
          absl::StrCat("starting ", spec.Name(), " of attempt ", attempt));
      break;
    }
    auto task = std::make_unique<Running>();
    task->spec = spec;
    task->process = std::move(process).value();
    task->log_path = absl::StrCat(result.log_dir, "/", spec.job, "-",
                                  spec.index, ".attempt-", attempt, ".log");
    task->output = std::make_shared<TaskOutput>();
    task->started = env->Now();
    Running* raw = task.get();
    task->reader = std::thread(
        [this, raw, &abandon_output] { ReadOutput(raw, &abandon_output); });
    task->waiter = std::thread([this, raw, attempt, i] {
      ExitInfo exit = raw->process->Wait();
      PushEvent(Event{Event::kExit, attempt, i, exit, env->Now()});
    });
    running.push_back(std::move(task));
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
        absl::StrCat("task ", running[task]->spec.Name(), " ", reason));
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
                                             out, t->spec.Name(), " (pid ",
                                             t->process->pid(), ")");
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
      t.exit = e.exit;
      t.exited_at = e.when;
      ++exited;
      if (e.exit.ok()) {
        if (t.spec.job != "ps") ++gang_done;
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
              if (running[i]->exited || running[i]->spec.job != st.task.job ||
                  running[i]->spec.index != st.task.index) {
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
  for (auto& t : running) t->process->SignalGroup(SIGKILL);
  for (auto& t : running) t->waiter.join();
  // Readers stop at EOF; a pipe held open by a descendant that escaped the
  // process group is abandoned after a short drain.
  abandon_output.store(absl::ToUnixNanos(env->Now() + absl::Seconds(2)));
  for (auto& t : running) t->reader.join();

  if (!spawn_error.ok()) {
    if (attempt == 0) return spawn_error;
    result.failure_summary = spawn_error.ToString();
    result.exit_code = 1;
    Message(
        absl::StrCat("attempt ", attempt, " failed: ", spawn_error.ToString()));
    return Outcome::kFailed;
  }
  if (outcome == Outcome::kFailed && root_cause >= 0) {
    const Running& t = *running[root_cause];
    std::vector<std::string> lines;
    lines.push_back(
        absl::StrCat("attempt ", attempt, " failed: task ", t.spec.Name(),
                     " (pid ", t.process->pid(), ") ", root_reason, " at ",
                     FormatWallTime(root_when), ", ",
                     absl::FormatDuration(absl::Trunc(root_when - t.started,
                                                      absl::Milliseconds(1))),
                     " after it started"));
    if (!result.failure_summary.empty())
      lines.push_back(result.failure_summary);
    {
      absl::MutexLock lock(&t.output->mu);
      lines.push_back(absl::StrCat("last ", t.output->tail.size(),
                                   " line(s) of ", t.log_path, ":"));
      for (const std::string& l : t.output->tail) lines.push_back("  | " + l);
    }
    lines.push_back(absl::StrCat("stopped ", stopped_others,
                                 " other task(s) of attempt ", attempt));
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
  result.log_dir = options.log_dir;
  if (result.log_dir.empty()) {
    const char* tmp = getenv("TMPDIR");
    std::string templ = absl::StrCat(tmp != nullptr && *tmp ? tmp : "/tmp",
                                     "/cohort-launch-XXXXXX");
    if (mkdtemp(templ.data()) == nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot create a log directory from ", templ, ": ",
                       strerror(errno), "; pass --log-dir"));
    }
    result.log_dir = templ;
  } else {
    COHORT_RETURN_IF_ERROR(MakeDirs(result.log_dir));
  }

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

}  // namespace cohort::barrier
