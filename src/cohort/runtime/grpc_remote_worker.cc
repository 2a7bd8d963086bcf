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
      // not there now. Unavailable = retry or recover (DESIGN.md).
      return absl::UnavailableError(absl::StrCat(
          target.task, " (", target.address, ") is unavailable: ", s.message(),
          ". Additional GRPC error information from remote target ",
          target.task));
  }
}

// The response and request belong to the caller until `done`; the call's
// context is released before `done` runs, not when gRPC frees the callback.
#define COHORT_RUNTIME_GRPC_REMOTE_IMPL_(Name)                              \
  void GrpcRemoteWorker::Name##Async(                                       \
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

// --- Tensor data plane ----------------------------------------------------

bool GrpcRemoteWorker::UsesTensorDataPlane() const {
  absl::MutexLock lock(&data_mu_);
  return data_plane_ == DataPlane::kAvailable;
}

void GrpcRemoteWorker::RecvTensorValueAsync(CallOptions* opts,
                                            const RecvTensorRequest* request,
                                            RecvTensorValue* value,
                                            StatusCallback done) {
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
  if (client != nullptr) {
    return RecvOverDataPlane(client, opts, request, value, std::move(done));
  }
  if (probe) return ProbeDataPlane(opts, request, value, std::move(done));
  // No data plane (yet): gRPC RecvTensor, decoded.
  WorkerInterface::RecvTensorValueAsync(opts, request, value, std::move(done));
}

void GrpcRemoteWorker::ProbeDataPlane(CallOptions* opts,
                                      const RecvTensorRequest* request,
                                      RecvTensorValue* value,
                                      StatusCallback done) {
  struct Probe {
    CallOptions opts;
    GetStatusRequest request;
    GetStatusResponse response;
  };
  auto probe = std::make_shared<Probe>();
  // Bounded by the RecvTensor's own deadline: the probe is part of it.
  probe->opts.set_deadline(opts != nullptr ? opts->deadline()
                                           : absl::InfiniteFuture());
  GetStatusAsync(
      &probe->opts, &probe->request, &probe->response,
      [this, probe, opts, request, value,
       done = std::move(done)](const absl::Status& s) mutable {
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
            data_clients_.push_back(std::make_unique<TensorDataClient>(
                target_->task, absl::StrCat(host->host, ":", port),
                security_.job_token));
            client = data_clients_.back().get();
          }
          // A failed probe (the task is not up yet) is retried by the next
          // RecvTensor; an answer without a port is final for this peer.
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
        if (client != nullptr) {
          RecvOverDataPlane(client, opts, request, value, std::move(done));
        } else {
          WorkerInterface::RecvTensorValueAsync(opts, request, value,
                                                std::move(done));
        }
      });
}

void GrpcRemoteWorker::RecvOverDataPlane(TensorDataClient* client,
                                         CallOptions* opts,
                                         const RecvTensorRequest* request,
                                         RecvTensorValue* value,
                                         StatusCallback done) {
  client->RecvAsync(opts, request, value,
                    [this, client, opts, request, value,
                     done = std::move(done)](const absl::Status& s) mutable {
                      if (absl::IsUnavailable(s)) {
                        // The target may have restarted on another tensor port:
                        // probe again.
                        absl::MutexLock lock(&data_mu_);
                        if (data_client_ == client)
                          data_plane_ = DataPlane::kUnknown;
                      }
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
