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

// The client's state: the target and its one channel (every call of the
// client, blocking or not, shares it). Shared with the callbacks of calls
// in flight, so a call that outlives the client still finds it.
class FramedCalls {
 public:
  FramedCalls(std::string address, std::string job_token)
      : address_(std::move(address)), job_token_(std::move(job_token)) {}
  // Calls in flight end (Unavailable) while the rest of the client still
  // exists: their callbacks use it.
  ~FramedCalls() {
    std::shared_ptr<rpc::FramedChannel> channel;
    {
      absl::MutexLock lock(&mu_);
      closing_ = true;  // callbacks that start calls now fail them
      channel.swap(channel_);
    }
  }

  template <typename Request, typename Response>
  void Start(Method method, const char* rpc, const Request& request,
             Response* response, const CallOptions& options,
             StatusCallback done) {
    const absl::Time deadline = Deadline(options);
    absl::StatusOr<std::shared_ptr<rpc::FramedChannel>> channel =
        Channel(deadline, options.wait_for_ready);
    if (!channel.ok()) {
      done(Transport(channel.status(), rpc));
      return;
    }
    CallCancellation* cancellation = options.cancellation;
    const char head = static_cast<char>(method);
    const uint32_t tag = (*channel)->Start(
        absl::string_view(&head, 1), request.SerializeAsString(), deadline,
        [this, rpc, response, cancellation,
         done = std::move(done)](absl::StatusOr<rpc::TaggedReply> reply) {
          done(Finish(rpc, std::move(reply), response, cancellation));
        });
    if (cancellation != nullptr) SetCanceller(cancellation, *channel, tag, rpc);
  }

  // A blocking call: the caller reads the connection itself when nobody
  // else does (FramedChannel::Call).
  template <typename Request, typename Response>
  absl::Status Call(Method method, const char* rpc, const Request& request,
                    Response* response, const CallOptions& options) {
    const absl::Time deadline = Deadline(options);
    absl::StatusOr<std::shared_ptr<rpc::FramedChannel>> channel =
        Channel(deadline, options.wait_for_ready);
    if (!channel.ok()) return Transport(channel.status(), rpc);
    CallCancellation* cancellation = options.cancellation;
    const char head = static_cast<char>(method);
    std::function<void(uint32_t)> started;
    if (cancellation != nullptr) {
      started = [&](uint32_t tag) {
        SetCanceller(cancellation, *channel, tag, rpc);
      };
    }
    absl::StatusOr<rpc::TaggedReply> reply =
        (*channel)->Call(absl::string_view(&head, 1),
                         request.SerializeAsString(), deadline, started);
    return Finish(rpc, std::move(reply), response, cancellation);
  }

 private:
  // The canceller only observes the channel: a Cancel() after the call
  // ended finds nothing to do.
  void SetCanceller(CallCancellation* cancellation,
                    const std::shared_ptr<rpc::FramedChannel>& channel,
                    uint32_t tag, const char* rpc) const {
    cancellation->SetCanceller(
        [weak = std::weak_ptr<rpc::FramedChannel>(channel), tag, rpc,
         address = address_] {
          if (auto live = weak.lock()) {
            live->Abandon(tag, absl::CancelledError(absl::StrCat(
                                   "coordination RPC ", rpc, " to ", address,
                                   " was cancelled")));
          }
        });
  }

  static absl::Time Deadline(const CallOptions& options) {
    return options.timeout == absl::InfiniteDuration()
               ? absl::InfiniteFuture()
               : absl::Now() + options.timeout;
  }

  template <typename Response>
  absl::Status Finish(const char* rpc, absl::StatusOr<rpc::TaggedReply> reply,
                      Response* response,
                      CallCancellation* cancellation) const {
    if (!reply.ok()) {
      if (cancellation != nullptr && cancellation->cancelled()) {
        return absl::CancelledError(absl::StrCat(
            "coordination RPC ", rpc, " to ", address_, " was cancelled"));
      }
      return Transport(reply.status(), rpc);
    }
    if (reply->code != absl::StatusCode::kOk) {
      return rpc::DecodeErrorBody(reply->code, reply->body);
    }
    if (!response->ParseFromString(reply->body)) {
      return absl::DataLossError(absl::StrCat("coordination RPC ", rpc, " to ",
                                              address_,
                                              ": the answer does not parse"));
    }
    return absl::OkStatus();
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
          rpc::FramedChannel::Connect(address_, job_token_, connect_deadline);
      if (c.ok()) {
        std::shared_ptr<rpc::FramedChannel> channel = *std::move(c);
        // The broken channel goes outside the lock: its reader may still be
        // running callbacks that start calls.
        std::shared_ptr<rpc::FramedChannel> broken = channel;
        {
          absl::MutexLock lock(&mu_);
          if (closing_) {
            return absl::UnavailableError("the client is being destroyed");
          }
          channel_.swap(broken);
        }
        return channel;
      }
      if (!wait_for_ready || !absl::IsUnavailable(c.status()) ||
          absl::Now() + absl::Milliseconds(100) >= connect_deadline) {
        return c.status();
      }
      absl::SleepFor(absl::Milliseconds(100));
    }
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
    if (calls >= limits_.max_calls_per_connection) {
      if (calls == 0) in_flight_.erase(id);
      c->Close(absl::StrCat("has ", limits_.max_calls_per_connection,
                            " coordination calls in flight (cap)"));
      return;
    }
    if (total_in_flight_ >= limits_.max_calls) {
      if (calls == 0) in_flight_.erase(id);
      c->ReplyTagged(
          tag, absl::StatusCode::kResourceExhausted,
          rpc::EncodeErrorBody(absl::ResourceExhaustedError(
              absl::StrCat("the coordination service has ", limits_.max_calls,
                           " calls in flight (its cap); retry later"))));
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
