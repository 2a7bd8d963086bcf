#include "cohort/coord/framed_coordination.h"

#include <functional>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "cohort/base/status.h"
#include "cohort/coord/etcd_coordination_client.h"
#include "cohort/coord/grpc_coordination_client.h"
#include "cohort/rpc/frame.h"
#include "cohort/rpc/framed_channel.h"
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
              const std::shared_ptr<rpc::FramedConnection>& c, uint32_t tag,
              absl::string_view body, std::function<void()> finished) {
  auto request = std::make_shared<Request>();
  if (!request->ParseFromArray(body.data(), static_cast<int>(body.size()))) {
    finished();
    c->ReplyTagged(tag, absl::StatusCode::kInvalidArgument,
                   rpc::EncodeErrorBody(absl::InvalidArgumentError(
                       absl::StrCat("malformed ", Request::descriptor()->name(),
                                    " (", body.size(), " bytes)"))));
    return;
  }
  auto response = std::make_shared<Response>();
  // The connection is held until the answer: a parked call (a blocking get,
  // a barrier) answers whenever the service does; a reply to a connection
  // that closed meanwhile is dropped.
  (handler->*method)(
      *request, response.get(),
      [c, tag, request, response,
       finished = std::move(finished)](absl::Status s) {
        if (s.ok() && response->ByteSizeLong() > kMaxAnswerBytes) {
          s = absl::ResourceExhaustedError(absl::StrCat(
              "the answer to ", Request::descriptor()->name(), " would be ",
              response->ByteSizeLong(), " bytes, over the framed cap of ",
              kMaxAnswerBytes, "; ask for less (e.g. a narrower directory)"));
        }
        finished();
        if (s.ok()) {
          c->ReplyTagged(tag, absl::StatusCode::kOk,
                         response->SerializeAsString());
        } else {
          c->ReplyTagged(tag, s.code(), rpc::EncodeErrorBody(s));
        }
      });
}

// Where a call's cancellation finds the call: the canceller is installed
// before the call is sent (so that nothing touches the caller's
// CallCancellation after the call may have ended) and learns the tag once
// it is known; a Cancel() in between is remembered and applied then.
struct CancelHook {
  std::weak_ptr<rpc::FramedChannel> channel;
  std::string message;
  absl::Mutex mu;
  uint32_t tag ABSL_GUARDED_BY(mu) = 0;
  bool cancelled ABSL_GUARDED_BY(mu) = false;

  bool cancelled_now() {
    absl::MutexLock lock(&mu);
    return cancelled;
  }
  void Cancel() {
    uint32_t t;
    {
      absl::MutexLock lock(&mu);
      cancelled = true;
      t = tag;
    }
    Abandon(t);
  }
  void Started(uint32_t t) {
    bool cancel;
    {
      absl::MutexLock lock(&mu);
      tag = t;
      cancel = cancelled;
    }
    if (cancel) Abandon(t);
  }
  void Abandon(uint32_t t) {
    if (t == 0) return;
    if (auto live = channel.lock()) {
      live->Abandon(t, absl::CancelledError(message));
    }
  }
};

// How a call ends: the service's answer parsed into `response`, its error,
// or the transport's failure named with the target and the RPC. Free, so
// that a callback never needs the client that started it.
template <typename Response>
absl::Status FinishCall(const std::string& address, const char* rpc,
                        absl::StatusOr<rpc::TaggedReply> reply,
                        Response* response, bool cancelled) {
  if (!reply.ok()) {
    if (cancelled) {
      return absl::CancelledError(absl::StrCat("coordination RPC ", rpc, " to ",
                                               address, " was cancelled"));
    }
    const absl::Status& s = reply.status();
    if (s.GetPayload(kServiceErrorUrl).has_value()) return s;
    const bool transport = s.code() == absl::StatusCode::kUnavailable ||
                           s.code() == absl::StatusCode::kDeadlineExceeded;
    return absl::Status(
        s.code(),
        absl::StrCat(
            "coordination RPC ", rpc, " to ", kFramedTargetPrefix, address,
            transport ? " failed in transport: " : " failed: ", s.message(),
            transport ? " (is the coordinator running and reachable?)" : ""));
  }
  if (reply->code != absl::StatusCode::kOk) {
    return rpc::DecodeErrorBody(reply->code, reply->body);
  }
  if (!response->ParseFromString(reply->body)) {
    return absl::DataLossError(absl::StrCat("coordination RPC ", rpc, " to ",
                                            address,
                                            ": the answer does not parse"));
  }
  return absl::OkStatus();
}

// The client's state: the target and its one channel (every call of every
// client of this process for the target and token shares it).
class FramedCalls {
 public:
  FramedCalls(std::string address, std::string job_token)
      : address_(std::move(address)), job_token_(std::move(job_token)) {}
  ~FramedCalls() {
    std::shared_ptr<rpc::FramedChannel> channel;
    {
      absl::MutexLock lock(&mu_);
      closing_ = true;  // calls started from callbacks now fail
      channel.swap(channel_);
    }
    // `channel` goes here: calls in flight end with Unavailable. Their
    // callbacks hold nothing of this object.
  }

  template <typename Request, typename Response>
  void Start(Method method, const char* rpc, const Request& request,
             Response* response, const CallOptions& options,
             StatusCallback done) {
    const absl::Time deadline = Deadline(options);
    absl::StatusOr<std::shared_ptr<rpc::FramedChannel>> channel =
        Channel(deadline, options.wait_for_ready);
    if (!channel.ok()) {
      done(FinishCall(address_, rpc, channel.status(), response, false));
      return;
    }
    std::shared_ptr<CancelHook> hook = Hook(options, *channel, rpc);
    const char head = static_cast<char>(method);
    const uint32_t tag = (*channel)->Start(
        absl::string_view(&head, 1), request.SerializeAsString(), deadline,
        [address = address_, rpc, response, hook,
         done = std::move(done)](absl::StatusOr<rpc::TaggedReply> reply) {
          done(FinishCall(address, rpc, std::move(reply), response,
                          hook != nullptr && hook->cancelled_now()));
        });
    if (hook != nullptr) hook->Started(tag);
  }

  // A blocking call: the caller reads the connection itself when nobody
  // else does (FramedChannel::Call).
  template <typename Request, typename Response>
  absl::Status Call(Method method, const char* rpc, const Request& request,
                    Response* response, const CallOptions& options) {
    const absl::Time deadline = Deadline(options);
    absl::StatusOr<std::shared_ptr<rpc::FramedChannel>> channel =
        Channel(deadline, options.wait_for_ready);
    if (!channel.ok()) {
      return FinishCall(address_, rpc, channel.status(), response, false);
    }
    std::shared_ptr<CancelHook> hook = Hook(options, *channel, rpc);
    std::function<void(uint32_t)> started;
    if (hook != nullptr) started = [&hook](uint32_t t) { hook->Started(t); };
    const char head = static_cast<char>(method);
    absl::StatusOr<rpc::TaggedReply> reply =
        (*channel)->Call(absl::string_view(&head, 1),
                         request.SerializeAsString(), deadline, started);
    return FinishCall(address_, rpc, std::move(reply), response,
                      hook != nullptr && hook->cancelled_now());
  }

 private:
  // Installs the call's canceller, if it has a cancellation.
  std::shared_ptr<CancelHook> Hook(
      const CallOptions& options,
      const std::shared_ptr<rpc::FramedChannel>& channel,
      const char* rpc) const {
    if (options.cancellation == nullptr) return nullptr;
    auto hook = std::make_shared<CancelHook>();
    hook->channel = channel;
    hook->message = absl::StrCat("coordination RPC ", rpc, " to ", address_,
                                 " was cancelled");
    options.cancellation->SetCanceller([hook] { hook->Cancel(); });
    return hook;
  }

  static absl::Time Deadline(const CallOptions& options) {
    return options.timeout == absl::InfiniteDuration()
               ? absl::InfiniteFuture()
               : absl::Now() + options.timeout;
  }

  // The live channel, connecting one when there is none (or it broke).
  absl::StatusOr<std::shared_ptr<rpc::FramedChannel>> Channel(
      absl::Time deadline, bool wait_for_ready) {
    auto live =
        [this]() -> absl::StatusOr<std::shared_ptr<rpc::FramedChannel>> {
      absl::MutexLock lock(&mu_);
      if (closing_) {
        return absl::UnavailableError("the client is being destroyed");
      }
      if (channel_ != nullptr && !channel_->broken()) return channel_;
      return nullptr;
    };
    absl::StatusOr<std::shared_ptr<rpc::FramedChannel>> current = live();
    if (!current.ok() || *current != nullptr) return current;
    // The broken channel is released after connect_mu_: its destructor
    // joins its reader thread, which may be running a callback that waits
    // for connect_mu_ to start a call.
    std::shared_ptr<rpc::FramedChannel> broken;
    // One connect at a time: the callers that wait for it share its channel.
    absl::MutexLock connecting(&connect_mu_);
    current = live();
    if (!current.ok() || *current != nullptr) return current;
    // Connecting is bounded even for calls without a deadline: a
    // coordinator that does not answer the handshake is not one.
    const absl::Time connect_deadline =
        std::min(deadline, absl::Now() + absl::Seconds(30));
    while (true) {
      absl::StatusOr<std::unique_ptr<rpc::FramedChannel>> c =
          rpc::FramedChannel::Connect(address_, job_token_, connect_deadline,
                                      rpc::kDefaultMaxFrame,
                                      kFramedCoordinationIdentity);
      if (c.ok()) {
        std::shared_ptr<rpc::FramedChannel> channel = *std::move(c);
        absl::MutexLock lock(&mu_);
        if (closing_) {
          return absl::UnavailableError("the client is being destroyed");
        }
        broken = std::move(channel_);
        channel_ = channel;
        return channel;
      }
      if (!wait_for_ready || !absl::IsUnavailable(c.status()) ||
          absl::Now() + absl::Milliseconds(100) >= connect_deadline) {
        return c.status();
      }
      absl::SleepFor(absl::Milliseconds(100));
    }
  }

  const std::string address_;
  const std::string job_token_;
  absl::Mutex connect_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  absl::Mutex mu_;
  std::shared_ptr<rpc::FramedChannel> channel_ ABSL_GUARDED_BY(mu_);
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
};

// The calls of every client of one process to one endpoint (with one
// token): they share one connection, as gRPC's channels share subchannels.
std::shared_ptr<FramedCalls> SharedCalls(const std::string& address,
                                         const std::string& job_token) {
  static absl::Mutex mu(absl::kConstInit);
  static auto* shared =
      new absl::flat_hash_map<std::pair<std::string, std::string>,
                              std::weak_ptr<FramedCalls>>();
  absl::MutexLock lock(&mu);
  // Entries whose clients are all gone (and with them their token).
  absl::erase_if(*shared,
                 [](const auto& entry) { return entry.second.expired(); });
  std::weak_ptr<FramedCalls>& slot = (*shared)[{address, job_token}];
  std::shared_ptr<FramedCalls> calls = slot.lock();
  if (calls == nullptr) {
    calls = std::make_shared<FramedCalls>(address, job_token);
    slot = calls;
  }
  return calls;
}

class FramedCoordinationClient : public CoordinationClient {
 public:
  FramedCoordinationClient(const std::string& address,
                           const std::string& job_token)
      : calls_(SharedCalls(address, job_token)) {}

  // Every call, blocking or not, is one tagged request on the client's
  // channel; an asynchronous call's callback runs on the channel's reader.
#define COHORT_COORD_FRAMED_CLIENT_METHOD_(Name)                               \
  void Name##Async(const Name##Request& request, Name##Response* response,     \
                   const CallOptions& options, StatusCallback done) override { \
    calls_->Start(Method::k##Name, #Name, request, response, options,          \
                  std::move(done));                                            \
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
  absl::StatusOr<std::pair<uint32_t, absl::string_view>> split =
      rpc::SplitTaggedRequest(request);
  if (!split.ok()) {
    c->Close(std::string(split.status().message()));
    return;
  }
  const auto [tag, rest] = *split;
  const uint64_t id = c->id();
  {
    absl::MutexLock lock(&mu_);
    int& calls = in_flight_[id];
    // Over either cap the call is refused, not parked; the connection and
    // the calls it already has stay (a peer past the cap only gets refusals,
    // each bounded work).
    std::string refusal;
    if (calls >= limits_.max_calls_per_connection) {
      refusal =
          absl::StrCat("this connection has ", limits_.max_calls_per_connection,
                       " coordination calls in flight (its cap)");
    } else if (total_in_flight_ >= limits_.max_calls) {
      refusal = absl::StrCat("the coordination service has ", limits_.max_calls,
                             " calls in flight (its cap)");
    }
    if (!refusal.empty()) {
      if (calls == 0) in_flight_.erase(id);
      c->ReplyTagged(tag, absl::StatusCode::kResourceExhausted,
                     rpc::EncodeErrorBody(absl::ResourceExhaustedError(
                         absl::StrCat(refusal, "; retry later"))));
      return;
    }
    ++calls;
    ++total_in_flight_;
  }
  auto finished = [this, id] { Finished(id); };
  const uint8_t method = rest.empty() ? 0xff : static_cast<uint8_t>(rest[0]);
  const absl::string_view body = rest.substr(rest.empty() ? 0 : 1);
  switch (static_cast<Method>(method)) {
#define COHORT_COORD_FRAMED_DISPATCH_(Name)                          \
  case Method::k##Name:                                              \
    Dispatch(&handler_, &CoordinationRpcHandler::Name, c, tag, body, \
             finished);                                              \
    return;
    COHORT_COORDINATION_RPCS(COHORT_COORD_FRAMED_DISPATCH_)
#undef COHORT_COORD_FRAMED_DISPATCH_
    case Method::kCount:
      break;
  }
  Finished(id);
  c->ReplyTagged(tag, absl::StatusCode::kInvalidArgument,
                 rpc::EncodeErrorBody(absl::InvalidArgumentError(
                     absl::StrCat("unknown coordination method ", method,
                                  "; is the client a newer cohort?"))));
}

void FramedCoordinationService::OnClose(
    const std::shared_ptr<rpc::FramedConnection>&) {
  // Calls parked for the connection end when the service answers them (their
  // replies are dropped) and are counted until then.
}

int FramedCoordinationService::calls_in_flight() {
  absl::MutexLock lock(&mu_);
  return total_in_flight_;
}

void FramedCoordinationService::Finished(uint64_t id) {
  absl::MutexLock lock(&mu_);
  auto it = in_flight_.find(id);
  if (it != in_flight_.end() && --it->second == 0) in_flight_.erase(it);
  --total_in_flight_;
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
  if (absl::StartsWith(target, kEtcdScheme)) {
    return JoinEtcdCoordination(target, Env::Default());
  }
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
