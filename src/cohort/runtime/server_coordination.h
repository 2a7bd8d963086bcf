// ServerCoordination: how a Server takes part in its cluster's
// coordination service, so that a task that dies or hangs is noticed by
// every server (docs/runtime.md).
//
// Where the service runs:
//  - Under `cohort launch` (COHORT_COORDINATION_SERVICE_ADDRESS set): the
//    launcher's service; this server hosts none. The launcher's policy
//    applies (it restarts the gang when a task fails).
//  - Otherwise with coordination_config.service_type "standalone" (the
//    `cohort server` default): the leader task hosts the service on its
//    own gRPC port. Leader: service_leader if set, else chief:0, else
//    worker:0, else ps:0 -- not ps:0 first as TensorFlow's rule, because ps
//    is the task users lose most and the service must outlive it. Every job
//    is recoverable and a restarted task may rejoin with a new incarnation:
//    one death is not propagated as an error that would leave every other
//    server's agent in ERROR for good.
//  - service_type "": no coordination; failures are then found only by
//    transport errors and step deadlines.
//
// What it does: an agent registers this task (retrying until the service
// is up; a task declared dead re-registers) and heartbeats; a watch thread
// long-polls the service's job state and calls `on_task_lost(task, status,
// failed)`
// once for each task that leaves CONNECTED (task "/job:J/replica:0/task:T",
// status Unavailable naming it), which the Server uses to end the steps
// that wait on that task. The agent's errors are logged, never fatal.
//
// Thread safety: thread-safe. `on_task_lost` and `on_task_back` run on the
// watch thread.
#ifndef COHORT_RUNTIME_SERVER_COORDINATION_H_
#define COHORT_RUNTIME_SERVER_COORDINATION_H_

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "cohort/cluster.pb.h"
#include "cohort/coord/coordination_client.h"
#include "cohort/rpc/transport.h"
#include "grpcpp/impl/codegen/service_type.h"

namespace cohort {
class Env;
namespace coord {
class CoordinationAgent;
class CoordinationService;
class GrpcCoordinationService;
}  // namespace coord
}  // namespace cohort

namespace cohort::runtime {

struct ServerCoordinationOptions {
  ServerDef server_def;  // Its default_session_config says what to run.
  std::string job;       // This task.
  int task_index = 0;
  rpc::TransportSecurity security;
  Env* env = nullptr;
  // The launcher's service ("host:port"), or "" when not under a launcher.
  std::string launcher_service_address;
  // `failed`: the task is in ERROR (a heartbeat timeout, a reported
  // error), not a clean disconnect.
  std::function<void(const std::string& task, const absl::Status& status,
                     bool failed)>
      on_task_lost;
  // Called once when a task reported lost is connected again.
  std::function<void(const std::string& task)> on_task_back;
};

class ServerCoordination {
 public:
  // Null when the configuration asks for no coordination. InvalidArgument
  // for a service_leader that is not a task of the cluster.
  static absl::StatusOr<std::unique_ptr<ServerCoordination>> Create(
      ServerCoordinationOptions options);
  ~ServerCoordination();  // Stop()

  // The gRPC service to serve on this server's port when this task is the
  // leader; null otherwise.
  grpc::Service* service();

  // Starts registering and watching; `bound_port` is this server's port
  // (the leader's own agent connects there).
  void Start(int bound_port);
  // Shuts the agent down (this task leaves the job cleanly), stops the
  // watch and the hosted service. Idempotent.
  void Stop();

  // "/job:J/replica:0/task:T" of the leader ("" under a launcher).
  const std::string& leader() const { return leader_; }

  // This task's agent, once it has registered with the service, so that
  // higher layers (the distribute coordinator's worker barrier) share the
  // task's one registration instead of registering it a second time. The
  // agent stays valid until Stop(). Blocks until registered, `deadline`
  // (this Env's clock) or Stop.
  // Errors: DeadlineExceeded (not registered by `deadline`; names the
  // service address), FailedPrecondition (stopped).
  absl::StatusOr<coord::CoordinationAgent*> WaitForAgent(absl::Time deadline);

 private:
  explicit ServerCoordination(ServerCoordinationOptions options);
  void AgentLoop();
  void WatchLoop();
  // Sleeps until `deadline` or Stop; false when stopped.
  bool WaitUnlessStopped(absl::Time deadline);

  ServerCoordinationOptions options_;
  Env* env_ = nullptr;
  std::string leader_;
  std::string address_;  // Where the service is; set by Start.
  absl::Duration heartbeat_timeout_ = absl::Seconds(10);
  std::unique_ptr<coord::CoordinationService> hosted_;
  std::unique_ptr<coord::GrpcCoordinationService> hosted_grpc_;
  std::thread agent_thread_;
  std::thread watch_thread_;

  absl::Mutex mu_;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  coord::CallCancellation* watch_call_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::unique_ptr<coord::CoordinationAgent> agent_ ABSL_GUARDED_BY(mu_);
  bool agent_registered_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace cohort::runtime

#endif  // COHORT_RUNTIME_SERVER_COORDINATION_H_
