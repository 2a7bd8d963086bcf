#include "cohort/runtime/server.h"

#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "cohort/base/env.h"
#include "cohort/base/logging.h"
#include "cohort/base/status.h"
#include "cohort/graph/device.h"
#include "cohort/graph/standard_registries.h"
#include "cohort/rpc/socket.h"
#include "cohort/runtime/device_name.h"
#include "cohort/runtime/grpc_master_service.h"
#include "cohort/runtime/grpc_worker_cache.h"
#include "cohort/runtime/grpc_worker_service.h"
#include "cohort/runtime/local_master.h"
#include "cohort/runtime/master.h"
#include "cohort/runtime/server_coordination.h"
#include "cohort/runtime/tensor_data_service.h"
#include "cohort/runtime/worker.h"

namespace cohort::runtime {
namespace {

// How long Stop lets gRPC finish the calls in flight before it cancels
// them (the steps among them have been ended already).
constexpr absl::Duration kShutdownGrace = absl::Seconds(5);

struct Address {
  std::string host;
  int port = -1;  // -1: no parsable port.
};

// "host:port", "[v6]:port" or a bare host. Host names are allowed (TF
// clusters use them); only the port must be numeric.
Address SplitAddress(const std::string& address) {
  Address out;
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) {
    out.host = address;
    return out;
  }
  out.host = address.substr(0, colon);
  int port = 0;
  if (absl::SimpleAtoi(address.substr(colon + 1), &port) && port >= 0 &&
      port <= 65535) {
    out.port = port;
  }
  return out;
}

const JobDef* FindJob(const ClusterDef& cluster, const std::string& name) {
  for (const JobDef& job : cluster.job()) {
    if (job.name() == name) return &job;
  }
  return nullptr;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Server>> Server::Create(
    const ServerDef& server_def, const ServerOptions& options) {
  std::unique_ptr<Server> server(new Server);
  COHORT_RETURN_IF_ERROR(server->Init(server_def, options));
  return server;
}

absl::StatusOr<std::unique_ptr<Server>> Server::CreateLocal(
    const ServerOptions& options) {
  ServerDef def;
  JobDef* job = def.mutable_cluster()->add_job();
  job->set_name("localhost");
  (*job->mutable_tasks())[0] = "localhost:0";
  def.set_job_name("localhost");
  def.set_task_index(0);
  def.set_protocol("grpc");
  return Create(def, options);
}

absl::Status Server::CheckServerDef(const ServerDef& def) {
  return CheckAndResolve(def).status();
}

absl::StatusOr<Server::Resolved> Server::CheckAndResolve(const ServerDef& def) {
  if (!def.protocol().empty() && def.protocol() != "grpc") {
    return absl::NotFoundError(
        absl::StrCat("No server factory registered for the given ServerDef: ",
                     def.ShortDebugString(),
                     "\nThe available server factories are: [ GRPC_SERVER ]"));
  }
  // A name with '/' or ':' would change the meaning of every device name
  // and task address built from it.
  for (const JobDef& j : def.cluster().job()) {
    if (!IsValidJobName(j.name())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "job name \"", absl::CEscape(j.name()),
          "\" in the cluster is not a valid job name: use a letter, then "
          "letters, digits or '_' (no '/', ':' or spaces)"));
    }
  }
  const JobDef* job = FindJob(def.cluster(), def.job_name());
  if (job == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Job \"", def.job_name(), "\" was not defined in cluster"));
  }
  auto it = job->tasks().find(def.task_index());
  if (it == job->tasks().end()) {
    return absl::InvalidArgumentError(absl::StrCat("Task ", def.task_index(),
                                                   " was not defined in job \"",
                                                   def.job_name(), "\""));
  }
  Address address = SplitAddress(it->second);
  if (def.port() != 0) address.port = def.port();
  if (address.port < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Could not parse port for local server from \"", it->second, "\"."));
  }
  Resolved out;
  out.task = absl::StrCat("/job:", def.job_name(),
                          "/replica:0/task:", def.task_index());
  // Port 0 binds a port the OS picks, which only this process learns: fine
  // for a cluster of one task (TF's create_local_server), but the other
  // tasks of a larger cluster would have no address to reach this one by.
  int num_tasks = 0;
  for (const JobDef& j : def.cluster().job()) num_tasks += j.tasks_size();
  if (address.port == 0 && num_tasks > 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "task ", out.task, " has port 0 in a cluster of ", num_tasks,
        " tasks: the other tasks could not find it. Give it a fixed port."));
  }
  out.host = address.host.empty() ? "localhost" : address.host;
  out.port = address.port;
  return out;
}

absl::Status Server::Init(const ServerDef& def, const ServerOptions& options) {
  COHORT_ASSIGN_OR_RETURN(Resolved resolved, CheckAndResolve(def));
  task_ = resolved.task;
  Address address{resolved.host, resolved.port};

  const int num_threads =
      options.num_threads > 0
          ? options.num_threads
          : def.default_session_config().intra_op_parallelism_threads();
  if (num_threads > kMaxServerThreads) {
    return absl::InvalidArgumentError(absl::StrCat(
        "task ", task_, ": ", num_threads, " threads asked for; at most ",
        kMaxServerThreads, " (0 for one per core)"));
  }
  if (options.default_step_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("task ", task_,
                     ": the default step timeout must be positive (or "
                     "infinite for none), got ",
                     absl::FormatDuration(options.default_step_timeout)));
  }
  server_def_ = def;
  Env* env = options.env != nullptr ? options.env : Env::Default();
  env_ = env;
  device_ = std::make_unique<Device>(absl::StrCat(task_, "/device:CPU:0"),
                                     num_threads);
  // The cache first (the worker's remote Recvs go through it), then the
  // worker, whose own task the cache then reaches in process.
  COHORT_ASSIGN_OR_RETURN(
      worker_cache_,
      GrpcWorkerCache::Create(def.cluster(), task_, nullptr, options.security));
  WorkerEnv worker_env;
  worker_env.task_name = task_;
  worker_env.device = device_.get();
  worker_env.worker_cache = worker_cache_.get();
  worker_env.env = env;
  // The ring endpoint takes a dotted address; "localhost" is loopback.
  worker_env.collective_host =
      address.host == "localhost" ? "127.0.0.1" : address.host;
  worker_env.job_token = options.security.job_token;
  worker_ = std::make_unique<Worker>(worker_env);
  worker_cache_->SetLocalWorker(worker_.get());

  MasterEnv master_env;
  master_env.task = task_;
  master_env.device = device_->name();
  master_env.server_def = def;
  master_env.workers = worker_cache_.get();
  master_env.env = env;
  master_env.op_registry = StandardOpRegistry();
  master_env.default_step_timeout = options.default_step_timeout;
  master_ = std::make_unique<Master>(master_env);

  ServerCoordinationOptions coordination;
  coordination.server_def = def;
  coordination.job = def.job_name();
  coordination.task_index = def.task_index();
  coordination.security = options.security;
  coordination.env = env;
  coordination.launcher_service_address = options.launcher_coordination_address;
  Master* master = master_.get();
  coordination.on_task_lost = [master](const std::string& task,
                                       const absl::Status& status,
                                       bool failed) {
    master->AbortStepsOn(task, status, /*remember=*/failed);
  };
  coordination.on_task_back = [master](const std::string& task) {
    master->TaskBack(task);
  };
  COHORT_ASSIGN_OR_RETURN(coordination_,
                          ServerCoordination::Create(std::move(coordination)));

  worker_service_ = std::make_unique<GrpcWorkerService>(
      worker_.get(), options.security.job_token);
  master_service_ = std::make_unique<GrpcMasterService>(
      master_.get(), options.security.job_token);
  // A loopback host binds only loopback; any other host binds every
  // interface, as TensorFlow does (the host may be a name of this machine).
  const std::string bind_host =
      rpc::IsLoopbackHost(address.host) ? address.host : "0.0.0.0";
  std::vector<grpc::Service*> services = {worker_service_.get(),
                                          master_service_.get()};
  if (coordination_ != nullptr && coordination_->service() != nullptr) {
    services.push_back(coordination_->service());
  }
  // Before gRPC serves: a peer's first GetStatus must already see the
  // tensor port, or it would settle on gRPC for good.
  if (!options.security.tls()) {
    // The framed listener takes a dotted address: "localhost" binds
    // 127.0.0.1, like gRPC's loopback resolution.
    rpc::FramedServerOptions data;
    data.name = TensorDataIdentity(task_);
    data.host = bind_host == "localhost" ? "127.0.0.1" : bind_host;
    data.job_token = options.security.job_token;
    data.insecure = options.security.insecure;
    COHORT_ASSIGN_OR_RETURN(tensor_data_,
                            TensorDataService::Start(worker_.get(), data));
    worker_->SetTensorPort(tensor_data_->port());
  }
  COHORT_ASSIGN_OR_RETURN(
      grpc_,
      rpc::StartGrpcServer(absl::StrCat(bind_host, ":", address.port), services,
                           options.security, rpc::kMaxTensorMessageBytes));
  port_ = grpc_.port;
  target_ = absl::StrCat("grpc://", address.host, ":", port_);
  if (!options.security.tls()) {
    local_master_ = LocalMaster::Register(target_, master_.get(),
                                          options.security.job_token);
  }
  return absl::OkStatus();
}

Server::~Server() {
  {
    absl::MutexLock lock(&mu_);
    if (shut_down_) return;
  }
  (void)Stop();
}

absl::Status Server::Start() {
  absl::MutexLock lock(&mu_);
  switch (state_) {
    case State::kNew:
      // A Stop in progress has torn down (or is tearing down) what Start
      // would start.
      if (stopping_)
        return absl::FailedPreconditionError("Server has stopped.");
      state_ = State::kStarted;
      if (coordination_ != nullptr) coordination_->Start(port_);
      COHORT_LOG(INFO) << "Started server with target: " << target_;
      return absl::OkStatus();
    case State::kStarted:
      COHORT_LOG(INFO) << "Server already started (target: " << target_ << ")";
      return absl::OkStatus();
    case State::kStopped:
      return absl::FailedPreconditionError("Server has stopped.");
  }
  return absl::OkStatus();
}

absl::Status Server::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) {
      if (state_ == State::kStopped) {
        COHORT_LOG(INFO) << "Server already stopped (target: " << target_
                         << ")";
      }
      // Another thread is stopping it: return when it is done, like Join.
      mu_.Await(absl::Condition(
          +[](bool* done) { return *done; }, &shut_down_));
      return absl::OkStatus();
    }
    stopping_ = true;
  }
  const absl::Status stopping =
      absl::UnavailableError(absl::StrCat("server ", task_, " is stopping"));
  // Order: end the steps (master sessions first, they drive the workers),
  // then let gRPC finish what is in flight, then wait for the master's own
  // call threads.
  if (master_ != nullptr) master_->Stop(stopping);
  // In-process sessions' calls have returned (the master answered them
  // with `stopping`); later ones are refused.
  if (local_master_ != nullptr) local_master_->Detach();
  if (worker_ != nullptr) worker_->Stop(stopping);
  // Leave the job cleanly (the other servers learn that this task is gone)
  // and stop the service this task may host.
  if (coordination_ != nullptr) coordination_->Stop();
  if (grpc_.server != nullptr) {
    grpc_.server->Shutdown(absl::ToChronoTime(absl::Now() + kShutdownGrace));
  }
  if (master_service_ != nullptr) master_service_->Shutdown();
  absl::MutexLock lock(&mu_);
  shut_down_ = true;
  state_ = State::kStopped;
  return absl::OkStatus();
}

absl::StatusOr<coord::CoordinationAgent*> Server::WaitForCoordinationAgent(
    absl::Duration timeout) {
  if (coordination_ == nullptr) {
    return absl::NotFoundError(absl::StrCat(
        "server ", task_,
        " runs no coordination agent (no launcher service and no "
        "coordination_config in its ServerDef's default_session_config)"));
  }
  {
    absl::MutexLock lock(&mu_);
    if (state_ != State::kStarted || stopping_) {
      return absl::FailedPreconditionError(
          absl::StrCat("server ", task_,
                       " is not running; start it before asking for its "
                       "coordination agent"));
    }
  }
  // Waits outside mu_: Stop() must be able to run meanwhile (it ends the
  // wait with FailedPrecondition).
  return coordination_->WaitForAgent(env_->Now() + timeout);
}

absl::Status Server::Join() {
  absl::MutexLock lock(&mu_);
  if (state_ == State::kNew) {
    state_ = State::kStopped;
    return absl::OkStatus();
  }
  mu_.Await(absl::Condition(
      +[](State* s) { return *s == State::kStopped; }, &state_));
  return absl::OkStatus();
}

}  // namespace cohort::runtime
