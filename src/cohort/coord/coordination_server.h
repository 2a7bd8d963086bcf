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
// Other services of the job's control plane (the barrier coordinator:
// barrier/barrier_control_plane.h) ride on the same server: their gRPC
// services are registered on its gRPC server and their framed handlers on
// its framed listener, reached by the identity a client names in the framed
// handshake (rpc/framed_server.h, "Several services, one port"). One
// endpoint per transport, one job token, no extra listening socket.
//
// Why gRPC and the framed transport keep two ports: the framed handshake
// starts with the server's greeting (its nonce), while a gRPC client starts
// with its own preface. One port would have to wait on every connection to
// see whether the client speaks first, charging each framed connect that
// wait; two listeners of one server object cost one more port and nothing
// per connection.
//
// Thread safety: thread-safe.
#ifndef COHORT_COORD_COORDINATION_SERVER_H_
#define COHORT_COORD_COORDINATION_SERVER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "cohort/coord/coordination_service.h"
#include "cohort/coord/framed_coordination.h"
#include "cohort/coord/grpc_coordination_service.h"
#include "cohort/rpc/framed_server.h"
#include "cohort/rpc/transport.h"

namespace cohort::coord {

// A framed service served beside the coordination service on its framed
// listener: connections whose handshake names `identity` go to `handler`.
struct FramedService {
  std::string identity;
  std::shared_ptr<rpc::FramedServer::Handler> handler;
};

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

  // More services of the job on this server's endpoints. The server holds
  // them until it is destroyed; whatever they point to must outlive it.
  // gRPC services are registered before the server starts and see the same
  // transport security (the server's token check runs before any handler;
  // each service must still call rpc::CheckJobToken). Framed services need
  // serve_framed (InvalidArgument without it) and, like the coordination
  // service's own framed path, are not served with TLS; their identities
  // must differ from kFramedCoordinationIdentity and each other.
  std::vector<std::shared_ptr<grpc::Service>> grpc_services;
  std::vector<FramedService> framed_services;
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
  // The options' extra services: declared first, so released only after
  // the servers that use them are gone.
  std::vector<std::shared_ptr<grpc::Service>> extra_grpc_;
  std::vector<FramedService> extra_framed_;
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
