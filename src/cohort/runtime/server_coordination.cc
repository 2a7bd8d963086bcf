#include "cohort/runtime/server_coordination.h"

#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "cohort/base/env.h"
#include "cohort/base/logging.h"
#include "cohort/base/status.h"
#include "cohort/coord/coordination_agent.h"
#include "cohort/coord/coordination_service.h"
#include "cohort/coord/framed_coordination.h"
#include "cohort/coord/grpc_coordination_client.h"
#include "cohort/coord/grpc_coordination_service.h"
#include "cohort/runtime/device_name.h"

namespace cohort::runtime {
namespace {

// Registration is retried in slices this long, so Stop never waits longer
// for a Connect that cannot succeed yet (the leader not up).
constexpr absl::Duration kRegisterSlice = absl::Seconds(2);
constexpr absl::Duration kRetryPause = absl::Seconds(1);
constexpr absl::Duration kStillTryingLog = absl::Seconds(10);
// The job-state long poll: the service answers at the latest after this.
constexpr absl::Duration kWatchPoll = absl::Seconds(30);

std::string TaskName(const std::string& job, int index) {
  return absl::StrCat("/job:", job, "/replica:0/task:", index);
}

const JobDef* FindJob(const ClusterDef& cluster, const std::string& name) {
  for (const JobDef& job : cluster.job()) {
    if (job.name() == name) return &job;
  }
  return nullptr;
}

// The leader per the header's rule: (job, index).
absl::StatusOr<std::pair<std::string, int>> PickLeader(
    const ClusterDef& cluster, const std::string& configured) {
  if (!configured.empty()) {
    COHORT_ASSIGN_OR_RETURN(DeviceName name, DeviceName::Parse(configured));
    const JobDef* job = name.has_job ? FindJob(cluster, name.job) : nullptr;
    const int index = name.has_task ? name.task : 0;
    if (job == nullptr || !job->tasks().contains(index)) {
      return absl::InvalidArgumentError(
          absl::StrCat("coordination_config.service_leader '", configured,
                       "' is not a task of the cluster"));
    }
    return std::make_pair(name.job, index);
  }
  for (const char* preferred : {"chief", "worker", "ps"}) {
    const JobDef* job = FindJob(cluster, preferred);
    if (job != nullptr && job->tasks().contains(0)) {
      return std::make_pair(std::string(preferred), 0);
    }
  }
  for (const JobDef& job : cluster.job()) {
    if (!job.tasks().empty()) {
      return std::make_pair(job.name(), job.tasks().begin()->first);
    }
  }
  return absl::InvalidArgumentError("the cluster has no task");
}

std::string HostOf(const std::string& address) {
  const size_t colon = address.rfind(':');
  std::string host =
      colon == std::string::npos ? address : address.substr(0, colon);
  return host.empty() ? "localhost" : host;
}

}  // namespace

ServerCoordination::ServerCoordination(ServerCoordinationOptions options)
    : options_(std::move(options)),
      env_(options_.env != nullptr ? options_.env : Env::Default()) {}

absl::StatusOr<std::unique_ptr<ServerCoordination>> ServerCoordination::Create(
    ServerCoordinationOptions options) {
  const CoordinationServiceConfig& config =
      options.server_def.default_session_config()
          .experimental()
          .coordination_config();
  if (options.launcher_service_address.empty() &&
      config.service_type().empty()) {
    return std::unique_ptr<ServerCoordination>();
  }
  if (options.launcher_service_address.empty() &&
      config.service_type() != "standalone") {
    return absl::InvalidArgumentError(absl::StrCat(
        "coordination_config.service_type '", config.service_type(),
        "' is not supported; use \"standalone\" or \"\" (none)"));
  }
  std::unique_ptr<ServerCoordination> c(
      new ServerCoordination(std::move(options)));
  if (config.heartbeat_timeout_in_ms() > 0) {
    c->heartbeat_timeout_ =
        absl::Milliseconds(config.heartbeat_timeout_in_ms());
  }
  const ClusterDef& cluster = c->options_.server_def.cluster();
  if (!c->options_.launcher_service_address.empty()) {
    c->address_ = c->options_.launcher_service_address;
    return c;
  }
  COHORT_ASSIGN_OR_RETURN(auto leader,
                          PickLeader(cluster, config.service_leader()));
  c->leader_ = TaskName(leader.first, leader.second);
  c->address_ = FindJob(cluster, leader.first)->tasks().at(leader.second);
  if (leader.first != c->options_.job ||
      leader.second != c->options_.task_index) {
    return c;
  }
  coord::CoordinationServiceOptions service;
  for (const JobDef& job : cluster.job()) {
    // The evaluator is split off from the cluster (TF).
    if (job.name() == "evaluator" || job.tasks().empty()) continue;
    int count = 0;
    for (const auto& [index, address] : job.tasks()) {
      count = std::max(count, index + 1);
    }
    service.jobs[job.name()] = count;
    service.recoverable_jobs.insert(job.name());
  }
  service.allow_new_incarnation_to_reconnect = true;
  service.heartbeat_timeout = c->heartbeat_timeout_;
  service.env = c->env_;
  COHORT_ASSIGN_OR_RETURN(c->hosted_,
                          coord::CoordinationService::Create(service));
  c->hosted_grpc_ = std::make_unique<coord::GrpcCoordinationService>(
      c->hosted_.get(), c->options_.security.job_token);
  return c;
}

ServerCoordination::~ServerCoordination() { Stop(); }

grpc::Service* ServerCoordination::service() { return hosted_grpc_.get(); }

void ServerCoordination::Start(int bound_port) {
  if (hosted_ != nullptr) {
    // The leader reaches its own service on its own (bound) port.
    address_ = absl::StrCat(HostOf(address_), ":", bound_port);
  }
  COHORT_LOG(INFO) << TaskName(options_.job, options_.task_index)
                   << ": coordination service at " << address_
                   << (leader_.empty()
                           ? " (the launcher's)"
                           : absl::StrCat(" (leader ", leader_, ")"));
  agent_thread_ = std::thread([this] { AgentLoop(); });
  watch_thread_ = std::thread([this] { WatchLoop(); });
}

bool ServerCoordination::WaitUnlessStopped(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  auto stopped = [this]()
                     ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopped_; };
  return !env_->AwaitWithDeadline(&mu_, absl::Condition(&stopped), deadline);
}

void ServerCoordination::AgentLoop() {
  auto client = coord::NewCoordinationClient(address_, options_.security);
  if (!client.ok()) {
    COHORT_LOG(ERROR) << "coordination: cannot reach " << address_ << ": "
                      << client.status();
    return;
  }
  coord::CoordinationAgentOptions agent_options;
  agent_options.task = coord::TaskId{options_.job, options_.task_index};
  agent_options.heartbeat_timeout = heartbeat_timeout_;
  agent_options.register_timeout = kRegisterSlice;
  // A stall long enough to be declared dead must not end this task's part
  // in the job: it re-registers with a new incarnation.
  agent_options.reconnect_after_heartbeat_timeout = true;
  agent_options.env = env_;
  const std::string me = TaskName(options_.job, options_.task_index);
  agent_options.error_callback = [me](const absl::Status& error) {
    COHORT_LOG(WARNING) << me << ": coordination error (the server goes on): "
                        << error;
  };
  auto agent =
      coord::CoordinationAgent::Create(agent_options, std::move(*client));
  if (!agent.ok()) {
    COHORT_LOG(ERROR) << me << ": coordination agent: " << agent.status();
    return;
  }
  coord::CoordinationAgent* a = agent->get();
  {
    absl::MutexLock lock(&mu_);
    if (stopped_) return;
    agent_ = std::move(*agent);
  }
  absl::Time next_log = env_->Now() + kStillTryingLog;
  for (;;) {
    absl::Status s = a->Connect();
    if (s.ok()) {
      COHORT_LOG(INFO) << me << ": registered with the coordination service";
      absl::MutexLock lock(&mu_);
      agent_registered_ = true;
      return;
    }
    if (env_->Now() >= next_log) {
      COHORT_LOG(WARNING) << me << ": still registering with the coordination "
                          << "service at " << address_ << ": " << s;
      next_log = env_->Now() + kStillTryingLog;
    }
    if (!WaitUnlessStopped(env_->Now() + kRetryPause)) return;
  }
}

absl::StatusOr<coord::CoordinationAgent*> ServerCoordination::WaitForAgent(
    absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return stopped_ || agent_registered_;
  };
  env_->AwaitWithDeadline(&mu_, absl::Condition(&ready), deadline);
  if (stopped_) {
    return absl::FailedPreconditionError(absl::StrCat(
        TaskName(options_.job, options_.task_index),
        ": the server's coordination has stopped (the server was stopped)"));
  }
  if (!agent_registered_) {
    return absl::DeadlineExceededError(absl::StrCat(
        TaskName(options_.job, options_.task_index),
        " has not registered with the coordination service at ", address_,
        " yet; check that the service (launcher or leader task) is up"));
  }
  return agent_.get();
}

void ServerCoordination::WatchLoop() {
  auto client = coord::NewCoordinationClient(address_, options_.security);
  if (!client.ok()) return;
  const std::string me = TaskName(options_.job, options_.task_index);
  int64_t version = -1;
  std::map<std::string, bool> seen_connected;
  std::map<std::string, bool> reported;
  for (;;) {
    coord::CallCancellation cancel;
    {
      absl::MutexLock lock(&mu_);
      if (stopped_) return;
      watch_call_ = &cancel;
    }
    coord::WatchJobStateRequest request;
    request.set_version_number(version);
    request.set_timeout_ms(absl::ToInt64Milliseconds(kWatchPoll));
    coord::WatchJobStateResponse response;
    coord::CallOptions call;
    call.timeout = kWatchPoll + absl::Seconds(5);
    call.cancellation = &cancel;
    absl::Status s = (*client)->WatchJobState(request, &response, call);
    {
      absl::MutexLock lock(&mu_);
      watch_call_ = nullptr;
      if (stopped_) return;
    }
    if (!s.ok()) {
      // The service is down or restarting (a new one counts versions from
      // scratch): ask for the whole state once it answers again.
      version = -1;
      if (!WaitUnlessStopped(env_->Now() + kRetryPause)) return;
      continue;
    }
    version = response.version_number();
    for (const coord::TaskStateInfo& t : response.task_state()) {
      const std::string task =
          TaskName(t.task().job_name(), t.task().task_id());
      if (task == me) continue;
      if (t.state() == coord::TASK_STATE_CONNECTED) {
        seen_connected[task] = true;
        if (reported[task] && options_.on_task_back) {
          COHORT_LOG(INFO) << me << ": " << task << " is back";
          options_.on_task_back(task);
        }
        reported[task] = false;
        continue;
      }
      // Only a task that was up and left is lost; one that never came up
      // is still starting.
      if (!seen_connected[task] || reported[task]) continue;
      reported[task] = true;
      const absl::Status lost = absl::UnavailableError(absl::StrCat(
          task, " is unavailable: the coordination service at ", address_,
          " reports it ",
          t.state() == coord::TASK_STATE_ERROR ? "in error" : "disconnected",
          t.error_message().empty() ? "" : ": ", t.error_message(),
          ". Check that the task's process is alive and responsive."));
      // A task that shut down its agent left on purpose: worth a line, not
      // a warning (its pending steps still end below).
      if (t.state() == coord::TASK_STATE_ERROR) {
        COHORT_LOG(WARNING) << me << ": " << lost.message();
      } else {
        COHORT_LOG(INFO) << me << ": " << task << " disconnected (shut down)";
      }
      if (options_.on_task_lost) {
        options_.on_task_lost(task, lost, t.state() == coord::TASK_STATE_ERROR);
      }
    }
  }
}

void ServerCoordination::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (stopped_) return;
    stopped_ = true;
    if (watch_call_ != nullptr) watch_call_->Cancel();
  }
  if (agent_thread_.joinable()) agent_thread_.join();
  std::unique_ptr<coord::CoordinationAgent> agent;
  {
    absl::MutexLock lock(&mu_);
    agent = std::move(agent_);
  }
  // Leaving cleanly tells the service (and so the other servers) that this
  // task is gone on purpose; the agent's destructor does it.
  agent.reset();
  if (watch_thread_.joinable()) watch_thread_.join();
  if (hosted_ != nullptr) hosted_->Stop();
}

}  // namespace cohort::runtime
