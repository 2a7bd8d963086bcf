#include "cohort/launch/cluster_launcher.h"

#include <signal.h>
#include <stdio.h>
#include <unistd.h>

#include <algorithm>
#include <optional>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "cohort/barrier/barrier_coordinator.h"
#include "cohort/barrier/barrier_grpc_service.h"
#include "cohort/barrier/barrier_tcp_server.h"
#include "cohort/base/json.h"
#include "cohort/base/status.h"
#include "cohort/coord/coordination_agent.h"
#include "cohort/coord/coordination_server.h"
#include "cohort/coord/framed_coordination.h"
#include "cohort/launch/launch_support.h"
#include "cohort/launch/task_process.h"
#include "cohort/rpc/socket.h"
#include "cohort/rpc/transport.h"

namespace cohort::launch {
namespace {

// Control-plane keys: cohort/launch/<attempt>/...
//   address/<k>   "host:port" of engine task k's program
//   services      {"coordination", "barrier", "barrier_tcp"} (task 0)
//   failed        the attempt's first failure (FailureRecord)
//   done/<k>      engine task k's program exited 0
//   succeeded     every chief/worker/evaluator program exited 0 (task 0)
//   ended/<k>     "stopped" when k stopped a running program for the verdict
constexpr char kStartBarrier[] = "cohort/launch/start";
constexpr char kEndBarrier[] = "cohort/launch/end";

std::string Key(int attempt, const std::string& rest) {
  return absl::StrCat("cohort/launch/", attempt, "/", rest);
}

// "0.0.0.0:41234" bound by a server -> "node-1:41234" for its peers.
std::string OnHost(const std::string& host, int port) {
  if (host.find(':') != std::string::npos) {
    return absl::StrCat("[", host, "]:", port);  // IPv6
  }
  return absl::StrCat(host, ":", port);
}
int PortOf(const std::string& address) {
  absl::StatusOr<std::pair<std::string, int>> hp =
      SplitHostPort(address, "bound address");
  return hp.ok() ? hp->second : 0;
}

// The first failure of an attempt, as every launcher reads it.
struct FailureRecord {
  std::string task;  // "worker:1"
  int engine_task = 0;
  std::string where;  // "pid 123 on node-2"
  std::string reason;
  int code = 1;
  bool interrupted = false;
  absl::Time when;
  absl::Duration after_start;
  std::string log_path;
  std::vector<std::string> tail;

  std::string Encode() const {
    return JsonDump(Json{{"task", task},
                         {"engine_task", engine_task},
                         {"where", where},
                         {"reason", reason},
                         {"code", code},
                         {"interrupted", interrupted},
                         {"when_ns", absl::ToUnixNanos(when)},
                         {"after_ms", absl::ToInt64Milliseconds(after_start)},
                         {"log_path", log_path},
                         {"tail", tail}});
  }
  // Anything in the control plane may have been written by any holder of
  // the job token: a record that is not one becomes "unreadable" (code 1),
  // and every field is bounded before use.
  static FailureRecord Decode(const std::string& text, int num_tasks,
                              int tail_lines) {
    FailureRecord r;
    r.task = "?";
    r.reason = "failed (its failure record is unreadable)";
    absl::StatusOr<Json> j = ParseJson(text, "the failure record");
    if (!j.ok() || !j->is_object()) return r;
    auto text_of = [&](const char* key, size_t cap) -> std::string {
      auto it = j->find(key);
      if (it == j->end() || !it->is_string()) return "";
      return it->get<std::string>().substr(0, cap);
    };
    auto int_of = [&](const char* key, int64_t fallback) -> int64_t {
      auto it = j->find(key);
      return it != j->end() && it->is_number_integer() ? it->get<int64_t>()
                                                       : fallback;
    };
    constexpr size_t kFieldCap = 4096;
    if (std::string task = text_of("task", 64); !task.empty()) r.task = task;
    if (std::string reason = text_of("reason", kFieldCap); !reason.empty()) {
      r.reason = reason;
    }
    r.where = text_of("where", 256);
    r.log_path = text_of("log_path", kFieldCap);
    const int64_t engine_task = int_of("engine_task", 0);
    r.engine_task = engine_task >= 0 && engine_task < num_tasks
                        ? static_cast<int>(engine_task)
                        : 0;
    // A failed job never exits 0: codes outside 1..255 become 1.
    const int64_t code = int_of("code", 1);
    r.code = code >= 1 && code <= 255 ? static_cast<int>(code) : 1;
    auto interrupted = j->find("interrupted");
    r.interrupted = interrupted != j->end() && interrupted->is_boolean() &&
                    interrupted->get<bool>();
    r.when = absl::FromUnixNanos(int_of("when_ns", 0));
    r.after_start = absl::Milliseconds(
        std::clamp<int64_t>(int_of("after_ms", 0), 0, int64_t{1} << 40));
    if (auto tail = j->find("tail"); tail != j->end() && tail->is_array()) {
      for (const Json& line : *tail) {
        if (static_cast<int>(r.tail.size()) >= std::max(1, tail_lines)) break;
        if (line.is_string()) {
          r.tail.push_back(line.get<std::string>().substr(0, kFieldCap));
        }
      }
    }
    return r;
  }
};

}  // namespace

struct ClusterLauncher::Impl {
  enum class Outcome { kSucceeded, kFailed, kStopped, kLost };

  Impl(Env* e, ClusterLaunchOptions o) : env(e), options(std::move(o)) {
    if (!options.output) options.output = LineWriter(stdout);
    if (!options.messages) options.messages = LineWriter(stderr);
  }

  void Message(const std::string& line) {
    absl::MutexLock lock(&out_mu);
    options.messages(absl::StrCat("[cohort ", options.engine.engine, " task ",
                                  me, "] ", line));
  }
  void Output(const std::string& line) {
    absl::MutexLock lock(&out_mu);
    options.output(line);
  }

  absl::StatusOr<LaunchResult> Run();
  absl::Status Validate();
  absl::Status StartControlPlane();  // task 0
  absl::Status Connect();
  absl::StatusOr<Outcome> RunAttempt(int attempt, AttemptTracker& tracker,
                                     LaunchResult& result);
  // Task 0: fails the attempt for programs the coordination service failed,
  // and declares success once every non-ps program is done.
  void JudgeAttempt(int attempt, coord::CoordinationServer* programs);
  // Records `record` as the attempt's failure unless one is there already.
  void PublishFailure(int attempt, const FailureRecord& record);
  // The agent's WaitAtBarrier, cancelled for every launcher (Cancelled) when
  // Stop() is called while it waits.
  absl::Status WaitAtBarrierOrStop(const std::string& id,
                                   absl::Duration timeout);

  Env* const env;
  ClusterLaunchOptions options;
  std::vector<TaskSpec> tasks;
  int me = 0;
  int must_finish = 0;  // chief, worker and evaluator tasks
  rpc::TransportSecurity security;

  absl::Mutex out_mu;
  absl::Mutex mu;
  bool stop_requested ABSL_GUARDED_BY(mu) = false;
  absl::Status agent_error ABSL_GUARDED_BY(mu);
  std::optional<ExitInfo> exit ABSL_GUARDED_BY(mu);
  absl::Time exit_when ABSL_GUARDED_BY(mu);
  // Bumped by each of the above; the attempt loop waits for a change.
  int64_t wakeups ABSL_GUARDED_BY(mu) = 0;

  // Task 0 only.
  std::unique_ptr<coord::CoordinationServer> control;
  std::unique_ptr<barrier::BarrierCoordinator> coordinator;
  std::unique_ptr<barrier::BarrierServer> barrier_server;
  std::unique_ptr<barrier::BarrierTcpServer> barrier_tcp;

  std::unique_ptr<coord::CoordinationAgent> agent;
  // The attempt loop acted on Stop(); the barriers no longer cancel for it.
  bool stop_handled ABSL_GUARDED_BY(mu) = false;
};

ClusterLauncher::ClusterLauncher(Env* env, ClusterLaunchOptions options)
    : impl_(std::make_unique<Impl>(env, std::move(options))) {}

ClusterLauncher::~ClusterLauncher() = default;

absl::StatusOr<LaunchResult> ClusterLauncher::Run() { return impl_->Run(); }

void ClusterLauncher::Stop() {
  absl::MutexLock lock(&impl_->mu);
  impl_->stop_requested = true;
  ++impl_->wakeups;
}

absl::Status ClusterLauncher::Impl::Validate() {
  const EngineTask& e = options.engine;
  if (options.command.empty()) {
    return absl::InvalidArgumentError(
        "no program to launch; put it after `--`, e.g. `srun -n 4 cohort "
        "launch --engine slurm -- ./my_task`");
  }
  if (e.count <= 0 || e.index < 0 || e.index >= e.count ||
      static_cast<int>(e.hosts.size()) != e.count) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the ", e.engine, " engine gave task ", e.index, " of ", e.count,
        " with ", e.hosts.size(), " host(s) (", e.source, ")"));
  }
  if (options.job_token.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "no job token: every launcher of the job needs the same one; set "
        "COHORT_JOB_TOKEN in the ",
        e.engine,
        " task's environment or pass --token-file (docs/slurm.md, "
        "docs/kubernetes.md)"));
  }
  if (options.max_restarts < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--max-restarts must not be negative, got ", options.max_restarts));
  }
  std::map<std::string, int> jobs = options.jobs;
  if (jobs.empty()) jobs = e.jobs;
  if (jobs.empty()) jobs = {{"worker", e.count}};
  COHORT_ASSIGN_OR_RETURN(tasks, PlanEngineTasks(jobs, e.count));
  me = e.index;
  must_finish = static_cast<int>(
      std::count_if(tasks.begin(), tasks.end(),
                    [](const TaskSpec& t) { return t.job != "ps"; }));
  return absl::OkStatus();
}

absl::Status ClusterLauncher::Impl::StartControlPlane() {
  COHORT_ASSIGN_OR_RETURN(
      auto rendezvous,
      SplitHostPort(options.engine.rendezvous, "the rendezvous address"));
  // The launchers meet on the framed transport, whose handshake proves the
  // token both ways: a process that bound the rendezvous port first learns
  // nothing, and launchers refuse it. gRPC serves too, on a port nobody is
  // told.
  coord::CoordinationServerOptions co;
  co.address = OnHost(options.bind_host, 0);
  co.serve_framed = true;
  co.framed_address = OnHost(options.bind_host, rendezvous.second);
  co.security = security;
  co.service.env = env;
  co.service.jobs = {{"launcher", options.engine.count}};
  co.service.heartbeat_timeout = options.heartbeat_timeout;
  co.service.shutdown_barrier_timeout = options.rendezvous_timeout;
  absl::StatusOr<std::unique_ptr<coord::CoordinationServer>> server =
      coord::CoordinationServer::Start(std::move(co));
  if (!server.ok()) {
    return Annotate(server.status(),
                    absl::StrCat("task 0's launcher serving the rendezvous "
                                 "on port ",
                                 rendezvous.second, " (", options.engine.source,
                                 "); is the port free on this host? "
                                 "--rendezvous :PORT picks another"));
  }
  control = std::move(server).value();
  coordinator = std::make_unique<barrier::BarrierCoordinator>(
      env, options.barrier_timeout);
  COHORT_ASSIGN_OR_RETURN(
      barrier_server, barrier::BarrierServer::Start(
                          coordinator.get(), options.bind_host, 0, security));
  rpc::FramedServerOptions tcp;
  tcp.host = options.bind_host;
  tcp.job_token = security.job_token;
  COHORT_ASSIGN_OR_RETURN(
      barrier_tcp, barrier::BarrierTcpServer::Start(coordinator.get(), tcp));
  return absl::OkStatus();
}

absl::Status ClusterLauncher::Impl::Connect() {
  COHORT_ASSIGN_OR_RETURN(
      std::unique_ptr<coord::CoordinationClient> client,
      coord::NewCoordinationClient(
          absl::StrCat(coord::kFramedTargetPrefix, options.engine.rendezvous),
          security));
  coord::CoordinationAgentOptions ao;
  ao.task = {"launcher", me};
  ao.heartbeat_timeout = options.heartbeat_timeout;
  ao.register_timeout = options.rendezvous_timeout;
  ao.shutdown_timeout = options.rendezvous_timeout;
  ao.env = env;
  ao.error_callback = [this](const absl::Status& error) {
    absl::MutexLock lock(&mu);
    agent_error = error;
    ++wakeups;
  };
  COHORT_ASSIGN_OR_RETURN(agent, coord::CoordinationAgent::Create(
                                     std::move(ao), std::move(client)));
  absl::Status s = agent->Connect();
  if (absl::IsDeadlineExceeded(s) || absl::IsUnavailable(s)) {
    return absl::DeadlineExceededError(absl::StrCat(
        "could not reach task 0's launcher at ", options.engine.rendezvous,
        " (the address the ", options.engine.engine,
        " engine gave: ", options.engine.source, ") within ",
        absl::FormatDuration(options.rendezvous_timeout),
        "; check that engine task 0 runs `cohort launch --engine ",
        options.engine.engine,
        "` and that this host reaches that port (--rendezvous, "
        "--rendezvous-timeout). Last error: ",
        s.message()));
  }
  return Annotate(s, absl::StrCat("registering launcher:", me, " at ",
                                  options.engine.rendezvous));
}

void ClusterLauncher::Impl::PublishFailure(int attempt,
                                           const FailureRecord& record) {
  absl::Status s =
      agent->InsertKeyValue(Key(attempt, "failed"), record.Encode(), false);
  if (!s.ok() && !absl::IsAlreadyExists(s)) {
    Message(absl::StrCat("could not record the failure of ", record.task,
                         " in the control plane: ", s.ToString()));
  }
}

void ClusterLauncher::Impl::JudgeAttempt(int attempt,
                                         coord::CoordinationServer* programs) {
  absl::StatusOr<std::vector<coord::TaskStateSnapshot>> states =
      programs->service()->GetTaskState({});
  if (states.ok()) {
    for (const coord::TaskStateSnapshot& st : *states) {
      if (st.state != coord::TaskState::kError) continue;
      for (size_t k = 0; k < tasks.size(); ++k) {
        if (tasks[k].job != st.task.job || tasks[k].index != st.task.index) {
          continue;
        }
        FailureRecord r;
        r.task = tasks[k].Name();
        r.engine_task = static_cast<int>(k);
        r.where = absl::StrCat("on ", options.engine.hosts[k]);
        r.reason = absl::StrCat("was failed by the coordination service: ",
                                st.error.message());
        r.when = st.error_time;
        PublishFailure(attempt, r);
        return;
      }
    }
  }
  absl::StatusOr<std::vector<std::pair<std::string, std::string>>> done =
      agent->GetKeyValueDir(Key(attempt, "done"));
  if (done.ok() && static_cast<int>(done->size()) >= must_finish) {
    agent->InsertKeyValue(Key(attempt, "succeeded"), "1", false).IgnoreError();
  }
}

absl::Status ClusterLauncher::Impl::WaitAtBarrierOrStop(
    const std::string& id, absl::Duration timeout) {
  std::optional<absl::Status> result;  // guarded by mu
  std::thread waiter([&] {
    absl::Status s = agent->WaitAtBarrier(id, timeout);
    absl::MutexLock lock(&mu);
    result = s;
    ++wakeups;
  });
  bool stopped = false;
  {
    absl::MutexLock lock(&mu);
    auto done = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
      return result.has_value() || (stop_requested && !stop_handled);
    };
    mu.Await(absl::Condition(&done));
    stopped = !result.has_value();
  }
  if (stopped) agent->CancelBarrier(id).IgnoreError();
  waiter.join();
  absl::MutexLock lock(&mu);
  if (stopped && !result->ok()) {
    return absl::CancelledError(absl::StrCat("interrupted while waiting at ",
                                             id, " (SIGINT or SIGTERM)"));
  }
  return *result;
}

absl::StatusOr<ClusterLauncher::Impl::Outcome>
ClusterLauncher::Impl::RunAttempt(int attempt, AttemptTracker& tracker,
                                  LaunchResult& result) {
  const EngineTask& e = options.engine;
  const TaskSpec& spec = tasks[me];
  {
    absl::MutexLock lock(&mu);
    exit.reset();
  }
  COHORT_ASSIGN_OR_RETURN(int port, rpc::PickFreePort(options.bind_host));
  COHORT_RETURN_IF_ERROR(agent->InsertKeyValue(
      Key(attempt, absl::StrCat("address/", me)), OnHost(e.hosts[me], port)));

  std::unique_ptr<coord::CoordinationServer> programs;
  struct CloseGangOnExit {
    barrier::BarrierCoordinator* coordinator;
    int attempt;
    ~CloseGangOnExit() {
      if (coordinator != nullptr) {
        coordinator->CloseGang(kStageId, attempt,
                               absl::StrCat("attempt ", attempt, " ended"));
      }
    }
  } close_gang{nullptr, attempt};
  if (me == 0) {
    const int gang_size = static_cast<int>(
        std::count_if(tasks.begin(), tasks.end(),
                      [](const TaskSpec& t) { return t.partition_id >= 0; }));
    COHORT_RETURN_IF_ERROR(coordinator->OpenGang(kStageId, attempt, gang_size));
    close_gang.coordinator = coordinator.get();
    coord::CoordinationServerOptions co;
    co.address = OnHost(options.bind_host, 0);
    co.service.env = env;
    co.service.heartbeat_timeout = options.heartbeat_timeout;
    co.security = security;
    for (const TaskSpec& t : tasks) ++co.service.jobs[t.job];
    COHORT_ASSIGN_OR_RETURN(programs,
                            coord::CoordinationServer::Start(std::move(co)));
    const Json services = {
        {"coordination", OnHost(e.hosts[0], programs->port())},
        {"barrier", OnHost(e.hosts[0], PortOf(barrier_server->address()))},
        {"barrier_tcp", OnHost(e.hosts[0], PortOf(barrier_tcp->address()))}};
    COHORT_RETURN_IF_ERROR(
        agent->InsertKeyValue(Key(attempt, "services"), JsonDump(services)));
  }
  absl::Status at_start =
      WaitAtBarrierOrStop(kStartBarrier, options.rendezvous_timeout);
  if (absl::IsCancelled(at_start)) {
    // A launcher (this one or another) was interrupted before the start.
    result.exit_code = 130;
    result.failure_summary =
        absl::StrCat("attempt ", attempt,
                     " interrupted before it started: ", at_start.message());
    Message(result.failure_summary);
    return Outcome::kStopped;
  }
  if (!at_start.ok()) {
    return Annotate(at_start, absl::StrCat("waiting for every launcher at the "
                                           "start of attempt ",
                                           attempt));
  }

  TaskEnvironmentInputs inputs;
  inputs.tasks = tasks;
  for (int k = 0; k < e.count; ++k) {
    COHORT_ASSIGN_OR_RETURN(
        std::string address,
        agent->TryGetKeyValue(Key(attempt, absl::StrCat("address/", k))));
    inputs.addresses.push_back(address);
  }
  COHORT_ASSIGN_OR_RETURN(std::string services_text,
                          agent->TryGetKeyValue(Key(attempt, "services")));
  COHORT_ASSIGN_OR_RETURN(Json services,
                          ParseJson(services_text, "the services record"));
  inputs.task = me;
  inputs.attempt = attempt;
  inputs.job_token = security.job_token;
  inputs.coordination_address = services.value("coordination", "");
  inputs.barrier_address = services.value("barrier", "");
  inputs.barrier_tcp_address = services.value("barrier_tcp", "");
  inputs.barrier_timeout = options.barrier_timeout;
  inputs.extra_env = options.extra_env;
  const std::string stem = absl::StrCat(result.log_dir, "/", spec.job, "-",
                                        spec.index, ".attempt-", attempt);
  inputs.epoch_file = stem + ".epoch";
  unlink(inputs.epoch_file.c_str());

  TaskProcess::Options to;
  to.spec = spec;
  to.command = options.command;
  to.env = EnvironmentWith(TaskEnvironment(inputs));
  to.log_path = stem + ".log";
  to.tail_lines = options.summary_lines;
  to.output = [this](const std::string& line) { Output(line); };
  to.messages = [this](const std::string& line) { Message(line); };
  to.on_exit = [this](ExitInfo info, absl::Time when) {
    absl::MutexLock lock(&mu);
    exit = info;
    exit_when = when;
    ++wakeups;
  };
  absl::StatusOr<std::unique_ptr<TaskProcess>> started =
      TaskProcess::Start(env, std::move(to));
  std::unique_ptr<TaskProcess> process;
  bool exited = false;
  if (started.ok()) {
    process = std::move(started).value();
    if (options.progress) {
      Message(absl::StrCat("attempt ", attempt, ": started ", spec.Name(),
                           " (pid ", process->pid(), ") at ",
                           inputs.addresses[me], "; log ", stem, ".log"));
    }
  } else {
    FailureRecord r;
    r.task = spec.Name();
    r.engine_task = me;
    r.where = absl::StrCat("on ", e.hosts[me]);
    r.reason = absl::StrCat("could not start: ", started.status().message());
    r.when = env->Now();
    PublishFailure(attempt, r);
    exited = true;
  }

  std::optional<FailureRecord> failure;
  bool succeeded = false;
  bool stopping = false;
  bool stopped_running = false;  // this launcher stopped a live program
  bool lost = false;
  absl::Status lost_error;
  bool interrupted_here = false;
  absl::Time kill_at = absl::InfiniteFuture();
  absl::Time next_poll = env->Now();
  int64_t seen = 0;
  {
    absl::MutexLock lock(&mu);
    seen = wakeups;
  }
  auto begin_stop = [&] {
    if (stopping || process == nullptr) return;
    stopping = true;
    if (!exited) {
      stopped_running = true;
      process->SignalGroup(SIGTERM);
      kill_at = env->Now() + options.stop_grace;
    }
  };

  while (!(exited && (failure.has_value() || succeeded || lost))) {
    std::optional<ExitInfo> exit_now;
    absl::Time exit_time;
    bool stop_now = false;
    absl::Status agent_now;
    {
      absl::MutexLock lock(&mu);
      auto woken = [this, seen]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
        return wakeups != seen;
      };
      env->AwaitWithDeadline(&mu, absl::Condition(&woken),
                             std::min(next_poll, kill_at));
      seen = wakeups;
      if (!exited && exit.has_value()) {
        exit_now = exit;
        exit_time = exit_when;
      }
      stop_now = stop_requested && !stop_handled;
      if (stop_now) stop_handled = true;
      agent_now = agent_error;
    }
    if (!agent_now.ok() && !lost) {
      lost = true;
      lost_error = agent_now;
      begin_stop();
    }
    if (stop_now && !interrupted_here) {
      interrupted_here = true;
      FailureRecord r;
      r.task = spec.Name();
      r.engine_task = me;
      r.where = absl::StrCat("on ", e.hosts[me]);
      r.reason = "was interrupted: its launcher got SIGINT or SIGTERM";
      r.code = 130;
      r.interrupted = true;
      r.when = env->Now();
      if (!lost) PublishFailure(attempt, r);
      begin_stop();
    }
    if (exit_now.has_value()) {
      exited = true;
      kill_at = absl::InfiniteFuture();
      if (exit_now->ok()) {
        if (spec.job != "ps" && !lost) {
          // Without this key task 0 would wait for this program forever:
          // when it cannot be written, the attempt fails instead.
          absl::Status done = agent->InsertKeyValue(
              Key(attempt, absl::StrCat("done/", me)), "1", false);
          if (!done.ok() && !absl::IsAlreadyExists(done)) {
            FailureRecord r;
            r.task = spec.Name();
            r.engine_task = me;
            r.where = absl::StrCat("on ", e.hosts[me]);
            r.reason = absl::StrCat(
                "finished, but its launcher could not record that: ",
                done.message());
            r.when = env->Now();
            PublishFailure(attempt, r);
          }
        }
      } else if (!stopping && !lost) {
        // The record carries the last lines: read what is left in the pipe.
        process->Finish(env->Now() + absl::Seconds(2));
        FailureRecord r;
        r.task = spec.Name();
        r.engine_task = me;
        r.where = absl::StrCat("pid ", process->pid(), " on ", e.hosts[me]);
        r.reason = exit_now->Describe();
        r.code = exit_now->ShellCode() != 0 ? exit_now->ShellCode() : 1;
        r.when = exit_time;
        r.after_start = exit_time - process->started();
        r.log_path = process->log_path();
        r.tail = process->Tail();
        PublishFailure(attempt, r);
      }
    }
    const absl::Time now = env->Now();
    if (!lost && now >= next_poll) {
      next_poll = now + kPollInterval;
      if (me == 0 && !failure.has_value() && !succeeded) {
        JudgeAttempt(attempt, programs.get());
      }
      if (!failure.has_value()) {
        absl::StatusOr<std::string> f =
            agent->TryGetKeyValue(Key(attempt, "failed"));
        if (f.ok()) {
          failure = FailureRecord::Decode(*f, e.count, options.summary_lines);
          begin_stop();
        }
      }
      if (!failure.has_value() && !succeeded) {
        succeeded = agent->TryGetKeyValue(Key(attempt, "succeeded")).ok();
        if (succeeded) begin_stop();  // only a ps program can be left
      }
    }
    if (stopping && !exited && now >= kill_at) {
      process->SignalGroup(SIGKILL);
      kill_at = absl::InfiniteFuture();
    }
  }
  if (process != nullptr) process->Finish(env->Now() + absl::Seconds(2));

  if (lost) {
    result.exit_code = 1;
    result.failure_summary = absl::StrCat(
        "the launchers lost each other (control plane at ", e.rendezvous,
        ", served by engine task 0): ", lost_error.message());
    Message(result.failure_summary);
    Message(absl::StrCat("stopped ", spec.Name(), "; the job failed"));
    return Outcome::kLost;
  }
  agent
      ->InsertKeyValue(Key(attempt, absl::StrCat("ended/", me)),
                       stopped_running && !succeeded ? "stopped" : "exited",
                       false)
      .IgnoreError();
  absl::Status at_end = WaitAtBarrierOrStop(
      kEndBarrier, options.rendezvous_timeout + options.stop_grace);
  if (programs != nullptr) programs->Stop();
  if (!at_end.ok()) {
    return Annotate(at_end, absl::StrCat("waiting for every launcher at the "
                                         "end of attempt ",
                                         attempt));
  }
  if (succeeded) return Outcome::kSucceeded;

  const FailureRecord& r = *failure;
  tracker.ReportFailure(attempt);
  result.exit_code = r.code;
  if (me == 0) {
    FailureReport report;
    report.attempt = attempt;
    report.task = r.task;
    report.where = r.where;
    report.reason = r.reason;
    report.when = r.when;
    report.after_start = r.after_start;
    if (std::optional<barrier::GangSnapshot> gang =
            coordinator->Snapshot(kStageId, attempt);
        gang.has_value() && !gang->failure.ok()) {
      report.barrier = absl::StrCat("barrier: ", gang->failure.message());
    }
    report.log_path =
        r.log_path.empty()
            ? absl::StrCat("its log on ", e.hosts[r.engine_task])
            : absl::StrCat(r.log_path, " on ", e.hosts[r.engine_task]);
    report.tail = r.tail;
    absl::StatusOr<std::vector<std::pair<std::string, std::string>>> ended =
        agent->GetKeyValueDir(Key(attempt, "ended"));
    if (ended.ok()) {
      report.stopped_others = static_cast<int>(
          std::count_if(ended->begin(), ended->end(),
                        [](const auto& kv) { return kv.second == "stopped"; }));
    }
    const std::vector<std::string> lines = FailureSummaryLines(report);
    result.failure_summary = absl::StrJoin(lines, "\n");
    for (const std::string& l : lines) Message(l);
  } else {
    result.failure_summary = absl::StrCat(
        "attempt ", attempt, " failed: task ", r.task, " (", r.where, ") ",
        r.reason, "; task 0's launcher prints the summary");
    Message(absl::StrCat(
        result.failure_summary,
        stopped_running ? absl::StrCat("; stopped ", spec.Name()) : ""));
  }
  return r.interrupted ? Outcome::kStopped : Outcome::kFailed;
}

absl::StatusOr<LaunchResult> ClusterLauncher::Impl::Run() {
  COHORT_RETURN_IF_ERROR(Validate());
  LaunchResult result;
  COHORT_ASSIGN_OR_RETURN(result.log_dir, PrepareLogDir(options.log_dir));
  security.job_token = options.job_token;
  if (me == 0) COHORT_RETURN_IF_ERROR(StartControlPlane());
  COHORT_RETURN_IF_ERROR(Connect());
  if (options.progress) {
    Message(absl::StrCat("joined the job at ", options.engine.rendezvous,
                         " as ", tasks[me].Name(), " (", options.engine.source,
                         ")"));
  }

  AttemptTracker tracker(options.max_restarts);
  while (true) {
    const int attempt = tracker.current();
    result.attempts = attempt + 1;
    absl::StatusOr<Outcome> ran = RunAttempt(attempt, tracker, result);
    if (!ran.ok()) {
      // Fail every other launcher now rather than at their deadlines.
      agent
          ->ReportError(Annotate(
              ran.status(),
              absl::StrCat("launcher:", me, " on ", options.engine.hosts[me])))
          .IgnoreError();
      return ran.status();
    }
    const Outcome outcome = *ran;
    if (outcome == Outcome::kSucceeded) {
      result.succeeded = true;
      result.exit_code = 0;
      result.failure_summary.clear();
      if (me == 0) {
        Message(absl::StrCat("job succeeded: all ", tasks.size(),
                             " task(s) of attempt ", attempt, " finished"));
      }
      break;
    }
    if (outcome == Outcome::kLost) return result;
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
    if (me == 0) {
      Message(absl::StrCat("restarting the whole gang as attempt ", next, " (",
                           tracker.restarts_left(),
                           " restart(s) left after this)"));
    }
  }
  // Every launcher waits at the service's shutdown barrier, so task 0's
  // control plane stays up until the last launcher knows the outcome.
  agent->Shutdown().IgnoreError();
  agent.reset();
  if (control != nullptr) control->Stop();
  return result;
}

}  // namespace cohort::launch
