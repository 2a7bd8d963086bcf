// Server: one task of a cluster, as TensorFlow's GrpcServer: configured
// from a ServerDef, it hosts a Master (for clients) and a Worker (for
// masters and peer workers) behind one gRPC port (docs/runtime.md).
//
//   COHORT_ASSIGN_OR_RETURN(auto server, Server::Create(server_def, {}));
//   COHORT_RETURN_IF_ERROR(server->Start());
//   std::cout << "serving " << server->target() << "\n";
//   server->Join();                      // until another thread Stop()s
//
// Configuration errors, checked by Create in this order (nothing listens
// after a failure):
//  - protocol not "" / "grpc": NotFound `No server factory registered for
//    the given ServerDef: ...`;
//  - job not in the cluster: InvalidArgument `Job "<job>" was not defined
//    in cluster`; task not in the job: InvalidArgument `Task <i> was not
//    defined in job "<job>"`;
//  - an address without a numeric port (and ServerDef.port 0):
//    InvalidArgument `Could not parse port for local server from "<addr>".`;
//  - port 0 in a cluster of more than one task: InvalidArgument naming the
//    task (its peers could not find it);
//  - the port cannot be bound: Unavailable naming host:port.
// ServerDef.port, when set, overrides the address's port.
//
// Tensor data plane: unless TLS is configured, each server also listens on
// a framed "tensor port" (same host; the job token and loopback rules as
// gRPC's) that GetStatus advertises; peers receive tensors over it
// (tensor_data_service.h) and fall back to gRPC RecvTensor without it.
//
// Coordination: every server runs a coordination agent from Start, and the
// leader hosts the service on its port, so a task that dies or hangs ends
// the steps waiting on it within the heartbeat timeout on every server
// (server_coordination.h).
//
// Lifecycle: Create binds the port; Start starts serving (again: OK);
// Stop is a clean stop: new calls get Unavailable `server <task> is
// stopping`, running steps end with that status, master sessions are
// closed, gRPC is shut down within a bounded grace; Join blocks until Stop
// completed. Start after Stop: FailedPrecondition `Server has stopped.`.
// Destroying a server stops it.
//
// Thread safety: thread-safe.
#ifndef COHORT_RUNTIME_SERVER_H_
#define COHORT_RUNTIME_SERVER_H_

#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "cohort/cluster.pb.h"
#include "cohort/rpc/transport.h"

namespace cohort {
class Device;
class Env;
namespace coord {
class CoordinationAgent;
}  // namespace coord
}  // namespace cohort

namespace cohort::runtime {

class GrpcMasterService;
class GrpcWorkerCache;
class GrpcWorkerService;
class LocalMaster;
class Master;
class ServerCoordination;
class TensorDataService;
class Worker;

// A step whose session sets no operation_timeout_in_ms (nor the step its
// own timeout) ends with DeadlineExceeded, naming the tasks still running
// it, after this long: torch.distributed's default collective timeout. A
// hung step (a Recv nobody sends, a task that stalls without losing its
// heartbeat) then ends instead of holding its caller for ever.
inline constexpr absl::Duration kDefaultStepTimeout = absl::Minutes(30);
// Threads a server's device may have: each costs a stack, and a million
// took a machine down.
inline constexpr int kMaxServerThreads = 1024;

struct ServerOptions {
  rpc::TransportSecurity security;
  Env* env = nullptr;  // Null = Env::Default().
  // Threads of the task's device; <= 0 = the ServerDef's
  // default_session_config.intra_op_parallelism_threads when positive (as
  // TensorFlow's server sizes its devices), else hardware threads; at most
  // kMaxServerThreads (InvalidArgument beyond).
  int num_threads = 0;
  // See kDefaultStepTimeout; absl::InfiniteDuration() for no limit.
  absl::Duration default_step_timeout = kDefaultStepTimeout;
  // The coordination service of a launcher this task runs under
  // (COHORT_COORDINATION_SERVICE_ADDRESS), or "": then the ServerDef's
  // coordination_config decides (server_coordination.h).
  std::string launcher_coordination_address;
};

class Server {
 public:
  static absl::StatusOr<std::unique_ptr<Server>> Create(
      const ServerDef& server_def, const ServerOptions& options = {});
  // TF's create_local_server: cluster {"localhost": ["localhost:0"]}, job
  // "localhost", task 0, on a port the OS picks; target() is
  // "grpc://localhost:<that port>". Port 0 works in any cluster of one task
  // the same way.
  static absl::StatusOr<std::unique_ptr<Server>> CreateLocal(
      const ServerOptions& options = {});
  // The configuration checks of Create (the list at the top of this file,
  // all but binding), without creating anything: OK when Create would go on
  // to bind the port.
  static absl::Status CheckServerDef(const ServerDef& server_def);
  ~Server();  // Stop()
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  absl::Status Start();
  absl::Status Stop();
  absl::Status Join();

  // "grpc://host:port" with the bound port.
  const std::string& target() const { return target_; }
  // "/job:J/replica:0/task:T".
  const std::string& task_name() const { return task_; }
  int bound_port() const { return port_; }
  Master* master() { return master_.get(); }
  Worker* worker() { return worker_.get(); }
  // The task's device (its shared resources: variables, collective groups).
  Device* device() { return device_.get(); }
  // This task's coordination agent once registered (server_coordination.h),
  // valid until Stop(); for barriers among the tasks of the job. Blocks until
  // the agent registered or `timeout` passed.
  // Errors: NotFound (this server runs no coordination), DeadlineExceeded,
  // FailedPrecondition (not started, or stopped).
  absl::StatusOr<coord::CoordinationAgent*> WaitForCoordinationAgent(
      absl::Duration timeout);
  // The tensor data plane (null under TLS).
  TensorDataService* tensor_data() { return tensor_data_.get(); }

 private:
  enum class State { kNew, kStarted, kStopped };
  // What CheckServerDef found: this task's name and where to bind.
  struct Resolved {
    std::string task;  // "/job:J/replica:0/task:T"
    std::string host;  // "localhost" when the address has none
    int port = 0;      // ServerDef.port if set, else the address's; 0: any
  };
  static absl::StatusOr<Resolved> CheckAndResolve(const ServerDef& def);
  Server() = default;
  absl::Status Init(const ServerDef& def, const ServerOptions& options);

  // Constant after Create.
  ServerDef server_def_;
  std::string task_;
  std::string target_;
  int port_ = 0;
  std::unique_ptr<Device> device_;
  std::unique_ptr<GrpcWorkerCache> worker_cache_;
  std::unique_ptr<Worker> worker_;
  std::unique_ptr<Master> master_;
  // master_ for GrpcSessions of this process (none with TLS).
  std::shared_ptr<LocalMaster> local_master_;
  std::unique_ptr<GrpcWorkerService> worker_service_;
  std::unique_ptr<GrpcMasterService> master_service_;
  // Null under TLS (the framed transport has none; tensors stay on gRPC).
  std::unique_ptr<TensorDataService> tensor_data_;
  std::unique_ptr<ServerCoordination> coordination_;  // Null: none.
  Env* env_ = nullptr;
  rpc::GrpcServer grpc_;

  absl::Mutex mu_;
  State state_ ABSL_GUARDED_BY(mu_) = State::kNew;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;   // Stop() began.
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;  // Stop() finished.
};

}  // namespace cohort::runtime

#endif  // COHORT_RUNTIME_SERVER_H_
