#include "cohort/runtime/grpc_remote_worker.h"

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "cohort/base/logging.h"
#include "cohort/rpc/socket.h"
#include "cohort/rpc/status_conversion.h"
#include "cohort/runtime/worker_errors.h"

namespace cohort::runtime {

GrpcRemoteWorker::GrpcRemoteWorker(std::string task, std::string address,
                                   std::shared_ptr<grpc::Channel> channel,
                                   rpc::TransportSecurity security)
    : target_(std::make_shared<const Target>(
          Target{std::move(task), std::move(address)})),
      stub_(WorkerService::NewStub(channel)),
      security_(std::move(security)) {}

std::shared_ptr<GrpcRemoteWorker::Call> GrpcRemoteWorker::StartCall(
    CallOptions* opts) const {
  auto call = std::make_shared<Call>();
  rpc::AttachJobToken(&call->context, security_);
  if (opts == nullptr) return call;
  const absl::Time deadline = opts->deadline();
  if (deadline != absl::InfiniteFuture()) {
    call->context.set_deadline(absl::ToChronoTime(deadline));
  }
  // Weak: the cancel callback may outlive the call (StartCancel can be
  // running while the call completes). TryCancel before the call starts is
  // fine: gRPC cancels it as soon as it starts.
  std::weak_ptr<Call> weak = call;
  opts->SetCancelCallback([weak] {
    if (auto live = weak.lock()) {
      live->cancelling.store(std::this_thread::get_id());
      live->context.TryCancel();
      live->cancelling.store(std::thread::id());
    }
  });
  return call;
}

absl::Status GrpcRemoteWorker::Convert(const grpc::Status& grpc_status,
                                       const Target& target, const char* rpc) {
  absl::Status s = rpc::FromGrpcStatus(grpc_status);
  if (s.ok()) return s;
  // The remote worker answered: pass its status on untouched.
  if (rpc::AnsweredByService(grpc_status)) return s;
  const std::string where =
      absl::StrCat(rpc, " to ", target.task, " (", target.address, ")");
  switch (s.code()) {
    case absl::StatusCode::kCancelled:
      return absl::CancelledError(
          absl::StrCat(where, " was cancelled: ", s.message()));
    case absl::StatusCode::kDeadlineExceeded:
      return absl::DeadlineExceededError(absl::StrCat(
          where, " did not finish before its deadline: ", s.message()));
    case absl::StatusCode::kResourceExhausted:
    case absl::StatusCode::kUnimplemented:
    case absl::StatusCode::kUnauthenticated:
    case absl::StatusCode::kPermissionDenied:
    case absl::StatusCode::kInvalidArgument:
      // Retrying would not help; say so through the code.
      return absl::Status(
          s.code(), absl::StrCat(where, " failed in transport: ", s.message()));
    default:
      // Connection refused, reset, DNS, TLS handshake, and the Unknown or
      // Internal gRPC reports for a peer that died mid-call: the task is
      // not there now. Unavailable = retry or recover (docs/architecture.md).
      return absl::UnavailableError(absl::StrCat(
          target.task, " (", target.address, ") is unavailable: ", s.message(),
          ". Additional GRPC error information from remote target ",
          target.task));
  }
}

// The response and request belong to the caller until `done`; the call's
// context is released before `done` runs, not when gRPC frees the callback.
#define COHORT_RUNTIME_GRPC_REMOTE_IMPL_(Name)                              \
  void GrpcRemoteWorker::Grpc##Name(                                        \
      CallOptions* opts, const Name##Request* request,                      \
      Name##Response* response, StatusCallback done) {                      \
    std::shared_ptr<Call> call = StartCall(opts);                           \
    grpc::ClientContext* context = &call->context;                          \
    stub_->async()->Name(                                                   \
        context, request, response,                                         \
        [call = std::move(call), opts, target = target_,                    \
         done = std::move(done)](grpc::Status status) mutable {             \
          /* Wait for a cancel callback on another thread, so the */        \
          /* caller may free opts after done; not when gRPC completes */    \
          /* the call inline in that callback: it would wait for itself. */ \
          if (opts != nullptr &&                                            \
              call->cancelling.load() != std::this_thread::get_id()) {      \
            opts->ClearCancelCallback();                                    \
          }                                                                 \
          call.reset();                                                     \
          done(Convert(status, *target, #Name));                            \
        });                                                                 \
  }
COHORT_WORKER_RPCS(COHORT_RUNTIME_GRPC_REMOTE_IMPL_)
#undef COHORT_RUNTIME_GRPC_REMOTE_IMPL_

// Every RPC but RunGraph is a plain gRPC call.
#define COHORT_RUNTIME_GRPC_FORWARD_(Name)                \
  void GrpcRemoteWorker::Name##Async(                     \
      CallOptions* opts, const Name##Request* request,    \
      Name##Response* response, StatusCallback done) {    \
    Grpc##Name(opts, request, response, std::move(done)); \
  }
COHORT_RUNTIME_GRPC_FORWARD_(GetStatus)
COHORT_RUNTIME_GRPC_FORWARD_(CreateWorkerSession)
COHORT_RUNTIME_GRPC_FORWARD_(DeleteWorkerSession)
COHORT_RUNTIME_GRPC_FORWARD_(RegisterGraph)
COHORT_RUNTIME_GRPC_FORWARD_(DeregisterGraph)
COHORT_RUNTIME_GRPC_FORWARD_(CleanupGraph)
COHORT_RUNTIME_GRPC_FORWARD_(CleanupAll)
COHORT_RUNTIME_GRPC_FORWARD_(RecvTensor)
COHORT_RUNTIME_GRPC_FORWARD_(CompleteGroup)
COHORT_RUNTIME_GRPC_FORWARD_(CompleteInstance)
#undef COHORT_RUNTIME_GRPC_FORWARD_

void GrpcRemoteWorker::RunGraphAsync(CallOptions* opts,
                                     const RunGraphRequest* request,
                                     RunGraphResponse* response,
                                     StatusCallback done) {
  WithDataPlane(
      opts != nullptr ? opts->deadline() : absl::InfiniteFuture(),
      [this, opts, request, response,
       done = std::move(done)](TensorDataClient* client) mutable {
        if (client == nullptr) {
          return GrpcRunGraph(opts, request, response, std::move(done));
        }
        RunOverDataPlane(client, opts, request, response, std::move(done));
      });
}

void GrpcRemoteWorker::RunOverDataPlane(TensorDataClient* client,
                                        CallOptions* opts,
                                        const RunGraphRequest* request,
                                        RunGraphResponse* response,
                                        StatusCallback done) {
  client->RunGraphAsync(
      opts, request, response,
      [this, client, opts, request, response,
       done = std::move(done)](const absl::Status& s) mutable {
        ForgetDataPlaneOn(client, s);
        // Nothing was sent (the peer moved, or the request is too large for
        // the data plane): gRPC reaches a restarted target or carries the
        // large request; a dead one is reported as it always was.
        if (TensorDataClient::IsNotConnected(s)) {
          response->Clear();
          return GrpcRunGraph(opts, request, response, std::move(done));
        }
        done(s);
      });
}

// --- Tensor data plane ----------------------------------------------------

bool GrpcRemoteWorker::UsesTensorDataPlane() const {
  absl::MutexLock lock(&data_mu_);
  return data_plane_ == DataPlane::kAvailable;
}

void GrpcRemoteWorker::RecvTensorValueAsync(CallOptions* opts,
                                            const RecvTensorRequest* request,
                                            RecvTensorValue* value,
                                            StatusCallback done) {
  WithDataPlane(opts != nullptr ? opts->deadline() : absl::InfiniteFuture(),
                [this, opts, request, value,
                 done = std::move(done)](TensorDataClient* client) mutable {
                  if (client == nullptr) {
                    // No data plane (yet): gRPC RecvTensor, decoded.
                    return WorkerInterface::RecvTensorValueAsync(
                        opts, request, value, std::move(done));
                  }
                  RecvOverDataPlane(client, opts, request, value,
                                    std::move(done));
                });
}

void GrpcRemoteWorker::WithDataPlane(
    absl::Time deadline, std::function<void(TensorDataClient*)> then) {
  TensorDataClient* client = nullptr;
  bool probe = false;
  {
    absl::MutexLock lock(&data_mu_);
    if (data_plane_ == DataPlane::kUnknown) {
      // The framed transport has no TLS: where TLS protects gRPC, tensors
      // stay on gRPC.
      data_plane_ = security_.tls() ? DataPlane::kNone : DataPlane::kProbing;
      probe = data_plane_ == DataPlane::kProbing;
    }
    if (data_plane_ == DataPlane::kAvailable) client = data_client_;
  }
  if (probe) return ProbeDataPlane(deadline, std::move(then));
  // While another call probes, this one goes over gRPC.
  then(client);
}

void GrpcRemoteWorker::ProbeDataPlane(
    absl::Time deadline, std::function<void(TensorDataClient*)> then) {
  struct Probe {
    CallOptions opts;
    GetStatusRequest request;
    GetStatusResponse response;
  };
  auto probe = std::make_shared<Probe>();
  // Bounded by the first call's own deadline: the probe is part of it.
  probe->opts.set_deadline(deadline);
  GrpcGetStatus(
      &probe->opts, &probe->request, &probe->response,
      [this, probe, then = std::move(then)](const absl::Status& s) {
        // The framed transport connects to dotted IPv4 only.
        const std::string& address = target_->address;
        absl::StatusOr<rpc::HostPort> host = rpc::ParseHostPort(
            absl::StartsWith(address, "localhost:")
                ? absl::StrCat("127.0.0.1", address.substr(9))
                : address);
        const int port = s.ok() ? probe->response.tensor_port() : 0;
        TensorDataClient* client = nullptr;
        {
          absl::MutexLock lock(&data_mu_);
          if (port > 0 && host.ok()) {
            const std::string data_address =
                absl::StrCat(host->host, ":", port);
            // The same port again (the peer did not restart): the client
            // we have, so re-probes never pile clients up.
            for (const auto& c : data_clients_) {
              if (c->address() == data_address) client = c.get();
            }
            if (client == nullptr) {
              data_clients_.push_back(std::make_unique<TensorDataClient>(
                  target_->task, data_address, security_.job_token));
              client = data_clients_.back().get();
            }
          }
          // A failed probe (the task is not up yet) is retried by the next
          // call; an answer without a port is final for this peer.
          data_plane_ = client != nullptr ? DataPlane::kAvailable
                        : s.ok()          ? DataPlane::kNone
                                          : DataPlane::kUnknown;
          data_client_ = client;
        }
        // Once per peer (and per restart): which path its tensors take.
        COHORT_LOG(INFO) << "tensors from " << target_->task << " go over "
                         << (client != nullptr
                                 ? absl::StrCat("its tensor data plane at ",
                                                client->address())
                                 : absl::StrCat(
                                       "gRPC RecvTensor (probe: ", s.ToString(),
                                       ", port ", port, ")"));
        then(client);
      });
}

void GrpcRemoteWorker::ForgetDataPlaneOn(TensorDataClient* client,
                                         const absl::Status& s) {
  // Only the transport's own Unavailable (cannot connect, connection lost)
  // says the port may have moved; the peer's worker answering Unavailable
  // (a step that failed because some other task is down) does not.
  if (!absl::IsUnavailable(s) || !TensorDataClient::IsTransportFailure(s)) {
    return;
  }
  absl::MutexLock lock(&data_mu_);
  if (data_client_ == client) data_plane_ = DataPlane::kUnknown;
}

void GrpcRemoteWorker::RecvOverDataPlane(TensorDataClient* client,
                                         CallOptions* opts,
                                         const RecvTensorRequest* request,
                                         RecvTensorValue* value,
                                         StatusCallback done) {
  client->RecvAsync(opts, request, value,
                    [this, client, opts, request, value,
                     done = std::move(done)](const absl::Status& s) mutable {
                      ForgetDataPlaneOn(client, s);
                      if (TensorDataClient::IsNotConnected(s)) {
                        // Nothing was sent, so this call may go over gRPC
                        // instead, which reaches a restarted target (or reports
                        // a dead one as it always has); the next call probes
                        // for the new tensor port.
                        return WorkerInterface::RecvTensorValueAsync(
                            opts, request, value, std::move(done));
                      }
                      done(s);
                    });
}

}  // namespace cohort::runtime
