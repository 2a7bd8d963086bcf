#include "cohort/coord/in_process_cluster.h"

#include <thread>

#include "cohort/coord/framed_coordination.h"
#include "cohort/coord/grpc_coordination_client.h"
#include "cohort/coord/local_coordination_client.h"

namespace cohort::coord {

absl::StatusOr<std::unique_ptr<InProcessCluster>> InProcessCluster::Create(
    CoordinationServiceOptions service_options,
    InProcessClusterOptions options) {
  std::unique_ptr<InProcessCluster> cluster(new InProcessCluster());
  cluster->service_options_ = service_options;
  cluster->options_ = options;
  if (options.grpc || options.framed) {
    CoordinationServerOptions server_options;
    server_options.service = service_options;
    server_options.security = options.security;
    server_options.serve_framed = options.framed;
    auto server = CoordinationServer::Start(server_options);
    if (!server.ok()) return server.status();
    cluster->server_ = std::move(*server);
    cluster->service_ = cluster->server_->service();
  } else {
    auto service = CoordinationService::Create(service_options);
    if (!service.ok()) return service.status();
    cluster->owned_service_ = std::move(*service);
    cluster->service_ = cluster->owned_service_.get();
  }
  return cluster;
}

InProcessCluster::~InProcessCluster() {
  if (server_) server_->Stop();
  if (owned_service_) owned_service_->Stop();
}

std::string InProcessCluster::target() const {
  return server_ ? server_->target() : "";
}

std::string InProcessCluster::framed_target() const {
  return server_ ? server_->framed_target() : "";
}

absl::StatusOr<std::unique_ptr<CoordinationClient>>
InProcessCluster::NewClient() {
  if (server_) {
    return NewCoordinationClient(
        options_.framed ? server_->framed_target() : server_->target(),
        options_.security);
  }
  return std::unique_ptr<CoordinationClient>(
      new LocalCoordinationClient(service_));
}

absl::StatusOr<std::unique_ptr<CoordinationAgent>> InProcessCluster::NewAgent(
    CoordinationAgentOptions options) {
  if (options.env == nullptr) options.env = service_options_.env;
  if (options.heartbeat_timeout == absl::Seconds(10)) {
    options.heartbeat_timeout = service_options_.heartbeat_timeout;
  }
  const TaskId task = options.task;
  auto user_callback = options.error_callback;
  options.error_callback = [this, task, user_callback](const absl::Status& s) {
    {
      absl::MutexLock lock(&mu_);
      errors_[task].push_back(s);
    }
    if (user_callback) user_callback(s);
  };
  auto client = NewClient();
  if (!client.ok()) return client.status();
  return CoordinationAgent::Create(std::move(options), std::move(*client));
}

std::vector<absl::Status> InProcessCluster::RunTasks(
    int n, const std::function<absl::Status(CoordinationAgent&, int)>& fn,
    CoordinationAgentOptions base) {
  const std::string job = service_options_.jobs.begin()->first;
  std::vector<absl::Status> results(n);
  std::vector<std::thread> threads;
  threads.reserve(n);
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      CoordinationAgentOptions options = base;
      options.task = TaskId{job, i};
      auto agent = NewAgent(options);
      if (!agent.ok()) {
        results[i] = agent.status();
        return;
      }
      absl::Status s = (*agent)->Connect();
      if (s.ok()) s = fn(**agent, i);
      absl::Status shutdown = (*agent)->Shutdown();
      results[i] = s.ok() ? shutdown : s;
    });
  }
  for (auto& t : threads) t.join();
  return results;
}

std::vector<absl::Status> InProcessCluster::errors_for(const TaskId& task) {
  absl::MutexLock lock(&mu_);
  return errors_[task];
}

}  // namespace cohort::coord
