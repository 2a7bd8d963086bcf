// InProcessCluster: one real CoordinationService and any number of agents
// in one process, for tests and benchmarks ("clusters in one process").
//
//   FakeEnv env;
//   CoordinationServiceOptions service;
//   service.jobs = {{"worker", 4}};
//   service.env = &env;
//   auto cluster = InProcessCluster::Create(service);           // direct calls
//   auto cluster = InProcessCluster::Create(service, {.grpc = true}); //
//   loopback auto statuses = (*cluster)->RunTasks(4, [](CoordinationAgent& a,
//   int i) {
//     return a.WaitAtBarrier("start", absl::Seconds(10));
//   });
//
// RunTasks runs one thread per task, each with its own connected agent, and
// returns every task's status. Errors seen by each agent's error callback
// are recorded (errors_for()).
//
// Thread safety: thread-safe.
#ifndef COHORT_COORD_IN_PROCESS_CLUSTER_H_
#define COHORT_COORD_IN_PROCESS_CLUSTER_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "cohort/coord/coordination_agent.h"
#include "cohort/coord/coordination_server.h"
#include "cohort/coord/coordination_service.h"

namespace cohort::coord {

struct InProcessClusterOptions {
  // Agents talk to the service over gRPC on 127.0.0.1 (port chosen by the
  // OS) instead of calling it directly.
  bool grpc = false;
  // Agents talk to it over the framed fast path (framed_coordination.h).
  bool framed = false;
  rpc::TransportSecurity security;  // with grpc
};

class InProcessCluster {
 public:
  static absl::StatusOr<std::unique_ptr<InProcessCluster>> Create(
      CoordinationServiceOptions service_options,
      InProcessClusterOptions options = {});
  ~InProcessCluster();

  CoordinationService* service() { return service_; }
  // "127.0.0.1:port" with grpc or framed (the gRPC target), "" otherwise.
  std::string target() const;
  // "framed:127.0.0.1:port" of the framed fast path with grpc or framed.
  std::string framed_target() const;

  // A new client for the service (direct or gRPC, as configured).
  absl::StatusOr<std::unique_ptr<CoordinationClient>> NewClient();
  // A new, not yet connected agent. `options.task` must be set; the env and
  // heartbeat timeout default to the service's; the error callback records
  // errors (see errors_for) and then calls options.error_callback, if any.
  absl::StatusOr<std::unique_ptr<CoordinationAgent>> NewAgent(
      CoordinationAgentOptions options);

  // Runs `fn` in one thread per task of the first job (indices 0..n-1),
  // each with a connected agent that is shut down afterwards.
  std::vector<absl::Status> RunTasks(
      int n, const std::function<absl::Status(CoordinationAgent&, int)>& fn,
      CoordinationAgentOptions base = {});

  std::vector<absl::Status> errors_for(const TaskId& task);

 private:
  InProcessCluster() = default;

  CoordinationServiceOptions service_options_;
  InProcessClusterOptions options_;
  std::unique_ptr<CoordinationService> owned_service_;
  std::unique_ptr<CoordinationServer> server_;
  CoordinationService* service_ = nullptr;
  absl::Mutex mu_;
  std::map<TaskId, std::vector<absl::Status>> errors_ ABSL_GUARDED_BY(mu_);
};

}  // namespace cohort::coord

#endif  // COHORT_COORD_IN_PROCESS_CLUSTER_H_
