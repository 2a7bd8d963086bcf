#include "cohort/coord/coordination_server.h"

#include <sys/resource.h>

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "cohort/base/logging.h"

namespace cohort::coord {

absl::StatusOr<std::unique_ptr<CoordinationServer>> CoordinationServer::Start(
    CoordinationServerOptions options) {
  std::unique_ptr<CoordinationServer> server(new CoordinationServer());
  auto service = CoordinationService::Create(options.service);
  if (!service.ok()) return service.status();
  server->service_ = std::move(*service);
  server->grpc_service_ = std::make_unique<GrpcCoordinationService>(
      server->service_.get(), options.security.job_token);
  // The job's other control-plane services share the gRPC server: same
  // port, same credentials and token check.
  server->extra_grpc_ = std::move(options.grpc_services);
  server->extra_framed_ = std::move(options.framed_services);
  if (!options.serve_framed && !server->extra_framed_.empty()) {
    return absl::InvalidArgumentError(
        "CoordinationServerOptions.framed_services need serve_framed: a "
        "framed service without the framed endpoint would never be served");
  }
  std::vector<grpc::Service*> grpc_services = {server->grpc_service_.get()};
  for (const std::shared_ptr<grpc::Service>& s : server->extra_grpc_) {
    if (s == nullptr) {
      return absl::InvalidArgumentError(
          "CoordinationServerOptions.grpc_services holds a null service");
    }
    grpc_services.push_back(s.get());
  }
  auto grpc_server =
      rpc::StartGrpcServer(options.address, grpc_services, options.security);
  if (!grpc_server.ok()) return grpc_server.status();
  server->server_ = std::move(grpc_server->server);
  server->port_ = grpc_server->port;
  const size_t colon = options.address.rfind(':');
  server->host_ = colon == std::string::npos ? options.address
                                             : options.address.substr(0, colon);
  // The framed endpoint listens where gRPC does; the target clients are
  // given names this machine when that is every address.
  const std::string bind_host =
      server->host_.empty() ? "0.0.0.0" : server->host_;
  if (server->host_.empty() || server->host_ == "0.0.0.0" ||
      server->host_ == "[::]") {
    server->host_ = "127.0.0.1";
  }
  // The framed fast path beside gRPC, on the same host, with the same
  // token. It has no TLS: with TLS configured only gRPC serves.
  if (options.serve_framed && !options.security.tls()) {
    server->framed_service_ =
        std::make_unique<FramedCoordinationService>(server->service_.get());
    rpc::FramedServerOptions framed;
    framed.name = "coordination service (framed)";
    framed.host = bind_host;
    if (!options.framed_address.empty()) {
      const size_t at = options.framed_address.rfind(':');
      if (at == std::string::npos ||
          !absl::SimpleAtoi(options.framed_address.substr(at + 1),
                            &framed.port)) {
        return absl::InvalidArgumentError(absl::StrCat("framed_address \"",
                                                       options.framed_address,
                                                       "\" is not host:port"));
      }
      framed.host = options.framed_address.substr(0, at);
    }
    framed.job_token = options.security.job_token;
    framed.identity = kFramedCoordinationIdentity;
    framed.insecure = options.security.insecure;
    // An agent holds a few connections (its calls, heartbeats and error
    // polling each take one): room for a thousand tasks or more, within
    // this process's file descriptors (FramedServer leaves one spare).
    struct rlimit files;
    const int fd_room =
        getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur != RLIM_INFINITY
            ? static_cast<int>(std::min<rlim_t>(files.rlim_cur, 1 << 20)) / 2
            : 4096;
    framed.max_connections = std::max(64, std::min(4096, fd_room));
    // The other framed services share the listener, told apart by the
    // identity each client proves in its handshake.
    std::vector<rpc::FramedServer::Route> routes;
    for (const FramedService& f : server->extra_framed_) {
      routes.push_back({f.identity, f.handler.get()});
    }
    auto framed_server = rpc::FramedServer::Start(
        framed, server->framed_service_.get(), std::move(routes));
    if (!framed_server.ok()) return framed_server.status();
    server->framed_server_ = std::move(*framed_server);
  }
  COHORT_LOG(INFO) << "coordination service listening on " << server->target()
                   << (server->framed_server_ != nullptr
                           ? " and " + server->framed_target()
                           : std::string())
                   << " (service incarnation "
                   << server->service_->incarnation() << ")";
  return server;
}

CoordinationServer::~CoordinationServer() { Stop(); }

std::string CoordinationServer::target() const {
  return absl::StrCat(host_, ":", port_);
}

std::string CoordinationServer::framed_target() const {
  if (framed_server_ == nullptr) return std::string();
  // Bound on every address: clients on this machine dial host_.
  std::string address = framed_server_->address();
  if (absl::StartsWith(address, "0.0.0.0:")) {
    address = absl::StrCat(host_, address.substr(address.find(':')));
  }
  return absl::StrCat(kFramedTargetPrefix, address);
}

void CoordinationServer::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (stopped_) return;
    stopped_ = true;
  }
  // Start() may have failed half-way (e.g. the address was refused): stop
  // only what exists.
  if (service_ != nullptr) service_->Stop();
  // The service answered every parked call; the loop writes what it can.
  framed_server_.reset();
  if (server_ == nullptr) return;
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  server_->Wait();
}

}  // namespace cohort::coord
