#include "cohort/launch/cluster_launcher.h"

#include <signal.h>
#include <stdio.h>
#include <unistd.h>

#include <algorithm>
#include <optional>
#include <set>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "cohort/barrier/barrier_control_plane.h"
#include "cohort/barrier/barrier_coordinator.h"
#include "cohort/base/json.h"
#include "cohort/base/status.h"
#include "cohort/coord/coordination_agent.h"
#include "cohort/coord/coordination_server.h"
#include "cohort/coord/elastic_membership.h"
#include "cohort/coord/etcd_coordination_client.h"
#include "cohort/coord/framed_coordination.h"
#include "cohort/coord/grpc_coordination_client.h"
#include "cohort/coord/task_metrics.h"
#include "cohort/launch/attempt_supervisor.h"
#include "cohort/launch/job_page.h"
#include "cohort/launch/launch_support.h"
#include "cohort/launch/silence_watch.h"
#include "cohort/launch/task_failure_watch.h"
#include "cohort/launch/task_process.h"
#include "cohort/rpc/socket.h"
#include "cohort/rpc/transport.h"

namespace cohort::launch {
namespace {

// A program is declared silent by task 0's launcher after
// max(heartbeat_timeout, kProgramSilence): a server's agent heartbeats every
// 5 s by default.
constexpr absl::Duration kProgramSilence = absl::Seconds(10);

// Another launcher's client of the programs' coordination service, for the
// elastic membership. Calls are short (2 s, retried for 1 s). After a failed
// call (the service out of reach) the
// next call gets a new client: in the lab a gRPC channel that lived through
// a 20 s partition failed every call after the heal ("Handshake read
// failed") while a new one connected at once.
class ElasticStoreClient {
 public:
  ElasticStoreClient(Env* env, std::string address,
                     rpc::TransportSecurity security, coord::TaskId task)
      : env_(env),
        address_(std::move(address)),
        security_(std::move(security)),
        task_(std::move(task)) {}

  // The store's calls; `this` must outlive it.
  coord::ElasticStore Store() {
    coord::ElasticStore s;
    s.insert_new = [this](const std::string& key, const std::string& value) {
      absl::MutexLock lock(&mu_);
      COHORT_ASSIGN_OR_RETURN(coord::CoordinationAgent * agent, Agent());
      return Checked(agent->InsertKeyValue(key, value, false));
    };
    s.try_get = [this](const std::string& key) -> absl::StatusOr<std::string> {
      absl::MutexLock lock(&mu_);
      COHORT_ASSIGN_OR_RETURN(coord::CoordinationAgent * agent, Agent());
      absl::StatusOr<std::string> value = agent->TryGetKeyValue(key);
      Checked(value.status()).IgnoreError();
      return value;
    };
    return s;
  }

 private:
  absl::StatusOr<coord::CoordinationAgent*> Agent()
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (agent_ == nullptr) {
      COHORT_ASSIGN_OR_RETURN(
          std::unique_ptr<coord::CoordinationClient> client,
          coord::NewGrpcCoordinationClient(address_, security_));
      coord::CoordinationAgentOptions o;
      o.task = task_;
      o.env = env_;
      // The supervisor's thread makes these calls (every 250 ms): a service
      // out of reach costs it a few seconds per look, not the agent's
      // default 30 s per call and 10 s of retries.
      o.rpc_timeout = absl::Seconds(2);
      o.heartbeat_timeout = absl::Seconds(1);  // its retry window
      COHORT_ASSIGN_OR_RETURN(agent_, coord::CoordinationAgent::Create(
                                          std::move(o), std::move(client)));
    }
    return agent_.get();
  }
  absl::Status Checked(const absl::Status& s)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (absl::IsUnavailable(s) || absl::IsDeadlineExceeded(s)) agent_.reset();
    return s;
  }

  Env* const env_;
  const std::string address_;
  const rpc::TransportSecurity security_;
  const coord::TaskId task_;
  absl::Mutex mu_;
  std::unique_ptr<coord::CoordinationAgent> agent_ ABSL_GUARDED_BY(mu_);
};

// Control-plane keys: cohort/launch/<attempt>/...
//   address/<k>   "host:port" of engine task k's program
//   services      {"coordination", "barrier", "barrier_tcp"} (task 0)
//   verdict, done/<k>   the attempt's ledger (attempt_ledger.h)
//   ended/<k>     "stopped" when k stopped a running program for the verdict
constexpr char kStartBarrier[] = "cohort/launch/start";
constexpr char kEndBarrier[] = "cohort/launch/end";

std::string Key(int attempt, const std::string& rest) {
  return ControlPlaneLedger::Key(attempt, rest);
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

}  // namespace

struct ClusterLauncher::Impl {
  Impl(Env* e, ClusterLaunchOptions o)
      : env(e), options(std::move(o)), events(e) {
    if (!options.output) options.output = LineWriter(stdout);
    if (!options.messages) options.messages = LineWriter(stderr);
  }

  // " (launcher:2 runs on 10.77.0.2)" for each launcher `message` names:
  // the host is the thing to check.
  std::string LauncherHosts(absl::string_view message) const {
    std::string out;
    for (int k = 0; k < options.engine.count; ++k) {
      // This launcher's own loss ("launcher:2 lost contact with the
      // coordination service") points at task 0's host, named already.
      if (k == me) continue;
      const std::string name = absl::StrCat("launcher:", k);
      for (size_t at = message.find(name); at != absl::string_view::npos;
           at = message.find(name, at + 1)) {
        const size_t end = at + name.size();
        if (end < message.size() && absl::ascii_isdigit(message[end])) continue;
        absl::StrAppend(&out, " (", name, " runs on ", options.engine.hosts[k],
                        ")");
        break;
      }
    }
    return out;
  }
  bool on_etcd() const { return !options.etcd.target.endpoints.empty(); }
  // Where the control plane is, for messages.
  std::string ControlPlane() const {
    return on_etcd() ? absl::StrCat("etcd at ", options.etcd.target.ToString())
                     : absl::StrCat("task 0's launcher at ",
                                    options.engine.rendezvous);
  }
  absl::Duration LostAfter() const {
    return options.heartbeat_timeout + options.partition_grace;
  }
  // When the programs' service fails a silent program. A ps job's program
  // cut off by a partition is waited for (its peers recover it after the
  // heal); an elastic job's members go on without it at once, and it joins
  // again after the heal, restarted.
  absl::Duration ProgramLostAfter() const {
    return options.elastic.min > 0
               ? std::max(options.heartbeat_timeout, kProgramSilence)
               : LostAfter();
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
  // With etcd: the launchers' client; refuses a prefix that holds the keys
  // of an earlier run of this job.
  absl::StatusOr<std::unique_ptr<coord::CoordinationClient>> EtcdLaunchers();
  absl::StatusOr<std::unique_ptr<coord::CoordinationClient>>
  EtcdLaunchersOnce();
  // With etcd: the coordination address of `attempt`'s programs, after
  // writing its space's job record.
  absl::StatusOr<std::string> EtcdPrograms(int attempt);
  // With etcd, at the end: this launcher is done; the last one removes the
  // job's keys.
  void EtcdDone();
  absl::StatusOr<AttemptEnd> RunAttempt(int attempt, LaunchResult& result);
  // Agrees on the attempt's addresses and services with every launcher;
  // task 0 also publishes where the job's control plane is.
  absl::StatusOr<TaskEnvironmentInputs> Rendezvous(int attempt);
  // With etcd, under --restart task: this launcher replaces a lost one in
  // the running attempt `attempt` (no barrier: the others are past it).
  absl::StatusOr<TaskEnvironmentInputs> Rejoin(int attempt);
  // The attempt's environment inputs, from what the launchers published.
  absl::StatusOr<TaskEnvironmentInputs> Inputs(
      int attempt, const std::string& etcd_programs);
  // The attempt's end as this launcher says it: task 0 the root-cause
  // summary, the others one line naming it.
  void Summarize(int attempt, const AttemptEnd& end,
                 const std::string& barrier_failure, LaunchResult& result);
  // The agent's WaitAtBarrier, cancelled for every launcher (Cancelled) when
  // Stop() is called while it waits.
  absl::Status WaitAtBarrierOrStop(const std::string& id,
                                   absl::Duration timeout);
  // With etcd under --restart task, where a launcher's loss is no job
  // error (EtcdLauncherLossWatch).
  bool LossesRecoverable() const {
    return on_etcd() && options.restart == RestartMode::kTask;
  }
  // With etcd: the launchers lost for good, by index: recorded lost
  // (EtcdLostLauncherKey) and not registered now (one that rejoined, or a
  // record written late, is not lost).
  absl::StatusOr<std::set<int>> LostLaunchers();
  // With etcd under --restart task, in place of the end barrier (which a
  // lost launcher would never reach): waits, on etcd watches, until every
  // launcher has ended `attempt` or is lost (the loss watch goes on
  // recording losses meanwhile), up to `timeout`. DeadlineExceeded naming
  // the launchers it waited for; Cancelled on Stop().
  absl::Status AwaitLaunchersEnded(int attempt, absl::Duration timeout);
  // With etcd: the checks and the claim of a launcher that replaces lost
  // launcher `me` in a running job (EtcdLaunchersOnce found its address):
  // OK and `rejoining` set when it may; Unavailable while it must wait (the
  // lost launcher's lease lives, or the others have not recorded it lost
  // yet); FailedPrecondition when it may not.
  absl::Status ClaimReplacement(const std::string& published_address);

  Env* const env;
  ClusterLaunchOptions options;
  std::vector<TaskSpec> tasks;
  int me = 0;
  int must_finish = 0;  // chief, worker and evaluator tasks
  rpc::TransportSecurity security;
  AttemptEvents events;

  absl::Mutex out_mu;

  // Task 0 only. `control`: the launchers' rendezvous (their coordination
  // service, at engine.rendezvous). `programs`: the job's control plane, the
  // programs' coordination service with the barriers on the same server,
  // kept for the whole job and reset between attempts. Two services, not
  // one: the programs' "every task" barriers and error propagation must not
  // include the launchers (and the launchers' rendezvous is what an etcd
  // control plane replaces).
  std::unique_ptr<coord::CoordinationServer> control;
  std::shared_ptr<barrier::BarrierCoordinator> coordinator;
  std::unique_ptr<coord::CoordinationServer> programs;
  // Declared after the services it watches: destroyed before them.
  std::unique_ptr<SilenceWatch> silence;

  std::shared_ptr<coord::EtcdClient> etcd;  // with an etcd control plane
  // With etcd: this launcher replaces a lost one in the running attempt
  // (ClaimReplacement); its task starts as restart `rejoin_restart`.
  bool rejoining = false;
  int rejoin_restart = 0;
  // Whether this launcher prints the attempt's summary and the job's last
  // line: task 0's, or with etcd the lowest launcher not lost (read once,
  // after the attempt's end, so every launcher agrees).
  bool reports = false;
  // With etcd, elastic jobs: this launcher's client of the programs' store
  // (the membership).
  std::unique_ptr<coord::CoordinationAgent> etcd_programs;
  std::unique_ptr<coord::CoordinationAgent> agent;
  // Elastic jobs, launchers other than task 0's: a client of the programs'
  // coordination service, where the membership lives.
  std::unique_ptr<ElasticStoreClient> elastic_client;
  // Task 0's, elastic jobs: the membership when the attempt ended.
  std::string last_membership;
  // Task 0 only: the training progress line from the programs' metrics
  // (job_page.h). Last, so destroyed before the services it reads.
  std::unique_ptr<MetricsSampler> sampler;
};

ClusterLauncher::ClusterLauncher(Env* env, ClusterLaunchOptions options)
    : impl_(std::make_unique<Impl>(env, std::move(options))) {}

ClusterLauncher::~ClusterLauncher() = default;

absl::StatusOr<LaunchResult> ClusterLauncher::Run() { return impl_->Run(); }

void ClusterLauncher::Stop() { impl_->events.Stop(); }

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
  if (options.partition_grace < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--partition-grace must not be negative, got ",
                     absl::FormatDuration(options.partition_grace)));
  }
  if (options.max_restarts < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--max-restarts must not be negative, got ", options.max_restarts));
  }
  std::map<std::string, int> jobs = options.jobs;
  if (jobs.empty()) jobs = e.jobs;
  if (jobs.empty()) jobs = {{"worker", e.count}};
  if (options.elastic.min > 0 &&
      (options.restart != RestartMode::kTask || jobs.size() != 1 ||
       jobs.count("worker") == 0 || e.count != options.elastic.max)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--elastic ", options.elastic.min, ":", options.elastic.max,
        " runs a data-parallel gang of MAX workers under --restart task: the ",
        e.engine, " engine runs ", e.count, " task(s); give it ",
        options.elastic.max, " and no --jobs other than workers (", e.source,
        ")"));
  }
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
  co.service.heartbeat_timeout = LostAfter();
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
  coordinator = std::make_shared<barrier::BarrierCoordinator>(
      env, options.barrier_timeout);
  COHORT_ASSIGN_OR_RETURN(
      programs,
      StartJobControlPlane(env, OnHost(options.bind_host, 0), security,
                           ProgramLostAfter(), tasks, coordinator,
                           options.restart == RestartMode::kTask));
  // Launchers stand for their hosts (their heartbeat interval is this
  // job's); programs heartbeat at their server's own interval (every 5 s by
  // default), so they are silent after at least kProgramSilence.
  std::vector<std::pair<coord::TaskId, std::string>> launchers, programs_at;
  for (int k = 0; k < options.engine.count; ++k) {
    launchers.push_back({{"launcher", k},
                         absl::StrCat("launcher:", k, " (", tasks[k].Name(),
                                      ") on ", options.engine.hosts[k])});
    programs_at.push_back(
        {{tasks[k].job, tasks[k].index},
         absl::StrCat(tasks[k].Name(), " on ", options.engine.hosts[k])});
  }
  silence = std::make_unique<SilenceWatch>(
      env,
      std::vector<SilenceWatch::Watched>{
          {control->service(), std::move(launchers)},
          {programs->service(), std::move(programs_at),
           std::max(options.heartbeat_timeout, kProgramSilence)}},
      options.heartbeat_timeout, LostAfter(),
      [this](const std::string& line) { Message(line); });
  silence->Start();
  coord::CoordinationService* service = programs->service();
  sampler = SampleServiceMetrics(
      env, service, tasks,
      [this](const std::string& line) {
        if (options.progress) Message(line);
      },
      options.progress_every);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<coord::CoordinationClient>>
ClusterLauncher::Impl::EtcdLaunchers() {
  if (etcd == nullptr) {
    COHORT_ASSIGN_OR_RETURN(std::unique_ptr<coord::EtcdClient> client,
                            coord::EtcdClient::Connect(options.etcd));
    etcd = std::move(client);
  }
  // Until the rendezvous deadline, as a launcher waits for task 0's: etcd
  // may come up after the launchers.
  const absl::Time deadline = absl::Now() + options.rendezvous_timeout;
  while (true) {
    absl::StatusOr<std::unique_ptr<coord::CoordinationClient>> client =
        EtcdLaunchersOnce();
    if (client.ok() ||
        !(absl::IsUnavailable(client.status()) ||
          absl::IsDeadlineExceeded(client.status())) ||
        absl::Now() >= deadline) {
      return client;
    }
    absl::SleepFor(absl::Seconds(1));
  }
}

absl::StatusOr<std::unique_ptr<coord::CoordinationClient>>
ClusterLauncher::Impl::EtcdLaunchersOnce() {
  // First the job record: another job's is refused before anything else.
  coord::EtcdCoordinationOptions o;
  o.space = "launchers/";
  o.jobs = {{"launcher", options.engine.count}};
  o.job_id = coord::JobIdOf(options.job_token);
  o.heartbeat_timeout = LostAfter();
  // Under --restart task a job goes on without a lost launcher (an elastic
  // job drops its task; otherwise the task waits for a launcher to replace
  // it): the loss is no job error, and every launcher follows the others'
  // leases itself (EtcdLauncherLossWatch).
  o.recoverable = options.restart == RestartMode::kTask;
  COHORT_ASSIGN_OR_RETURN(std::unique_ptr<coord::CoordinationClient> client,
                          coord::NewEtcdCoordinationClient(etcd, std::move(o)));
  // A run whose launchers all ended removed its keys; one that failed or
  // was cut short left them, and this run would read its verdicts and
  // addresses. This launcher's own address of attempt 0 is there only if
  // an earlier run wrote it.
  COHORT_ASSIGN_OR_RETURN(std::vector<coord::EtcdKeyValue> ended,
                          etcd->List("launchers/ended/"));
  COHORT_ASSIGN_OR_RETURN(std::optional<coord::EtcdKeyValue> failed,
                          etcd->Get("launchers/status/error"));
  COHORT_ASSIGN_OR_RETURN(
      std::optional<coord::EtcdKeyValue> mine,
      etcd->Get(absl::StrCat("launchers/kv/", Key(0, "address/"), me)));
  if (mine.has_value() && ended.empty() && !failed.has_value() &&
      options.restart == RestartMode::kTask) {
    // This launcher's address is there and the run may go on: it may
    // replace a lost launcher.
    COHORT_ASSIGN_OR_RETURN(coord::EtcdTaskLosses::Look look,
                            coord::EtcdTaskLosses(etcd, "launchers/").Read());
    const std::string self = absl::StrCat("launcher:", me);
    if (std::any_of(look.present.begin(), look.present.end(),
                    [&](const std::string& t) { return t != self; })) {
      COHORT_RETURN_IF_ERROR(ClaimReplacement(mine->value));
      return client;
    }
  }
  if (!ended.empty() || failed.has_value() || mine.has_value()) {
    COHORT_ASSIGN_OR_RETURN(coord::EtcdTaskLosses::Look look,
                            coord::EtcdTaskLosses(etcd, "launchers/").Read());
    if (!look.present.empty()) {
      // A run of this job is going on, or was killed less than a lease's
      // TTL ago: either way not one this launcher joins (only --restart
      // task takes a launcher that replaces a lost one).
      return absl::FailedPreconditionError(absl::StrCat(
          "a run of this job under etcd prefix ",
          options.etcd.target.ToString(), " is going on, or stopped less than ",
          absl::FormatDuration(LostAfter()), " ago (", look.present.front(),
          " is registered), and launcher:", me,
          " cannot join it: only --restart task takes a launcher that "
          "replaces a lost one; check that engine task ",
          me,
          " was not started twice, or, once that run has stopped, remove its "
          "keys (etcdctl del --prefix ",
          options.etcd.target.prefix, ")"));
    }
    return absl::FailedPreconditionError(absl::StrCat(
        "etcd prefix ", options.etcd.target.ToString(),
        " holds the keys of a run of this job that has ",
        failed.has_value() ? "failed"
        : !ended.empty()   ? "ended"
                           : "stopped without removing them",
        "; remove them (etcdctl del --prefix ", options.etcd.target.prefix,
        ") or give this run its own prefix"));
  }
  return client;
}

absl::StatusOr<std::string> ClusterLauncher::Impl::EtcdPrograms(int attempt) {
  coord::EtcdCoordinationOptions o;
  o.space = absl::StrCat("programs/", attempt, "/");
  for (const TaskSpec& t : tasks)
    o.jobs[t.job] = std::max(o.jobs[t.job], t.index + 1);
  o.job_id = coord::JobIdOf(options.job_token);
  o.heartbeat_timeout = std::max(options.heartbeat_timeout, kProgramSilence);
  // As the built-in service under --restart task: a program's loss is its
  // own launcher's to handle, not every program's error.
  o.recoverable = options.restart == RestartMode::kTask;
  COHORT_ASSIGN_OR_RETURN(std::unique_ptr<coord::CoordinationClient> client,
                          coord::NewEtcdCoordinationClient(etcd, std::move(o)));
  if (options.elastic.min > 0) {
    // The membership lives in the programs' store, where they read it: this
    // launcher's client of it makes key-value calls only (it never
    // registers), each short, as ElasticStoreClient's.
    coord::CoordinationAgentOptions ao;
    ao.task = {"launcher", me};
    ao.env = env;
    ao.rpc_timeout = absl::Seconds(2);
    ao.heartbeat_timeout = absl::Seconds(1);  // its retry window
    COHORT_ASSIGN_OR_RETURN(
        etcd_programs,
        coord::CoordinationAgent::Create(std::move(ao), std::move(client)));
    // Every launcher writes generation 0 before the start barrier, so no
    // program starts before it exists; the first writer wins.
    absl::Status first =
        WriteFirstGeneration(coord::ElasticStoreOf(etcd_programs.get()), tasks);
    if (!first.ok() && !absl::IsAlreadyExists(first)) return first;
  }
  return absl::StrCat(options.etcd.target.ToString(), "/programs/", attempt);
}

void ClusterLauncher::Impl::EtcdDone() {
  absl::Status s =
      etcd->Put(absl::StrCat("launchers/ended/", me), options.engine.hosts[me])
          .status();
  // Launchers lost for good never end: they count as ended.
  std::set<int> ended;
  absl::StatusOr<std::vector<coord::EtcdKeyValue>> keys =
      s.ok() ? etcd->List("launchers/ended/")
             : absl::StatusOr<std::vector<coord::EtcdKeyValue>>(s);
  absl::StatusOr<std::set<int>> lost =
      keys.ok() ? LostLaunchers() : absl::StatusOr<std::set<int>>(s);
  s = keys.ok() ? lost.status() : keys.status();
  if (s.ok()) {
    ended = *lost;
    for (const coord::EtcdKeyValue& kv : *keys) {
      int k = -1;
      if (absl::SimpleAtoi(kv.key.substr(kv.key.rfind('/') + 1), &k) &&
          k >= 0 && k < options.engine.count) {
        ended.insert(k);
      }
    }
  }
  if (s.ok() && static_cast<int>(ended.size()) == options.engine.count) {
    // The job's own directories only: another job may live under a longer
    // prefix below this one (/a and /a/b).
    s = etcd->DeleteDir("launchers/").status();
    if (s.ok()) s = etcd->DeleteDir("programs/").status();
  }
  if (!s.ok()) {
    Message(absl::StrCat(
        "could not record this launcher's end in etcd or remove the job's "
        "keys (",
        s.message(), "); the next run under ", options.etcd.target.ToString(),
        " will be refused until they are removed (etcdctl del --prefix ",
        options.etcd.target.prefix, ")"));
  }
}

absl::Status ClusterLauncher::Impl::ClaimReplacement(
    const std::string& published_address) {
  const std::string self = absl::StrCat("launcher:", me);
  const std::string prefix = options.etcd.target.ToString();
  if (options.elastic.min > 0 || options.max_restarts == 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the job under etcd prefix ", prefix, " is running, and ", self,
        " cannot rejoin it: ",
        options.elastic.min > 0
            ? "an elastic job goes on without a lost launcher's task"
            : "it runs with --max-restarts 0, so a lost task is not "
              "replaced"));
  }
  // The others' TF_CONFIG names the lost launcher's address: its task must
  // come back there.
  absl::StatusOr<std::pair<std::string, int>> published =
      SplitHostPort(published_address, "the published address");
  if (!published.ok() || published->first != options.engine.hosts[me]) {
    return absl::FailedPreconditionError(
        absl::StrCat(self, " of the job under etcd prefix ", prefix,
                     " ran its task at ", published_address,
                     ", which the other tasks know; this launcher runs "
                     "on ",
                     options.engine.hosts[me],
                     ": a replacement must run on the lost launcher's host"));
  }
  COHORT_ASSIGN_OR_RETURN(
      std::optional<coord::EtcdKeyValue> verdict,
      etcd->Get(absl::StrCat("launchers/kv/", Key(0, "verdict"))));
  if (verdict.has_value()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the job under etcd prefix ", prefix,
        " has its verdict already; no launcher rejoins it (remove its keys "
        "once its launchers have ended: etcdctl del --prefix ",
        options.etcd.target.prefix, ")"));
  }
  // Only a launcher the others recorded lost is replaced, once: the claim
  // deletes the record, and of two replacements one deletes it.
  COHORT_ASSIGN_OR_RETURN(coord::EtcdTaskLosses::Look look,
                          coord::EtcdTaskLosses(etcd, "launchers/").Read());
  COHORT_ASSIGN_OR_RETURN(std::optional<coord::EtcdKeyValue> recorded,
                          etcd->Get(EtcdLostLauncherKey(me)));
  if (std::count(look.present.begin(), look.present.end(), self) > 0 ||
      !recorded.has_value()) {
    Message(absl::StrCat("the job under etcd prefix ", prefix,
                         " is running; this launcher "
                         "replaces ",
                         self,
                         " once the others have recorded it lost (its "
                         "lease lives up to ",
                         absl::FormatDuration(LostAfter()), ")"));
    return absl::UnavailableError(absl::StrCat(
        self, " of the job under etcd prefix ", prefix,
        " is still registered, or not yet recorded lost by the others: a "
        "launcher replacing it waits for that; check that engine task ",
        me, " was not started twice"));
  }
  const std::string count_key = absl::StrCat("launchers/replaced/", me);
  COHORT_ASSIGN_OR_RETURN(std::optional<coord::EtcdKeyValue> count,
                          etcd->Get(count_key));
  int replaced = 0;
  if (count.has_value() && !absl::SimpleAtoi(count->value, &replaced)) {
    replaced = options.max_restarts;  // unreadable: no replacement left
  }
  if (replaced >= options.max_restarts) {
    return absl::FailedPreconditionError(absl::StrCat(
        self, " of the job under etcd prefix ", prefix, " was replaced ",
        replaced, " time(s) already, and the job runs with --max-restarts ",
        options.max_restarts, ": no launcher rejoins it for that task"));
  }
  COHORT_ASSIGN_OR_RETURN(int64_t claimed,
                          etcd->Delete(EtcdLostLauncherKey(me)));
  if (claimed == 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "another launcher replaced ", self, " of the job under etcd prefix ",
        prefix, " first; check that engine task ", me,
        " was not started twice"));
  }
  COHORT_RETURN_IF_ERROR(
      etcd->Put(count_key, absl::StrCat(replaced + 1)).status());
  // A launcher that was only cut off from etcd (not dead) stops its task
  // once its own heartbeats have failed for as long as its lease lived,
  // and kills it stop_grace later: its task must be gone before this one
  // starts it again.
  const absl::Duration fence = options.heartbeat_timeout + options.stop_grace;
  Message(absl::StrCat("replacing the lost ", self, ": waiting ",
                       absl::FormatDuration(fence), " so that, were ", self,
                       " only cut off, its task has stopped"));
  env->SleepFor(fence);
  rejoining = true;
  rejoin_restart = replaced + 1;
  return absl::OkStatus();
}

absl::StatusOr<std::set<int>> ClusterLauncher::Impl::LostLaunchers() {
  COHORT_ASSIGN_OR_RETURN(std::vector<coord::EtcdKeyValue> recorded,
                          etcd->List(kEtcdLostLaunchersDir));
  if (recorded.empty()) return std::set<int>();
  COHORT_ASSIGN_OR_RETURN(coord::EtcdTaskLosses::Look look,
                          coord::EtcdTaskLosses(etcd, "launchers/").Read());
  std::set<int> lost;
  for (const coord::EtcdKeyValue& kv : recorded) {
    int k = -1;
    if (!absl::SimpleAtoi(kv.key.substr(kv.key.rfind('/') + 1), &k) || k < 0 ||
        k >= options.engine.count) {
      continue;  // not a launcher of this job
    }
    if (std::count(look.present.begin(), look.present.end(),
                   absl::StrCat("launcher:", k)) == 0) {
      lost.insert(k);
    }
  }
  return lost;
}

absl::Status ClusterLauncher::Impl::AwaitLaunchersEnded(
    int attempt, absl::Duration timeout) {
  const absl::Time deadline = env->Now() + timeout;
  std::vector<int> waiting;
  while (!events.stop_pending()) {
    coord::EtcdTaskLosses status(etcd, "launchers/");
    COHORT_ASSIGN_OR_RETURN(coord::EtcdTaskLosses::Look look, status.Read());
    COHORT_ASSIGN_OR_RETURN(std::set<int> lost, LostLaunchers());
    using KeyValues = std::vector<std::pair<std::string, std::string>>;
    COHORT_ASSIGN_OR_RETURN(KeyValues ended,
                            agent->GetKeyValueDir(Key(attempt, "ended")));
    std::set<int> done = lost;
    for (const auto& [key, value] : ended) {
      int k = -1;
      if (absl::SimpleAtoi(key.substr(key.rfind('/') + 1), &k)) done.insert(k);
    }
    waiting.clear();
    for (int k = 0; k < options.engine.count; ++k) {
      if (!done.count(k)) waiting.push_back(k);
    }
    if (waiting.empty()) return absl::OkStatus();
    if (env->Now() >= deadline) break;
    // Any change under launchers/ (an end recorded, a loss, a lease gone)
    // wakes this; at least every second it looks again.
    absl::Status changed =
        etcd->Watch("launchers/", look.revision,
                    std::min(absl::Seconds(1), deadline - env->Now()), nullptr)
            .status();
    if (!changed.ok() && !absl::IsDeadlineExceeded(changed) &&
        !absl::IsFailedPrecondition(changed)) {
      return changed;
    }
  }
  if (events.stop_pending()) {
    return absl::CancelledError(absl::StrCat(
        "interrupted while waiting for every launcher at the end of attempt ",
        attempt, " (SIGINT or SIGTERM)"));
  }
  return absl::DeadlineExceededError(
      absl::StrCat("launcher(s) ",
                   absl::StrJoin(waiting, ", ",
                                 [](std::string* out, int k) {
                                   absl::StrAppend(out, "launcher:", k);
                                 }),
                   " neither ended attempt ", attempt, " nor were lost within ",
                   absl::FormatDuration(timeout)));
}

absl::Status ClusterLauncher::Impl::Connect() {
  std::unique_ptr<coord::CoordinationClient> client;
  if (on_etcd()) {
    COHORT_ASSIGN_OR_RETURN(client, EtcdLaunchers());
  } else {
    COHORT_ASSIGN_OR_RETURN(client, coord::NewCoordinationClient(
                                        absl::StrCat(coord::kFramedTargetPrefix,
                                                     options.engine.rendezvous),
                                        security));
  }
  coord::CoordinationAgentOptions ao;
  ao.task = {"launcher", me};
  // Contact lost for heartbeat_timeout is a partition this launcher may
  // still survive; for LostAfter() it is the control plane lost.
  ao.heartbeat_timeout = LostAfter();
  ao.heartbeat_interval = options.heartbeat_timeout / 2;
  ao.register_timeout = options.rendezvous_timeout;
  ao.shutdown_timeout = options.rendezvous_timeout;
  ao.env = env;
  ao.error_callback = [this](const absl::Status& error) {
    events.ControlPlaneLost(error);
  };
  COHORT_ASSIGN_OR_RETURN(agent, coord::CoordinationAgent::Create(
                                     std::move(ao), std::move(client)));
  absl::Status s = agent->Connect();
  if (on_etcd() && (absl::IsDeadlineExceeded(s) || absl::IsUnavailable(s))) {
    return absl::DeadlineExceededError(absl::StrCat(
        "launcher:", me, " could not register in etcd at ",
        options.etcd.target.ToString(), " within ",
        absl::FormatDuration(options.rendezvous_timeout),
        "; check that a majority of the etcd members are up and reachable "
        "from this host (etcdctl endpoint health). Last error: ",
        s.message()));
  }
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
  return Annotate(
      s, absl::StrCat("registering launcher:", me, " with ", ControlPlane()));
}

absl::Status ClusterLauncher::Impl::WaitAtBarrierOrStop(
    const std::string& id, absl::Duration timeout) {
  std::atomic<bool> finished{false};
  absl::Status result;
  std::thread waiter([&] {
    result = agent->WaitAtBarrier(id, timeout);
    finished = true;
    events.Changed();  // wakes AwaitStopOr
  });
  const bool stopped = events.AwaitStopOr(finished);
  if (stopped) agent->CancelBarrier(id).IgnoreError();
  waiter.join();
  if (stopped && !result.ok()) {
    return absl::CancelledError(absl::StrCat("interrupted while waiting at ",
                                             id, " (SIGINT or SIGTERM)"));
  }
  return result;
}

absl::StatusOr<TaskEnvironmentInputs> ClusterLauncher::Impl::Rendezvous(
    int attempt) {
  const EngineTask& e = options.engine;
  COHORT_ASSIGN_OR_RETURN(int port, rpc::PickFreePort(options.bind_host));
  COHORT_RETURN_IF_ERROR(agent->InsertKeyValue(
      Key(attempt, absl::StrCat("address/", me)), OnHost(e.hosts[me], port)));
  if (me == 0 && options.elastic.min > 0 && !on_etcd()) {
    // Before any program starts: they join generation 0 (with etcd:
    // EtcdPrograms).
    COHORT_RETURN_IF_ERROR(WriteFirstGeneration(
        coord::ElasticStoreOf(programs->service()), tasks));
  }
  std::string etcd_programs;
  if (on_etcd()) {
    // Before the barrier: no program starts before its space exists.
    COHORT_ASSIGN_OR_RETURN(etcd_programs, EtcdPrograms(attempt));
  }
  if (me == 0 && !on_etcd()) {
    const barrier::BarrierEndpoints at = barrier::BarrierEndpointsOf(*programs);
    const Json services = {
        {"coordination", OnHost(e.hosts[0], programs->port())},
        {"barrier", OnHost(e.hosts[0], PortOf(at.grpc))},
        {"barrier_tcp",
         at.tcp.empty() ? std::string() : OnHost(e.hosts[0], PortOf(at.tcp))}};
    COHORT_RETURN_IF_ERROR(
        agent->InsertKeyValue(Key(attempt, "services"), JsonDump(services)));
  }
  absl::Status at_start =
      WaitAtBarrierOrStop(kStartBarrier, options.rendezvous_timeout);
  if (!at_start.ok() && !absl::IsCancelled(at_start)) {
    return Annotate(at_start, absl::StrCat("waiting for every launcher at the "
                                           "start of attempt ",
                                           attempt));
  }
  COHORT_RETURN_IF_ERROR(at_start);
  return Inputs(attempt, etcd_programs);
}

absl::StatusOr<TaskEnvironmentInputs> ClusterLauncher::Impl::Rejoin(
    int attempt) {
  COHORT_ASSIGN_OR_RETURN(const std::string etcd_programs,
                          EtcdPrograms(attempt));
  Message(absl::StrCat(
      "rejoined attempt ", attempt, " of the running job in place of a lost ",
      "launcher:", me, ": ", tasks[me].Name(),
      " starts as a restarted task (restart ", rejoin_restart, " of ",
      options.max_restarts,
      "; replacements count as restarts, restarts its lost launcher made "
      "alone are not known here)"));
  return Inputs(attempt, etcd_programs);
}

absl::StatusOr<TaskEnvironmentInputs> ClusterLauncher::Impl::Inputs(
    int attempt, const std::string& etcd_programs) {
  const EngineTask& e = options.engine;
  TaskEnvironmentInputs inputs;
  inputs.tasks = tasks;
  for (int k = 0; k < e.count; ++k) {
    COHORT_ASSIGN_OR_RETURN(
        std::string address,
        agent->TryGetKeyValue(Key(attempt, absl::StrCat("address/", k))));
    inputs.addresses.push_back(address);
  }
  Json services = Json::object();
  if (on_etcd()) {
    services["coordination"] = etcd_programs;
  } else {
    COHORT_ASSIGN_OR_RETURN(std::string services_text,
                            agent->TryGetKeyValue(Key(attempt, "services")));
    COHORT_ASSIGN_OR_RETURN(services,
                            ParseJson(services_text, "the services record"));
  }
  inputs.task = me;
  inputs.attempt = attempt;
  inputs.job_token = security.job_token;
  inputs.coordination_address = services.value("coordination", "");
  inputs.heartbeat_timeout =
      std::max(options.heartbeat_timeout, kProgramSilence);
  inputs.barrier_address = services.value("barrier", "");
  inputs.barrier_tcp_address = services.value("barrier_tcp", "");
  inputs.barrier_timeout = options.barrier_timeout;
  inputs.extra_env = options.extra_env;
  if (on_etcd()) {
    for (std::string& v :
         coord::EtcdSecurityEnv(options.etcd, options.etcd_credentials_file)) {
      inputs.extra_env.push_back(std::move(v));
    }
  }
  return inputs;
}

absl::StatusOr<AttemptEnd> ClusterLauncher::Impl::RunAttempt(
    int attempt, LaunchResult& result) {
  const EngineTask& e = options.engine;
  const TaskSpec& spec = tasks[me];
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
  if (coordinator != nullptr) {
    const int gang_size = static_cast<int>(
        std::count_if(tasks.begin(), tasks.end(),
                      [](const TaskSpec& t) { return t.partition_id >= 0; }));
    COHORT_RETURN_IF_ERROR(coordinator->OpenGang(kStageId, attempt, gang_size));
    close_gang.coordinator = coordinator.get();
  }
  absl::StatusOr<TaskEnvironmentInputs> inputs =
      rejoining ? Rejoin(attempt) : Rendezvous(attempt);
  if (absl::IsCancelled(inputs.status())) {
    // A launcher (this one or another) was interrupted before the start.
    AttemptEnd end;
    end.outcome = AttemptEnd::Outcome::kStopped;
    result.exit_code = 130;
    result.failure_summary = absl::StrCat(
        "attempt ", attempt,
        " interrupted before it started: ", inputs.status().message());
    Message(result.failure_summary);
    return end;
  }
  if (!inputs.ok()) return inputs.status();

  AttemptPlan plan;
  plan.attempt = attempt;
  plan.job_size = e.count;
  plan.host = e.hosts[me];
  plan.log_dir = result.log_dir;
  plan.announce = options.progress;
  plan.stop_grace = options.stop_grace;
  if (options.restart == RestartMode::kTask) {
    plan.task_restarts = options.max_restarts;
    plan.service_silence = ProgramLostAfter();
    // With etcd a lost launcher's task waits for a launcher to replace it
    // (the engine restarting it: a Kubernetes pod), as long as a launcher
    // waits for the others at the start; only restarts can replace it.
    if (on_etcd() && options.max_restarts > 0) {
      plan.replacement_wait = options.rendezvous_timeout;
    }
  }
  plan.messages = [this](const std::string& line) { Message(line); };
  std::string barrier_failure;
  if (coordinator != nullptr) {
    plan.on_failure =
        GangFailureHook(coordinator.get(), attempt, &barrier_failure);
  }
  if (options.elastic.min > 0) {
    coord::ElasticStore store;
    if (on_etcd()) {
      store = coord::ElasticStoreOf(etcd_programs.get());
    } else if (me == 0) {
      store = coord::ElasticStoreOf(programs->service());
    } else {
      if (elastic_client == nullptr) {
        elastic_client = std::make_unique<ElasticStoreClient>(
            env, inputs->coordination_address, security,
            coord::TaskId{"launcher", me});
      }
      store = elastic_client->Store();
    }
    // With etcd no launcher is special: each enforces the minimum (the
    // first failure recorded is the attempt's).
    PlanElastic(options.elastic, options.elastic_wait, std::move(store),
                /*enforce_minimum=*/me == 0 || on_etcd(), tasks,
                inputs->extra_env, plan);
  }
  plan.tasks.push_back(PlanTask(
      *std::move(inputs), options.command, result.log_dir,
      options.summary_lines, [this](const std::string& line) { Output(line); },
      [this](const std::string& line) { Message(line); }));
  if (rejoining) {
    plan.tasks.back().first_restart = rejoin_restart;
    rejoining = false;
  }

  ControlPlaneLedger::Options lo;
  lo.agent = agent.get();
  lo.attempt = attempt;
  lo.num_tasks = e.count;
  lo.must_finish = must_finish;
  lo.tail_lines = options.summary_lines;
  lo.changed = [this] { events.Changed(); };
  AttemptEnd end;
  // Until the attempt's end is agreed: a launcher lost while the others
  // wait for it there is recorded lost too.
  std::optional<EtcdLauncherLossWatch> launcher_losses;
  if (LossesRecoverable()) {
    launcher_losses.emplace(
        etcd, me, tasks, e.hosts, attempt, LostAfter(),
        // A task that already finished is no orphan.
        [this, attempt](int k) {
          return agent->TryGetKeyValue(Key(attempt, absl::StrCat("done/", k)))
              .ok();
        },
        env, &events);
  }
  {
    ControlPlaneLedger ledger(std::move(lo));
    std::optional<TaskFailureWatch> watch;
    if (programs != nullptr) {
      watch.emplace(programs->service(), tasks, e.hosts, attempt, &events);
    }

    end = AttemptSupervisor(env, &events, &ledger, std::move(plan)).Run();
  }
  // The attempt's last progress line, before anything says how it ended
  // (and before the reset below clears the metrics).
  if (sampler != nullptr) sampler->EndProgress();

  for (const std::string& line :
       RestartSummaryLines(attempt, end.restarts, options.max_restarts)) {
    Message(line);
  }
  if (end.outcome == AttemptEnd::Outcome::kLost) {
    result.exit_code = 1;
    result.failure_summary = absl::StrCat(
        "the launchers lost each other (control plane at ",
        on_etcd() ? absl::StrCat(options.etcd.target.ToString(), ", in etcd")
                  : absl::StrCat(e.rendezvous, ", served by engine task 0"),
        "): ", end.lost.message(), LauncherHosts(end.lost.message()));
    Message(result.failure_summary);
    Message(absl::StrCat("stopped ", spec.Name(), "; the job failed"));
    return end;
  }
  const bool succeeded = end.outcome == AttemptEnd::Outcome::kSucceeded;
  agent
      ->InsertKeyValue(
          Key(attempt, absl::StrCat("ended/", me)),
          end.stopped_others > 0 && !succeeded ? "stopped" : "exited", false)
      .IgnoreError();
  const absl::Duration end_wait =
      options.rendezvous_timeout + options.stop_grace;
  absl::Status at_end = LossesRecoverable()
                            ? AwaitLaunchersEnded(attempt, end_wait)
                            : WaitAtBarrierOrStop(kEndBarrier, end_wait);
  reports = me == 0;
  if (on_etcd()) {
    // The lowest launcher not lost; every one, should etcd not answer
    // (two summaries rather than none).
    absl::StatusOr<std::set<int>> lost = LostLaunchers();
    int lowest = 0;
    while (lost.ok() && lost->count(lowest)) ++lowest;
    reports = !lost.ok() || lowest == me;
  }
  if (options.elastic.min > 0 && (programs != nullptr || on_etcd())) {
    // Read before the reset below: tasks dropped by other launchers are
    // known from the membership.
    absl::StatusOr<coord::Membership> last = coord::LatestMembership(
        on_etcd() ? coord::ElasticStoreOf(etcd_programs.get())
                  : coord::ElasticStoreOf(programs->service()));
    last_membership = last.ok() ? last->ToString() : "an unreadable membership";
  }
  if (programs != nullptr) {
    // The next attempt's programs register afresh: this attempt's states,
    // errors, barriers and keys end here (its incarnations are refused).
    programs->service()
        ->ResetForNextAttempt({}, absl::StrCat("attempt ", attempt, " ended"))
        .IgnoreError();  // FailedPrecondition only after Stop
  }
  if (!at_end.ok()) {
    return Annotate(at_end, absl::StrCat("waiting for every launcher at the "
                                         "end of attempt ",
                                         attempt));
  }
  if (!succeeded) Summarize(attempt, end, barrier_failure, result);
  return end;
}

void ClusterLauncher::Impl::Summarize(int attempt, const AttemptEnd& end,
                                      const std::string& barrier_failure,
                                      LaunchResult& result) {
  const EngineTask& e = options.engine;
  const FailureRecord& r = end.failure;
  result.exit_code = r.code;
  if (!reports) {
    result.failure_summary = absl::StrCat(
        "attempt ", attempt, " failed: task ", r.task, " (", r.where, ") ",
        r.reason, "; ",
        on_etcd() ? "the lowest launcher not lost" : "task 0's launcher",
        " prints the summary");
    Message(absl::StrCat(result.failure_summary,
                         end.stopped_running > 0
                             ? absl::StrCat("; stopped ", tasks[me].Name())
                             : ""));
    return;
  }
  // The log is on the failed task's host, not necessarily this one.
  FailureRecord where_logged = r;
  where_logged.log_path =
      r.log_path.empty()
          ? absl::StrCat("its log on ", e.hosts[r.job_task])
          : absl::StrCat(r.log_path, " on ", e.hosts[r.job_task]);
  int stopped_others = 0;
  absl::StatusOr<std::vector<std::pair<std::string, std::string>>> ended =
      agent->GetKeyValueDir(Key(attempt, "ended"));
  if (ended.ok()) {
    stopped_others = static_cast<int>(
        std::count_if(ended->begin(), ended->end(),
                      [](const auto& kv) { return kv.second == "stopped"; }));
  }
  const std::vector<std::string> lines = FailureSummaryLines(
      attempt, where_logged, barrier_failure, stopped_others);
  result.failure_summary = absl::StrJoin(lines, "\n");
  for (const std::string& l : lines) Message(l);
}

absl::StatusOr<LaunchResult> ClusterLauncher::Impl::Run() {
  COHORT_RETURN_IF_ERROR(Validate());
  LaunchResult result;
  COHORT_ASSIGN_OR_RETURN(result.log_dir, PrepareLogDir(options.log_dir));
  security.job_token = options.job_token;
  if (me == 0 && !on_etcd()) COHORT_RETURN_IF_ERROR(StartControlPlane());
  COHORT_RETURN_IF_ERROR(Connect());
  if (options.progress) {
    Message(absl::StrCat("joined the job (control plane: ", ControlPlane(),
                         ") as ", tasks[me].Name(), " (", options.engine.source,
                         ")"));
  }

  std::unique_ptr<RestartPolicy> policy =
      MakeRestartPolicy(options.restart, options.max_restarts);
  for (int attempt = 0;; ++attempt) {
    result.attempts = attempt + 1;
    if (sampler != nullptr) sampler->StartProgress();
    absl::StatusOr<AttemptEnd> ran = RunAttempt(attempt, result);
    if (!ran.ok()) {
      // Fail every other launcher now rather than at their deadlines.
      agent
          ->ReportError(Annotate(
              ran.status(),
              absl::StrCat("launcher:", me, " on ", options.engine.hosts[me])))
          .IgnoreError();
      const std::string hosts = LauncherHosts(ran.status().message());
      if (hosts.empty()) return ran.status();
      return absl::Status(ran.status().code(),
                          absl::StrCat(ran.status().message(), hosts));
    }
    if (ran->outcome == AttemptEnd::Outcome::kLost) return result;
    const RestartPolicy::Decision decision = policy->Decide(*ran);
    if (ran->outcome == AttemptEnd::Outcome::kSucceeded) {
      result.succeeded = true;
      result.exit_code = 0;
      result.failure_summary.clear();
      if (reports && options.elastic.min > 0) {
        Message(absl::StrCat("job succeeded: attempt ", attempt,
                             " finished; the elastic job ended with ",
                             last_membership));
      } else if (reports) {
        Message(SuccessLine(tasks.size(), attempt, *ran));
      }
    }
    if (ran->outcome == AttemptEnd::Outcome::kStopped) result.exit_code = 130;
    if (decision == RestartPolicy::Decision::kGiveUp) {
      Message(absl::StrCat(policy->GiveUpMessage(attempt + 1), "; logs in ",
                           result.log_dir));
    }
    if (decision != RestartPolicy::Decision::kRestart) break;
    if (me == 0) Message(policy->RestartMessage(attempt + 1));
  }
  // Every launcher waits at the service's shutdown barrier, so task 0's
  // control plane stays up until the last launcher knows the outcome.
  agent->Shutdown().IgnoreError();
  agent.reset();
  if (on_etcd()) EtcdDone();
  silence.reset();
  sampler.reset();
  if (programs != nullptr) programs->Stop();
  if (control != nullptr) control->Stop();
  return result;
}

}  // namespace cohort::launch
