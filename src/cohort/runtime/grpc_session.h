// GrpcSession: a Session (graph/session.h) whose graph runs on a cluster,
// through the master of the task at `target` ("grpc://host:port"). Code
// written for LocalSession runs unchanged:
//
//   GrpcSessionOptions options;
//   options.security.job_token = token;     // COHORT_JOB_TOKEN
//   COHORT_ASSIGN_OR_RETURN(auto session,
//       GrpcSession::Create("grpc://127.0.0.1:2222", graph_def, options));
//   COHORT_RETURN_IF_ERROR(session->Run({{"x", x}}, {"y:0"}, {}, &out));
//
// When `target` is the server of this very process (and the session holds
// its job token, without TLS), calls go to that master in process
// (local_master.h, TensorFlow's LocalMaster): same requests, answers and
// errors, no gRPC.
//
// Contract: as Session. Errors are the master's (codes and messages cross
// the wire unchanged); a master that cannot be reached is Unavailable
// naming the target. Every Run carries a fresh request id, so a retried
// RunStep is refused by the master rather than run twice. A step's
// deadline (RunOptions::timeout or the session default) also bounds the
// RPC, with a little margin so that the master's DeadlineExceeded, which
// says what it waited for, arrives first.
//
// Thread safety: thread-safe.
#ifndef COHORT_RUNTIME_GRPC_SESSION_H_
#define COHORT_RUNTIME_GRPC_SESSION_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "cohort/config.pb.h"
#include "cohort/graph/session.h"
#include "cohort/master.grpc.pb.h"
#include "cohort/rpc/transport.h"
#include "cohort/runtime/local_master.h"

namespace cohort::runtime {

struct GrpcSessionOptions {
  ConfigProto config;  // Its operation_timeout_in_ms is the default deadline.
  rpc::TransportSecurity security;
  // Bounds calls that are not steps (CreateSession included).
  absl::Duration rpc_timeout = absl::Seconds(120);
};

class GrpcSession : public Session {
 public:
  // InvalidArgument for a target that is not grpc://host:port.
  static absl::StatusOr<std::unique_ptr<GrpcSession>> Create(
      const std::string& target, const GraphDef& graph,
      const GrpcSessionOptions& options = GrpcSessionOptions());
  // Reset without a session: MasterService.Reset on `target`.
  static absl::Status ResetTarget(const std::string& target,
                                  const std::vector<std::string>& containers,
                                  const GrpcSessionOptions& options);
  ~GrpcSession() override;  // Close()

  absl::Status Extend(const GraphDef& graph) override;
  absl::Status Run(const RunOptions& options,
                   const std::vector<std::pair<std::string, Tensor>>& feeds,
                   const std::vector<std::string>& fetches,
                   const std::vector<std::string>& targets,
                   std::vector<Tensor>* outputs) override;
  using Session::Run;
  absl::StatusOr<CallableHandle> MakeCallable(
      const CallableOptions& options) override;
  absl::Status RunCallable(CallableHandle handle,
                           const std::vector<Tensor>& feeds,
                           std::vector<Tensor>* fetches,
                           const RunOptions* options = nullptr) override;
  absl::Status ReleaseCallable(CallableHandle handle) override;
  absl::Status Close() override;
  absl::Status Reset(const std::vector<std::string>& containers) override;

  // The devices of the session (ListDevices).
  absl::StatusOr<std::vector<DeviceAttributes>> ListDevices();
  const std::string& handle() const { return handle_; }

 private:
  GrpcSession(std::shared_ptr<grpc::Channel> channel,
              std::shared_ptr<LocalMaster> local,
              const GrpcSessionOptions& options);
  // One master call, in process or over gRPC, bounded by `timeout`
  // (InfiniteDuration = none).
  template <typename Request, typename Response>
  absl::Status Call(grpc::Status (MasterService::Stub::*rpc)(
                        grpc::ClientContext*, const Request&, Response*),
                    const Request& request, Response* response,
                    absl::Duration timeout);
  // A client context with the token and a deadline `timeout` from now
  // (InfiniteDuration = none).
  std::unique_ptr<grpc::ClientContext> NewContext(absl::Duration timeout);
  absl::Duration StepRpcTimeout(absl::Duration step_timeout) const;
  absl::Status CheckOpen() const;

  // Constant after Create.
  GrpcSessionOptions options_;
  std::unique_ptr<MasterService::Stub> stub_;  // Null when local_ is set.
  std::shared_ptr<LocalMaster> local_;
  std::string target_;
  std::string handle_;

  mutable absl::Mutex mu_;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  int64_t graph_version_ ABSL_GUARDED_BY(mu_) = 0;
  // Per callable: its own timeout (for the RPC deadline).
  absl::flat_hash_map<CallableHandle, absl::Duration> callable_timeouts_
      ABSL_GUARDED_BY(mu_);
};

// "grpc://host:port" -> "host:port"; InvalidArgument otherwise.
absl::StatusOr<std::string> ParseGrpcTarget(const std::string& target);

}  // namespace cohort::runtime

#endif  // COHORT_RUNTIME_GRPC_SESSION_H_
