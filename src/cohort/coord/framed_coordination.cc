#include "cohort/coord/framed_coordination.h"

#include <functional>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "cohort/base/status.h"
#include "cohort/coord/grpc_coordination_client.h"
#include "cohort/rpc/frame.h"
#include "cohort/rpc/framed_client.h"
#include "cohort/rpc/socket.h"
#include "cohort/rpc/status_conversion.h"

namespace cohort::coord {
namespace {

// Method indices: the order of COHORT_COORDINATION_RPCS.
enum class Method : uint8_t {
#define COHORT_COORD_FRAMED_METHOD_(Name) k##Name,
  COHORT_COORDINATION_RPCS(COHORT_COORD_FRAMED_METHOD_)
#undef COHORT_COORD_FRAMED_METHOD_
      kCount
};

// The payload that marks an answer of the service (coordination_service_util).
constexpr char kServiceErrorUrl[] =
    "type.googleapis.com/cohort.coord.CoordinationServiceError";

// The largest answer a client accepts (rpc/frame.h), less the reply's code
// byte and some slack.
constexpr size_t kMaxAnswerBytes = rpc::kDefaultMaxFrame - 64;

template <typename Request, typename Response>
void Dispatch(CoordinationRpcHandler* handler,
              void (CoordinationRpcHandler::*method)(const Request&, Response*,
                                                     StatusCallback),
              const std::shared_ptr<rpc::FramedConnection>& c,
              absl::string_view body, std::function<void()> finished) {
  auto request = std::make_shared<Request>();
  if (!request->ParseFromArray(body.data(), static_cast<int>(body.size()))) {
    finished();
    c->Reply(absl::StatusCode::kInvalidArgument,
             rpc::EncodeErrorBody(absl::InvalidArgumentError(
                 absl::StrCat("malformed ", Request::descriptor()->name(), " (",
                              body.size(), " bytes)"))));
    return;
  }
  auto response = std::make_shared<Response>();
  // The connection is held until the answer: a parked call (a blocking get,
  // a barrier) answers whenever the service does; a reply to a connection
  // that closed meanwhile is dropped.
  (handler->*method)(
      *request, response.get(),
      [c, request, response, finished = std::move(finished)](absl::Status s) {
        if (s.ok() && response->ByteSizeLong() > kMaxAnswerBytes) {
          s = absl::ResourceExhaustedError(absl::StrCat(
              "the answer to ", Request::descriptor()->name(), " would be ",
              response->ByteSizeLong(), " bytes, over the framed cap of ",
              kMaxAnswerBytes, "; ask for less (e.g. a narrower directory)"));
        }
        finished();
        if (s.ok()) {
          c->Reply(absl::StatusCode::kOk, response->SerializeAsString());
        } else {
          c->Reply(s.code(), rpc::EncodeErrorBody(s));
        }
      });
}

// The client's state: the target and a pool of idle connections. Shared
// with the threads of asynchronous calls, so a call that outlives the
// client still finds it.
class FramedCalls {
 public:
  FramedCalls(std::string address, std::string job_token)
      : address_(std::move(address)), job_token_(std::move(job_token)) {}

  template <typename Request, typename Response>
  absl::Status Call(Method method, const char* rpc, const Request& request,
                    Response* response, const CallOptions& options) {
    const absl::Time deadline = options.timeout == absl::InfiniteDuration()
                                    ? absl::InfiniteFuture()
                                    : absl::Now() + options.timeout;
    absl::StatusOr<std::unique_ptr<rpc::FramedClient>> conn =
        Acquire(deadline, options.wait_for_ready);
    if (!conn.ok()) return Transport(conn.status(), rpc);
    // A cancellable call keeps its connection in a shared_ptr that the
    // canceller only observes: a Cancel() after the call ended (and the
    // connection was dropped) finds nothing to shut down. Such a
    // connection is never pooled.
    std::shared_ptr<rpc::FramedClient> shared;
    rpc::FramedClient* raw = conn->get();
    if (options.cancellation != nullptr) {
      shared = *std::move(conn);
      options.cancellation->SetCanceller(
          [weak = std::weak_ptr<rpc::FramedClient>(shared)] {
            if (auto live = weak.lock()) live->Shutdown();
          });
    }
    const char head = static_cast<char>(method);
    absl::StatusOr<std::string> reply = raw->Call(
        absl::string_view(&head, 1), request.SerializeAsString(), deadline);
    // Read before the connection goes back to the pool (and to others).
    const bool broken = raw->broken();
    if (!broken && shared == nullptr) Release(*std::move(conn));
    if (!reply.ok()) {
      if (options.cancellation != nullptr &&
          options.cancellation->cancelled()) {
        return absl::CancelledError(absl::StrCat(
            "coordination RPC ", rpc, " to ", address_, " was cancelled"));
      }
      // A failed call on a connection that is still usable was answered by
      // the service; a broken connection means the transport failed.
      if (!broken) {
        return rpc::DecodeErrorBody(reply.status().code(),
                                    reply.status().message());
      }
      return Transport(reply.status(), rpc);
    }
    if (!response->ParseFromString(*reply)) {
      return absl::DataLossError(absl::StrCat("coordination RPC ", rpc, " to ",
                                              address_,
                                              ": the answer does not parse"));
    }
    return absl::OkStatus();
  }

 private:
  static constexpr size_t kMaxIdle = 8;

  absl::StatusOr<std::unique_ptr<rpc::FramedClient>> Acquire(
      absl::Time deadline, bool wait_for_ready) {
    {
      absl::MutexLock lock(&mu_);
      while (!idle_.empty()) {
        std::unique_ptr<rpc::FramedClient> c = std::move(idle_.back());
        idle_.pop_back();
        if (!c->IdleConnectionClosed()) return c;
      }
    }
    // Connecting is bounded even for calls without a deadline: a
    // coordinator that does not answer the handshake is not one.
    const absl::Time connect_deadline =
        std::min(deadline, absl::Now() + absl::Seconds(30));
    while (true) {
      absl::StatusOr<std::unique_ptr<rpc::FramedClient>> c =
          rpc::FramedClient::Connect(address_, job_token_, connect_deadline);
      if (c.ok() || !wait_for_ready || !absl::IsUnavailable(c.status()) ||
          absl::Now() + absl::Milliseconds(100) >= connect_deadline) {
        return c;
      }
      absl::SleepFor(absl::Milliseconds(100));
    }
  }

  void Release(std::unique_ptr<rpc::FramedClient> c) {
    absl::MutexLock lock(&mu_);
    if (idle_.size() < kMaxIdle) idle_.push_back(std::move(c));
  }

  absl::Status Transport(const absl::Status& s, const char* rpc) const {
    if (s.GetPayload(kServiceErrorUrl).has_value()) return s;
    const bool transport = s.code() == absl::StatusCode::kUnavailable ||
                           s.code() == absl::StatusCode::kDeadlineExceeded;
    return absl::Status(
        s.code(),
        absl::StrCat(
            "coordination RPC ", rpc, " to ", kFramedTargetPrefix, address_,
            transport ? " failed in transport: " : " failed: ", s.message(),
            transport ? " (is the coordinator running and reachable?)" : ""));
  }

  const std::string address_;
  const std::string job_token_;
  absl::Mutex mu_;
  std::vector<std::unique_ptr<rpc::FramedClient>> idle_ ABSL_GUARDED_BY(mu_);
};

class FramedCoordinationClient : public CoordinationClient {
 public:
  FramedCoordinationClient(std::string address, std::string job_token)
      : calls_(std::make_shared<FramedCalls>(std::move(address),
                                             std::move(job_token))) {}

  // Blocking calls run on the caller's thread; an asynchronous one on a
  // thread of its own (the agent makes only blocking calls).
#define COHORT_COORD_FRAMED_CLIENT_METHOD_(Name)                               \
  void Name##Async(const Name##Request& request, Name##Response* response,     \
                   const CallOptions& options, StatusCallback done) override { \
    std::thread([calls = calls_, request, response, options,                   \
                 done = std::move(done)] {                                     \
      done(calls->Call(Method::k##Name, #Name, request, response, options));   \
    }).detach();                                                               \
  }                                                                            \
  absl::Status Name(const Name##Request& request, Name##Response* response,    \
                    const CallOptions& options) override {                     \
    return calls_->Call(Method::k##Name, #Name, request, response, options);   \
  }
  COHORT_COORDINATION_RPCS(COHORT_COORD_FRAMED_CLIENT_METHOD_)
#undef COHORT_COORD_FRAMED_CLIENT_METHOD_

 private:
  const std::shared_ptr<FramedCalls> calls_;
};

}  // namespace

void FramedCoordinationService::OnRequest(
    const std::shared_ptr<rpc::FramedConnection>& c, std::string request) {
  {
    absl::MutexLock lock(&mu_);
    if (!busy_.insert(c->id()).second) {
      c->Close(
          "sent a coordination request before the answer to its previous "
          "one (one call at a time per connection)");
      return;
    }
  }
  const uint64_t id = c->id();
  auto finished = [this, id] { Finished(id); };
  const uint8_t method =
      request.empty() ? 0xff : static_cast<uint8_t>(request[0]);
  const absl::string_view body =
      absl::string_view(request).substr(request.empty() ? 0 : 1);
  switch (static_cast<Method>(method)) {
#define COHORT_COORD_FRAMED_DISPATCH_(Name)                                \
  case Method::k##Name:                                                    \
    Dispatch(&handler_, &CoordinationRpcHandler::Name, c, body, finished); \
    return;
    COHORT_COORDINATION_RPCS(COHORT_COORD_FRAMED_DISPATCH_)
#undef COHORT_COORD_FRAMED_DISPATCH_
    case Method::kCount:
      break;
  }
  Finished(id);
  c->Reply(absl::StatusCode::kInvalidArgument,
           rpc::EncodeErrorBody(absl::InvalidArgumentError(
               absl::StrCat("unknown coordination method ", method,
                            "; is the client a newer cohort?"))));
}

void FramedCoordinationService::OnClose(
    const std::shared_ptr<rpc::FramedConnection>& c) {
  Finished(c->id());
}

void FramedCoordinationService::Finished(uint64_t id) {
  absl::MutexLock lock(&mu_);
  busy_.erase(id);
}

absl::StatusOr<std::unique_ptr<CoordinationClient>> NewFramedCoordinationClient(
    const std::string& address, const std::string& job_token) {
  // A host name is fine (rpc::ConnectTcp looks it up); the port must be one.
  const size_t colon = address.rfind(':');
  int port = 0;
  if (colon == std::string::npos || colon == 0 ||
      !absl::SimpleAtoi(address.substr(colon + 1), &port) || port <= 0 ||
      port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        "framed coordination address \"", address, "\" is not host:port"));
  }
  return std::unique_ptr<CoordinationClient>(
      new FramedCoordinationClient(address, job_token));
}

absl::StatusOr<std::unique_ptr<CoordinationClient>> NewCoordinationClient(
    const std::string& target, const rpc::TransportSecurity& security) {
  if (!absl::StartsWith(target, kFramedTargetPrefix)) {
    return NewGrpcCoordinationClient(target, security);
  }
  if (security.tls()) {
    return absl::InvalidArgumentError(
        absl::StrCat("coordination target ", target,
                     ": the framed transport has no TLS; use the gRPC target"));
  }
  return NewFramedCoordinationClient(
      target.substr(sizeof(kFramedTargetPrefix) - 1), security.job_token);
}

}  // namespace cohort::coord
