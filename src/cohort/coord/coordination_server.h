// CoordinationServer: a CoordinationService served over gRPC (and, when
// asked, over the framed transport, framed_coordination.h), embedded in
// any process (a task that is the coordination leader, `cohort
// coordinator`, or a launcher).
//
//   CoordinationServerOptions options;
//   options.service.jobs = {{"worker", 4}};
//   options.address = "127.0.0.1:0";            // the OS picks the port
//   COHORT_ASSIGN_OR_RETURN(auto server, CoordinationServer::Start(options));
//   std::string target = server->target();       // "127.0.0.1:41234"
//   ...
//   server->Stop();                               // or let it go out of scope
//
// Thread safety: thread-safe.
#ifndef COHORT_COORD_COORDINATION_SERVER_H_
#define COHORT_COORD_COORDINATION_SERVER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "cohort/coord/coordination_service.h"
#include "cohort/coord/framed_coordination.h"
#include "cohort/coord/grpc_coordination_service.h"
#include "cohort/rpc/framed_server.h"
#include "cohort/rpc/transport.h"

namespace cohort::coord {

struct CoordinationServerOptions {
  // "host:port"; port 0 lets the OS choose (read it back with port()).
  std::string address = "127.0.0.1:0";
  rpc::TransportSecurity security;
  CoordinationServiceOptions service;
  // Also serve the framed fast path (framed_coordination.h) on the same
  // host and token. Off by default until the launcher and the tools use
  // it: a port nobody needs is not opened. Ignored with TLS.
  bool serve_framed = false;
  // Where the framed endpoint listens ("host:port"); empty: `address`'s host
  // on a port the OS chooses.
  std::string framed_address;
};

class CoordinationServer {
 public:
  // InvalidArgument for bad service options; Unavailable when the address
  // cannot be bound.
  static absl::StatusOr<std::unique_ptr<CoordinationServer>> Start(
      CoordinationServerOptions options);
  ~CoordinationServer();  // Stop()

  int port() const { return port_; }
  // "host:port" with the bound port, for clients.
  std::string target() const;
  // "framed:host:port" of the framed fast path (framed_coordination.h) on
  // the same host and token; empty unless serve_framed (and never with
  // TLS).
  std::string framed_target() const;
  CoordinationService* service() { return service_.get(); }

  // Stops the service (answering every parked call) and then the gRPC
  // server. Idempotent; blocks for at most a second on lingering RPCs.
  void Stop();

 private:
  CoordinationServer() = default;

  std::string host_;
  int port_ = 0;
  std::unique_ptr<CoordinationService> service_;
  std::unique_ptr<GrpcCoordinationService> grpc_service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<FramedCoordinationService> framed_service_;
  std::unique_ptr<rpc::FramedServer> framed_server_;
  absl::Mutex mu_;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace cohort::coord

#endif  // COHORT_COORD_COORDINATION_SERVER_H_
