#include "cohort/coord/grpc_coordination_client.h"

#include "absl/strings/str_cat.h"
#include "cohort/coordination.grpc.pb.h"
#include "cohort/rpc/status_conversion.h"

namespace cohort::coord {
namespace {

class GrpcCoordinationClient : public CoordinationClient {
 public:
  GrpcCoordinationClient(std::string target,
                         std::shared_ptr<grpc::Channel> channel,
                         rpc::TransportSecurity security)
      : target_(std::move(target)),
        stub_(CoordinationRpc::NewStub(channel)),
        security_(std::move(security)) {}

#define COHORT_COORD_GRPC_CLIENT_METHOD_(Name)                                 \
  void Name##Async(const Name##Request& request, Name##Response* response,     \
                   const CallOptions& options, StatusCallback done) override { \
    auto call = std::make_shared<Call<Name##Request>>(request);                \
    Prepare(call, options);                                                    \
    std::string target = target_;                                              \
    const char* hint = transport_hint_;                                        \
    stub_->async()->Name(&call->context, &call->request, response,             \
                         [call, done = std::move(done), target,                \
                          hint](grpc::Status status) mutable {                 \
                           /* Release the context here, not when gRPC */       \
                           /* frees this callback with the call. */            \
                           call.reset();                                       \
                           done(Convert(status, target, hint, #Name));         \
                         });                                                   \
  }
  COHORT_COORDINATION_RPCS(COHORT_COORD_GRPC_CLIENT_METHOD_)
#undef COHORT_COORD_GRPC_CLIENT_METHOD_

  // Blocking calls run on the caller's thread (gRPC's synchronous stub).
  // Cancellable calls take the asynchronous path.
#define COHORT_COORD_GRPC_CLIENT_SYNC_(Name)                                \
  absl::Status Name(const Name##Request& request, Name##Response* response, \
                    const CallOptions& options) override {                  \
    if (options.cancellation != nullptr) {                                  \
      return CoordinationClient::Name(request, response, options);          \
    }                                                                       \
    grpc::ClientContext context;                                            \
    PrepareContext(context, options);                                       \
    return Convert(stub_->Name(&context, request, response), target_,       \
                   transport_hint_, #Name);                                 \
  }
  COHORT_COORDINATION_RPCS(COHORT_COORD_GRPC_CLIENT_SYNC_)
#undef COHORT_COORD_GRPC_CLIENT_SYNC_

 private:
  template <typename Request>
  struct Call {
    explicit Call(const Request& r) : request(r) {}
    grpc::ClientContext context;
    Request request;
  };

  void PrepareContext(grpc::ClientContext& context,
                      const CallOptions& options) {
    rpc::AttachJobToken(&context, security_);
    if (options.timeout != absl::InfiniteDuration()) {
      context.set_deadline(absl::ToChronoTime(absl::Now() + options.timeout));
    }
    context.set_wait_for_ready(options.wait_for_ready);
  }

  template <typename CallT>
  void Prepare(const std::shared_ptr<CallT>& call, const CallOptions& options) {
    PrepareContext(call->context, options);
    if (options.cancellation != nullptr) {
      std::weak_ptr<CallT> weak = call;
      options.cancellation->SetCanceller([weak] {
        if (auto live = weak.lock()) live->context.TryCancel();
      });
    }
  }

  static absl::Status Convert(const grpc::Status& status,
                              const std::string& target, const char* hint,
                              const char* rpc) {
    absl::Status s = rpc::FromGrpcStatus(status);
    if (s.ok() || IsServiceErrorPayload(s)) return s;
    // Not an answer of the service: say where we tried to go.
    const bool transport = s.code() == absl::StatusCode::kUnavailable ||
                           s.code() == absl::StatusCode::kDeadlineExceeded;
    absl::Status annotated(
        s.code(),
        absl::StrCat("coordination RPC ", rpc, " to ", target,
                     transport ? " failed in transport: " : " failed: ",
                     s.message(), transport ? hint : ""));
    s.ForEachPayload([&](absl::string_view url, const absl::Cord& p) {
      annotated.SetPayload(url, p);
    });
    return annotated;
  }

  static bool IsServiceErrorPayload(const absl::Status& s) {
    return s
        .GetPayload("type.googleapis.com/cohort.coord.CoordinationServiceError")
        .has_value();
  }

  const std::string target_;
  std::unique_ptr<CoordinationRpc::Stub> stub_;
  const rpc::TransportSecurity security_;
  // What to check when a call fails in transport. A client with neither a
  // token nor TLS cannot connect to a job's server at all (job TLS), which
  // looks like a server that closes the connection.
  const char* const transport_hint_ =
      security_.job_token.empty() && !security_.tls()
          ? " (is the coordinator running and reachable? This client has no "
            "job token: if the job has one, set COHORT_JOB_TOKEN or give "
            "--token-file)"
          : " (is the coordinator running and reachable?)";
};

}  // namespace

absl::StatusOr<std::unique_ptr<CoordinationClient>> NewGrpcCoordinationClient(
    const std::string& target, const rpc::TransportSecurity& security) {
  auto channel = rpc::CreateChannel(target, security);
  if (!channel.ok()) return channel.status();
  return std::unique_ptr<CoordinationClient>(
      new GrpcCoordinationClient(target, *channel, security));
}

}  // namespace cohort::coord
