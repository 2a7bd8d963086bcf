#include "cohort/launch/launcher.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <optional>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cohort/barrier/barrier_control_plane.h"
#include "cohort/barrier/barrier_coordinator.h"
#include "cohort/base/status.h"
#include "cohort/coord/coordination_rpc_handler.h"
#include "cohort/coord/coordination_server.h"
#include "cohort/coord/job_status_json.h"
#include "cohort/coord/task_metrics.h"
#include "cohort/launch/attempt_supervisor.h"
#include "cohort/launch/job_board.h"
#include "cohort/launch/job_page.h"
#include "cohort/launch/launch_support.h"
#include "cohort/launch/task_failure_watch.h"
#include "cohort/rpc/socket.h"
#include "cohort/rpc/transport.h"

namespace cohort::launch {
namespace {

using barrier::BarrierCoordinator;
using barrier::GangSnapshot;

// How often the progress line may change.
constexpr absl::Duration kProgressInterval = absl::Seconds(1);
// What the page shows of a task's log.
constexpr size_t kLogTailLines = 200;
constexpr size_t kLogTailBytes = 256 << 10;

}  // namespace

struct Launcher::Impl {
  Impl(Env* e, LaunchOptions o) : env(e), options(std::move(o)), events(e) {
    if (!options.output) options.output = LineWriter(stdout);
    if (!options.messages) options.messages = LineWriter(stderr);
  }

  void Message(const std::string& line) {
    if (!options.quiet) Summary(line);
  }
  // What --quiet keeps: the training progress line and how the job ended.
  void Summary(const std::string& line) {
    absl::MutexLock lock(&out_mu);
    options.messages("[cohort] " + line);
  }
  void Output(const std::string& line) {
    if (options.quiet) return;  // the task's log has it
    absl::MutexLock lock(&out_mu);
    options.output(line);
  }

  absl::StatusOr<LaunchResult> Run();
  absl::Status Validate();
  // The job's one control plane: a coordination service with the barriers
  // on the same server, kept for the whole job (reset between attempts).
  absl::Status StartControlPlane(const std::string& log_dir);
  absl::StatusOr<AttemptEnd> RunAttempt(int attempt, LaunchResult& result);
  // The root-cause summary of a failed attempt, into `result` and messages.
  void Summarize(int attempt, const AttemptEnd& end,
                 const std::string& barrier_failure, LaunchResult& result);

  Env* const env;
  LaunchOptions options;
  std::vector<TaskSpec> tasks;
  int gang_size = 0;
  int must_finish = 0;  // chief, worker and evaluator tasks
  AttemptEvents events;

  // The job's page and what it shows beyond the coordination service.
  absl::Status StartPage();
  // The gang's barrier (BarrierTaskContext.barrier(), on the barrier
  // coordinator rather than the service) while tasks wait at it, in
  // coord::JobStatusJson's barrier shape.
  std::optional<Json> GangBarrierJson();
  std::atomic<int> current_attempt{0};
  JobBoard board;

  absl::Mutex mu;
  std::string barrier_address ABSL_GUARDED_BY(mu);
  std::string page_url ABSL_GUARDED_BY(mu);
  // Serialises the output and message sinks.
  absl::Mutex out_mu;

  rpc::TransportSecurity security;
  std::shared_ptr<BarrierCoordinator> coordinator;
  std::unique_ptr<coord::CoordinationServer> control;
  barrier::BarrierEndpoints barriers;

  // Last, so destroyed first, on every path out of Run(): their threads
  // read the control plane, the board and the sinks above.
  std::unique_ptr<MetricsSampler> sampler;
  std::unique_ptr<JobPage> page;
};

Launcher::Launcher(Env* env, LaunchOptions options)
    : impl_(std::make_unique<Impl>(env, std::move(options))) {}

Launcher::~Launcher() = default;

absl::StatusOr<LaunchResult> Launcher::Run() { return impl_->Run(); }

void Launcher::Stop() { impl_->events.Stop(); }

std::string Launcher::barrier_address() const {
  absl::MutexLock lock(&impl_->mu);
  return impl_->barrier_address;
}

std::string Launcher::page_url() const {
  absl::MutexLock lock(&impl_->mu);
  return impl_->page_url;
}

std::optional<Json> Launcher::Impl::GangBarrierJson() {
  const int attempt = current_attempt.load();
  std::optional<GangSnapshot> gang = coordinator->Snapshot(kStageId, attempt);
  if (!gang.has_value() || gang->waiting.empty()) return std::nullopt;
  Json b;
  b["id"] = absl::StrCat("gang barrier (attempt ", attempt, ")");
  b["counter"] = gang->epoch;
  b["initiator"] = "";
  b["arrived"] = Json::array();
  b["missing"] = Json::array();
  for (const TaskSpec& t : tasks) {
    if (t.partition_id < 0) continue;
    const bool waiting = std::binary_search(
        gang->waiting.begin(), gang->waiting.end(), t.partition_id);
    b[waiting ? "arrived" : "missing"].push_back(t.Name());
  }
  b["remaining_ms"] = Json();  // --barrier-timeout counts per task
  return b;
}

absl::Status Launcher::Impl::StartPage() {
  coord::CoordinationService* service = control->service();
  sampler = SampleServiceMetrics(
      env, service, tasks,
      [this](const std::string& line) {
        if (options.progress) Summary(line);
      },
      options.progress_every);
  if (options.ui.empty()) return absl::OkStatus();
  JobPageSource source;
  source.status = [this, service]() -> absl::StatusOr<Json> {
    coord::GetJobStatusResponse status;
    coord::ToProto(service->GetJobStatus(), &status);
    Json j = coord::JobStatusJson(status);
    MergeTaskProcesses(board.TasksJson(), j);
    if (std::optional<Json> gang = GangBarrierJson(); gang.has_value()) {
      j["barriers"].push_back(*gang);
    }
    return j;
  };
  source.attempts = [this] { return board.AttemptsJson(); };
  source.metrics = &sampler->history();
  source.log = [this](const std::string& task) -> absl::StatusOr<std::string> {
    COHORT_ASSIGN_OR_RETURN(std::string path, board.LogPath(task));
    return TailOfFile(path, kLogTailLines, kLogTailBytes);
  };
  COHORT_ASSIGN_OR_RETURN(
      page, JobPage::Start(options.ui, security.job_token, std::move(source)));
  absl::MutexLock lock(&mu);
  page_url = page->url();
  Summary(absl::StrCat("job page: ", page_url));
  return absl::OkStatus();
}

absl::StatusOr<AttemptEnd> Launcher::Impl::RunAttempt(int attempt,
                                                      LaunchResult& result) {
  // The coordinator serves only the gang this attempt starts, with the size
  // the launcher chose; the gang's state is freed when the attempt ends,
  // whichever way it ends.
  COHORT_RETURN_IF_ERROR(coordinator->OpenGang(kStageId, attempt, gang_size));
  current_attempt = attempt;
  sampler->StartProgress();
  struct CloseGangOnExit {
    BarrierCoordinator* coordinator;
    int attempt;
    ~CloseGangOnExit() {
      coordinator->CloseGang(kStageId, attempt,
                             absl::StrCat("attempt ", attempt, " ended"));
    }
  } close_gang{coordinator.get(), attempt};

  TaskEnvironmentInputs inputs;
  inputs.tasks = tasks;
  for (size_t i = 0; i < tasks.size(); ++i) {
    COHORT_ASSIGN_OR_RETURN(int port, rpc::PickFreePort(options.host));
    inputs.addresses.push_back(absl::StrCat(options.host, ":", port));
  }
  inputs.attempt = attempt;
  inputs.job_token = security.job_token;
  inputs.coordination_address = control->target();
  inputs.heartbeat_timeout = options.heartbeat_timeout;
  inputs.barrier_address = barriers.grpc;
  inputs.barrier_tcp_address = barriers.tcp;
  inputs.barrier_timeout = options.barrier_timeout;
  inputs.extra_env = options.extra_env;
  const coord::ElasticStore elastic_store =
      coord::ElasticStoreOf(control->service());
  if (options.elastic.min > 0) {
    COHORT_RETURN_IF_ERROR(WriteFirstGeneration(elastic_store, tasks));
  }

  AttemptPlan plan;
  plan.attempt = attempt;
  plan.job_size = static_cast<int>(tasks.size());
  plan.log_dir = result.log_dir;
  plan.announce = options.progress;
  plan.stop_grace = options.stop_grace;
  if (options.restart == RestartMode::kTask) {
    plan.task_restarts = options.max_restarts;
    plan.service_silence = options.heartbeat_timeout;
  }
  if (options.elastic.min > 0) {
    PlanElastic(options.elastic, options.elastic_wait, elastic_store,
                /*enforce_minimum=*/true, tasks, inputs.extra_env, plan);
  }
  if (options.progress) plan.progress_interval = kProgressInterval;
  plan.waiting_at_barrier = [this, attempt] {
    std::optional<GangSnapshot> gang = coordinator->Snapshot(kStageId, attempt);
    return gang.has_value() ? static_cast<int>(gang->waiting.size()) : 0;
  };
  plan.messages = [this](const std::string& line) { Message(line); };
  plan.board = &board;
  plan.local_host = options.host;
  std::string barrier_failure;
  plan.on_failure =
      GangFailureHook(coordinator.get(), attempt, &barrier_failure);
  for (int i = 0; i < static_cast<int>(tasks.size()); ++i) {
    inputs.task = i;
    plan.tasks.push_back(PlanTask(
        inputs, options.command, result.log_dir, options.summary_lines,
        [this](const std::string& line) { Output(line); },
        [this](const std::string& line) { Message(line); }));
  }

  LocalAttemptLedger ledger(must_finish, [this] { events.Changed(); });
  AttemptEnd end;
  {
    TaskFailureWatch watch(control->service(), tasks, {}, attempt, &events);
    end = AttemptSupervisor(env, &events, &ledger, std::move(plan)).Run();
  }
  // The attempt's last progress line, before anything says how it ended.
  sampler->EndProgress();
  // The next attempt's tasks register afresh: this attempt's states,
  // errors, barriers and keys end here (its incarnations are refused).
  control->service()
      ->ResetForNextAttempt({}, absl::StrCat("attempt ", attempt, " ended"))
      .IgnoreError();  // FailedPrecondition only after Stop

  // A program that cannot be started at all is the caller's error, not a
  // failed attempt.
  if (!end.spawn_error.ok() && attempt == 0) return end.spawn_error;
  for (const std::string& line :
       RestartSummaryLines(attempt, end.restarts, options.max_restarts)) {
    Summary(line);
  }
  if (end.outcome == AttemptEnd::Outcome::kFailed) {
    Summarize(attempt, end, barrier_failure, result);
  }
  if (end.outcome == AttemptEnd::Outcome::kStopped) {
    result.exit_code = 130;
    Summary(absl::StrCat("job stopped (interrupted) in attempt ", attempt, ": ",
                         end.stopped_running,
                         " running task(s) stopped; logs in ", result.log_dir));
  }
  board.AttemptEnded(attempt, OutcomeName(end.outcome), CauseLine(end),
                     env->Now());
  return end;
}

void Launcher::Impl::Summarize(int attempt, const AttemptEnd& end,
                               const std::string& barrier_failure,
                               LaunchResult& result) {
  const FailureRecord& r = end.failure;
  const std::vector<std::string> lines =
      FailureSummaryLines(attempt, r, barrier_failure, end.stopped_others);
  result.failure_summary = absl::StrJoin(lines, "\n");
  result.exit_code = r.code;
  for (const std::string& l : lines) Summary(l);
}

absl::Status Launcher::Impl::Validate() {
  if (options.command.empty()) {
    return absl::InvalidArgumentError(
        "no program to launch; put it after `--`, e.g. `cohort launch -n 2 -- "
        "./my_task`");
  }
  if (options.max_restarts < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--max-restarts must not be negative, got ", options.max_restarts));
  }
  if (options.elastic.min > 0) {
    if (options.restart != RestartMode::kTask) {
      return absl::InvalidArgumentError(
          "--elastic restarts lost tasks alone (--restart task); it cannot "
          "be combined with --restart gang");
    }
    if (options.chief || options.num_ps > 0 || options.evaluator ||
        options.num_workers != options.elastic.max) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--elastic ", options.elastic.min, ":", options.elastic.max,
          " launches a data-parallel gang of MAX tasks: use -n ",
          options.elastic.max,
          " (or leave -n out), without --chief, --ps or "
          "--evaluator"));
    }
    if (options.elastic_wait <= absl::ZeroDuration()) {
      return absl::InvalidArgumentError("--elastic-wait must be positive");
    }
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
  must_finish = static_cast<int>(
      std::count_if(tasks.begin(), tasks.end(),
                    [](const TaskSpec& t) { return t.job != "ps"; }));
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
  return absl::OkStatus();
}

absl::Status Launcher::Impl::StartControlPlane(const std::string& log_dir) {
  // Every server of the job checks one token: the user's, or a fresh random
  // one that the tasks learn through their environment and the user through
  // a file only they can read (for `cohort status --token-file`).
  security.job_token = options.job_token.empty()
                           ? absl::BytesToHexString(rpc::RandomNonce())
                           : options.job_token;
  COHORT_RETURN_IF_ERROR(
      WritePrivateFile(log_dir + "/job-token", security.job_token + "\n"));
  coordinator =
      std::make_shared<BarrierCoordinator>(env, options.barrier_timeout);
  COHORT_ASSIGN_OR_RETURN(
      control,
      StartJobControlPlane(env, absl::StrCat(options.host, ":0"), security,
                           options.heartbeat_timeout, tasks, coordinator,
                           options.restart == RestartMode::kTask));
  barriers = barrier::BarrierEndpointsOf(*control);
  absl::MutexLock lock(&mu);
  barrier_address = barriers.grpc;
  return absl::OkStatus();
}

absl::StatusOr<LaunchResult> Launcher::Impl::Run() {
  COHORT_RETURN_IF_ERROR(Validate());
  LaunchResult result;
  COHORT_ASSIGN_OR_RETURN(result.log_dir, PrepareLogDir(options.log_dir));
  COHORT_RETURN_IF_ERROR(StartControlPlane(result.log_dir));
  if (absl::Status started = StartPage(); !started.ok()) {
    control->Stop();
    return started;
  }

  std::unique_ptr<RestartPolicy> policy =
      MakeRestartPolicy(options.restart, options.max_restarts);
  for (int attempt = 0;; ++attempt) {
    if (events.stop_requested()) {
      result.exit_code = 130;
      break;
    }
    result.attempts = attempt + 1;
    COHORT_ASSIGN_OR_RETURN(AttemptEnd end, RunAttempt(attempt, result));
    const RestartPolicy::Decision decision = policy->Decide(end);
    if (end.outcome == AttemptEnd::Outcome::kSucceeded) {
      result.succeeded = true;
      result.exit_code = 0;
      result.failure_summary.clear();
      Summary(SuccessLine(tasks.size(), attempt, end));
    }
    if (decision == RestartPolicy::Decision::kGiveUp) {
      Summary(absl::StrCat(policy->GiveUpMessage(attempt + 1), "; logs in ",
                           result.log_dir));
    }
    if (decision != RestartPolicy::Decision::kRestart) break;
    Message(policy->RestartMessage(attempt + 1));
  }
  // The page and the sampler read the service: they go first.
  page.reset();
  sampler.reset();
  control->Stop();
  return result;
}

}  // namespace cohort::launch
