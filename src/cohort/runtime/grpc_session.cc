#include "cohort/runtime/grpc_session.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "cohort/base/status.h"
#include "cohort/rpc/status_conversion.h"
#include "cohort/runtime/call_options.h"

namespace cohort::runtime {
namespace {

// The master answers a timed-out step itself, naming what it waited for;
// the RPC deadline leaves it this long to do so.
constexpr absl::Duration kStepRpcMargin = absl::Seconds(5);

// Errors from gRPC itself (the master unreachable) name the target; errors
// the master returned pass unchanged.
absl::Status FromRpc(const grpc::Status& status, const std::string& target) {
  absl::Status s = rpc::FromGrpcStatus(status);
  if (s.ok() || rpc::AnsweredByService(status)) return s;
  // gRPC's own errors (unreachable, timed out before the master answered)
  // keep their code and say which master and what to check.
  return absl::Status(
      s.code(), absl::StrCat("master at ", target, ": ", s.message(),
                             ". Check that `cohort server` runs there and "
                             "that the job token matches."));
}

}  // namespace

absl::StatusOr<std::string> ParseGrpcTarget(const std::string& target) {
  constexpr absl::string_view kScheme = "grpc://";
  if (!absl::StartsWith(target, kScheme) || target.size() == kScheme.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("no session factory for target '", target,
                     "'; expected \"\" or grpc://host:port"));
  }
  return target.substr(kScheme.size());
}

GrpcSession::GrpcSession(std::shared_ptr<grpc::Channel> channel,
                         std::shared_ptr<LocalMaster> local,
                         const GrpcSessionOptions& options)
    : options_(options),
      stub_(channel != nullptr ? MasterService::NewStub(std::move(channel))
                               : nullptr),
      local_(std::move(local)) {}

template <typename Request, typename Response>
absl::Status GrpcSession::Call(
    grpc::Status (MasterService::Stub::*rpc)(grpc::ClientContext*,
                                             const Request&, Response*),
    const Request& request, Response* response, absl::Duration timeout) {
  if (local_ != nullptr) {
    CallOptions opts;
    if (timeout != absl::InfiniteDuration()) {
      opts.set_deadline(absl::Now() + timeout);
    }
    return local_->Call(&opts, request, response);
  }
  auto ctx = NewContext(timeout);
  return FromRpc(((*stub_).*rpc)(ctx.get(), request, response), target_);
}

GrpcSession::~GrpcSession() { (void)Close(); }

std::unique_ptr<grpc::ClientContext> GrpcSession::NewContext(
    absl::Duration timeout) {
  auto ctx = std::make_unique<grpc::ClientContext>();
  rpc::AttachJobToken(ctx.get(), options_.security);
  if (timeout != absl::InfiniteDuration()) {
    ctx->set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  }
  return ctx;
}

absl::StatusOr<std::unique_ptr<GrpcSession>> GrpcSession::Create(
    const std::string& target, const GraphDef& graph,
    const GrpcSessionOptions& options) {
  COHORT_ASSIGN_OR_RETURN(std::string address, ParseGrpcTarget(target));
  CreateSessionRequest request;
  *request.mutable_graph_def() = graph;
  *request.mutable_config() = options.config;
  request.set_target(target);
  CreateSessionResponse response;
  std::shared_ptr<LocalMaster> local =
      options.security.tls()
          ? nullptr
          : LocalMaster::Find(target, options.security.job_token);
  if (local != nullptr) {
    std::unique_ptr<GrpcSession> session(
        new GrpcSession(nullptr, std::move(local), options));
    session->target_ = target;
    COHORT_RETURN_IF_ERROR(session->Call(&MasterService::Stub::CreateSession,
                                         request, &response,
                                         options.rpc_timeout));
    session->handle_ = response.session_handle();
    absl::MutexLock lock(&session->mu_);
    session->graph_version_ = response.graph_version();
    return session;
  }
  COHORT_ASSIGN_OR_RETURN(auto channel,
                          rpc::CreateChannel(address, options.security,
                                             rpc::kMaxTensorMessageBytes));
  std::unique_ptr<GrpcSession> session(
      new GrpcSession(channel, nullptr, options));
  session->target_ = target;
  // CreateSession waits for a master that is still starting. Not with
  // gRPC's wait_for_ready, which would also retry a refused TLS handshake (a
  // wrong job token) until the deadline: here only a master that is not up
  // yet (gRPC's own Unavailable, no certificate refused) is waited for, and
  // the last error is what the caller sees.
  const absl::Time deadline = options.rpc_timeout == absl::InfiniteDuration()
                                  ? absl::InfiniteFuture()
                                  : absl::Now() + options.rpc_timeout;
  for (;;) {
    auto ctx = session->NewContext(absl::InfiniteDuration());
    if (deadline != absl::InfiniteFuture()) {
      ctx->set_deadline(absl::ToChronoTime(deadline));
    }
    grpc::Status status =
        session->stub_->CreateSession(ctx.get(), request, &response);
    // The wait for a master ran out while gRPC was still trying to connect
    // (a refused or unanswered connect in flight at the deadline): that is
    // a master that cannot be reached, Unavailable as the contract says, as
    // when the deadline passes between attempts. Whether the last attempt
    // was in flight at the deadline is timing, not an answer. Only a
    // connected master that did not answer in time is DeadlineExceeded.
    if (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED &&
        !rpc::AnsweredByService(status) &&
        channel->GetState(false) != GRPC_CHANNEL_READY) {
      status = grpc::Status(
          grpc::StatusCode::UNAVAILABLE,
          absl::StrCat("no connection within the ",
                       absl::FormatDuration(options.rpc_timeout),
                       " rpc timeout (", status.error_message(), ")"));
    }
    // Unavailable from the master itself (a task it needs is lost) is an
    // answer; only gRPC's own (no master there yet) is waited out.
    if (status.error_code() != grpc::StatusCode::UNAVAILABLE ||
        rpc::AnsweredByService(status) || rpc::IsCertificateRejection(status) ||
        absl::Now() >= deadline) {
      COHORT_RETURN_IF_ERROR(FromRpc(status, target));
      break;
    }
    // Wakes when the channel's connection attempt changes state (gRPC's
    // reconnect backoff paces it), at most a second from now.
    const grpc_connectivity_state state = channel->GetState(true);
    channel->WaitForStateChange(
        state,
        absl::ToChronoTime(std::min(deadline, absl::Now() + absl::Seconds(1))));
  }
  session->handle_ = response.session_handle();
  absl::MutexLock lock(&session->mu_);
  session->graph_version_ = response.graph_version();
  return session;
}

absl::Status GrpcSession::ResetTarget(
    const std::string& target, const std::vector<std::string>& containers,
    const GrpcSessionOptions& options) {
  COHORT_ASSIGN_OR_RETURN(std::string address, ParseGrpcTarget(target));
  COHORT_ASSIGN_OR_RETURN(auto channel,
                          rpc::CreateChannel(address, options.security,
                                             rpc::kMaxTensorMessageBytes));
  auto stub = MasterService::NewStub(channel);
  ResetRequest request;
  for (const auto& c : containers) request.add_container(c);
  for (const auto& f : options.config.device_filters()) {
    request.add_device_filters(f);
  }
  ResetResponse response;
  grpc::ClientContext ctx;
  rpc::AttachJobToken(&ctx, options.security);
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + options.rpc_timeout));
  return FromRpc(stub->Reset(&ctx, request, &response), target);
}

absl::Status GrpcSession::CheckOpen() const {
  absl::MutexLock lock(&mu_);
  if (closed_) {
    return absl::FailedPreconditionError(
        "the session is closed; create a new session");
  }
  return absl::OkStatus();
}

absl::Duration GrpcSession::StepRpcTimeout(absl::Duration step_timeout) const {
  if (step_timeout <= absl::ZeroDuration() &&
      options_.config.operation_timeout_in_ms() > 0) {
    step_timeout =
        absl::Milliseconds(options_.config.operation_timeout_in_ms());
  }
  if (step_timeout <= absl::ZeroDuration()) return absl::InfiniteDuration();
  return step_timeout + kStepRpcMargin;
}

absl::Status GrpcSession::Extend(const GraphDef& graph) {
  COHORT_RETURN_IF_ERROR(CheckOpen());
  absl::MutexLock lock(&mu_);
  ExtendSessionRequest request;
  request.set_session_handle(handle_);
  *request.mutable_graph_def() = graph;
  request.set_current_graph_version(graph_version_);
  ExtendSessionResponse response;
  COHORT_RETURN_IF_ERROR(Call(&MasterService::Stub::ExtendSession, request,
                              &response, options_.rpc_timeout));
  graph_version_ = response.new_graph_version();
  return absl::OkStatus();
}

absl::Status GrpcSession::Run(
    const RunOptions& options,
    const std::vector<std::pair<std::string, Tensor>>& feeds,
    const std::vector<std::string>& fetches,
    const std::vector<std::string>& targets, std::vector<Tensor>* outputs) {
  COHORT_RETURN_IF_ERROR(CheckOpen());
  RunStepRequest request;
  request.set_session_handle(handle_);
  for (const auto& [name, value] : feeds) {
    NamedTensorProto* f = request.add_feed();
    f->set_name(name);
    value.AsProto(f->mutable_tensor());
  }
  for (const auto& f : fetches) request.add_fetch(f);
  for (const auto& t : targets) request.add_target(t);
  request.mutable_options()->set_timeout_in_ms(
      absl::ToInt64Milliseconds(options.timeout));
  request.set_request_id(NewRequestId());
  RunStepResponse response;
  COHORT_RETURN_IF_ERROR(Call(&MasterService::Stub::RunStep, request, &response,
                              StepRpcTimeout(options.timeout)));
  if (response.tensor_size() != static_cast<int>(fetches.size())) {
    return absl::InternalError(
        absl::StrCat("RunStep: the master returned ", response.tensor_size(),
                     " tensors for ", fetches.size(), " fetches"));
  }
  std::vector<Tensor> out;
  for (const NamedTensorProto& t : response.tensor()) {
    auto value = Tensor::FromProto(t.tensor());
    if (!value.ok()) {
      return absl::Status(
          value.status().code(),
          absl::StrCat("fetch '", t.name(), "': ", value.status().message()));
    }
    out.push_back(std::move(*value));
  }
  if (outputs != nullptr) *outputs = std::move(out);
  return absl::OkStatus();
}

absl::StatusOr<Session::CallableHandle> GrpcSession::MakeCallable(
    const CallableOptions& options) {
  COHORT_RETURN_IF_ERROR(CheckOpen());
  MakeCallableRequest request;
  request.set_session_handle(handle_);
  for (const auto& f : options.feeds) request.mutable_options()->add_feed(f);
  for (const auto& f : options.fetches) {
    request.mutable_options()->add_fetch(f);
  }
  for (const auto& t : options.targets) {
    request.mutable_options()->add_target(t);
  }
  request.mutable_options()->mutable_run_options()->set_timeout_in_ms(
      absl::ToInt64Milliseconds(options.run_options.timeout));
  request.set_request_id(NewRequestId());
  MakeCallableResponse response;
  COHORT_RETURN_IF_ERROR(Call(&MasterService::Stub::MakeCallable, request,
                              &response, options_.rpc_timeout));
  absl::MutexLock lock(&mu_);
  callable_timeouts_[response.handle()] = options.run_options.timeout;
  return response.handle();
}

absl::Status GrpcSession::RunCallable(CallableHandle handle,
                                      const std::vector<Tensor>& feeds,
                                      std::vector<Tensor>* fetches,
                                      const RunOptions* options) {
  COHORT_RETURN_IF_ERROR(CheckOpen());
  absl::Duration timeout = absl::ZeroDuration();
  if (options != nullptr) {
    timeout = options->timeout;
  } else {
    absl::MutexLock lock(&mu_);
    auto it = callable_timeouts_.find(handle);
    if (it != callable_timeouts_.end()) timeout = it->second;
  }
  RunCallableRequest request;
  request.set_session_handle(handle_);
  request.set_handle(handle);
  for (const Tensor& t : feeds) t.AsProto(request.add_feed());
  request.set_request_id(NewRequestId());
  RunCallableResponse response;
  COHORT_RETURN_IF_ERROR(Call(&MasterService::Stub::RunCallable, request,
                              &response, StepRpcTimeout(timeout)));
  std::vector<Tensor> out;
  for (const TensorProto& t : response.fetch()) {
    COHORT_ASSIGN_OR_RETURN(Tensor value, Tensor::FromProto(t));
    out.push_back(std::move(value));
  }
  if (fetches != nullptr) *fetches = std::move(out);
  return absl::OkStatus();
}

absl::Status GrpcSession::ReleaseCallable(CallableHandle handle) {
  COHORT_RETURN_IF_ERROR(CheckOpen());
  ReleaseCallableRequest request;
  request.set_session_handle(handle_);
  request.set_handle(handle);
  ReleaseCallableResponse response;
  COHORT_RETURN_IF_ERROR(Call(&MasterService::Stub::ReleaseCallable, request,
                              &response, options_.rpc_timeout));
  absl::MutexLock lock(&mu_);
  callable_timeouts_.erase(handle);
  return absl::OkStatus();
}

absl::Status GrpcSession::Close() {
  {
    absl::MutexLock lock(&mu_);
    if (closed_ || handle_.empty()) return absl::OkStatus();
    closed_ = true;
  }
  CloseSessionRequest request;
  request.set_session_handle(handle_);
  CloseSessionResponse response;
  return Call(&MasterService::Stub::CloseSession, request, &response,
              options_.rpc_timeout);
}

absl::Status GrpcSession::Reset(const std::vector<std::string>& containers) {
  ResetRequest request;
  for (const auto& c : containers) request.add_container(c);
  ResetResponse response;
  return Call(&MasterService::Stub::Reset, request, &response,
              options_.rpc_timeout);
}

absl::StatusOr<std::vector<DeviceAttributes>> GrpcSession::ListDevices() {
  COHORT_RETURN_IF_ERROR(CheckOpen());
  ListDevicesRequest request;
  request.set_session_handle(handle_);
  ListDevicesResponse response;
  COHORT_RETURN_IF_ERROR(Call(&MasterService::Stub::ListDevices, request,
                              &response, options_.rpc_timeout));
  std::vector<DeviceAttributes> out(response.local_device().begin(),
                                    response.local_device().end());
  out.insert(out.end(), response.remote_device().begin(),
             response.remote_device().end());
  return out;
}

}  // namespace cohort::runtime
