// BarrierGrpcService: the gRPC face of a BarrierCoordinator (proto
// cohort.BarrierCoordinatorService). It only converts: each Sync RPC becomes
// one BarrierCoordinator::Sync whose reactor stays parked in the coordinator
// until the sync completes, fails or times out. A cancelled RPC (the task
// died or cancelled its call) withdraws its request from the sync. A call
// without the job token is answered Unauthenticated and never reaches the
// coordinator.
//
//   BarrierCoordinator coordinator(Env::Default(), absl::Seconds(30));
//   BarrierGrpcService service(&coordinator, job_token);
//   grpc::ServerBuilder builder;  builder.RegisterService(&service); ...
//
// Thread safety: thread-safe; the coordinator must outlive the server.
#ifndef COHORT_BARRIER_BARRIER_GRPC_SERVICE_H_
#define COHORT_BARRIER_BARRIER_GRPC_SERVICE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cohort/barrier.grpc.pb.h"
#include "cohort/barrier/barrier_coordinator.h"
#include "cohort/rpc/transport.h"
#include "grpcpp/grpcpp.h"

namespace cohort::barrier {

class BarrierGrpcService final
    : public cohort::BarrierCoordinatorService::CallbackService {
 public:
  // An empty `job_token` accepts every caller.
  BarrierGrpcService(BarrierCoordinator* coordinator, std::string job_token)
      : coordinator_(coordinator), job_token_(std::move(job_token)) {}

  grpc::ServerUnaryReactor* Sync(
      grpc::CallbackServerContext* context,
      const cohort::BarrierSyncRequest* request,
      cohort::BarrierSyncResponse* response) override;

 private:
  BarrierCoordinator* const coordinator_;
  const std::string job_token_;
};

// A gRPC server on `host:port` (port 0: chosen by the OS) that serves only
// the barrier coordinator. Used by `cohort launch`, tests and benchmarks.
class BarrierServer {
 public:
  // Starts serving the coordinator with `security` (the job token every
  // call must carry, TLS). Errors as rpc::StartGrpcServer. Never blocks
  // beyond the bind.
  static absl::StatusOr<std::unique_ptr<BarrierServer>> Start(
      BarrierCoordinator* coordinator, const std::string& host, int port,
      const rpc::TransportSecurity& security);
  // Shuts the server down (pending syncs are cancelled) and waits for it.
  ~BarrierServer();

  // "host:port" with the port actually bound.
  const std::string& address() const { return address_; }

 private:
  BarrierServer() = default;
  std::unique_ptr<BarrierGrpcService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
};

}  // namespace cohort::barrier

#endif  // COHORT_BARRIER_BARRIER_GRPC_SERVICE_H_
