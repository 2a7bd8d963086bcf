// BarrierGrpcService: the gRPC face of a BarrierCoordinator (proto
// cohort.BarrierCoordinatorService). It only converts: each Sync RPC becomes
// one BarrierCoordinator::Sync whose reactor stays parked in the coordinator
// until the sync completes, fails or times out. A cancelled RPC (the task
// died or cancelled its call) withdraws its request from the sync.
//
//   BarrierCoordinator coordinator(Env::Default(), absl::Seconds(30));
//   BarrierGrpcService service(&coordinator);
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
#include "grpcpp/grpcpp.h"

namespace cohort::barrier {

class BarrierGrpcService final
    : public cohort::BarrierCoordinatorService::CallbackService {
 public:
  explicit BarrierGrpcService(BarrierCoordinator* coordinator)
      : coordinator_(coordinator) {}

  grpc::ServerUnaryReactor* Sync(
      grpc::CallbackServerContext* context,
      const cohort::BarrierSyncRequest* request,
      cohort::BarrierSyncResponse* response) override;

 private:
  BarrierCoordinator* const coordinator_;
};

// A gRPC server on `host:port` (port 0: chosen by the OS) that serves only
// the barrier coordinator. Used by `cohort launch`, tests and benchmarks.
class BarrierServer {
 public:
  // Starts serving the coordinator, plus `extra_services` (not owned; they
  // must outlive the server) on the same port. Unavailable naming the
  // address when it cannot bind. Never blocks beyond the bind.
  static absl::StatusOr<std::unique_ptr<BarrierServer>> Start(
      BarrierCoordinator* coordinator, const std::string& host = "127.0.0.1",
      int port = 0, const std::vector<grpc::Service*>& extra_services = {});
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
