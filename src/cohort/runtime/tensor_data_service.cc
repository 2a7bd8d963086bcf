#include "cohort/runtime/tensor_data_service.h"

#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "cohort/base/phase_stats.h"
#include "cohort/base/status.h"
#include "cohort/rpc/socket.h"
#include "cohort/runtime/call_options.h"
#include "cohort/runtime/tensor_wire.h"
#include "cohort/runtime/worker.h"
#include "cohort/runtime/worker_tensor_coding.h"

namespace cohort::runtime {

std::string TensorDataIdentity(absl::string_view task) {
  return absl::StrCat("tensor data plane of ", task);
}

// One call being served. The CallOptions let a closing connection cancel
// the worker's call; they live until the worker's `done` ran.
struct TensorDataService::Call {
  virtual ~Call() = default;
  std::shared_ptr<rpc::FramedConnection> connection;
  CallOptions opts;
};

struct TensorDataService::RecvCall : Call {
  RecvTensorRequest request;
  RecvTensorValue value;
  // When the request arrived, for PhaseStats (set only while enabled).
  absl::Time arrived;
};

struct TensorDataService::RunCall : Call {
  RunGraphRequest request;
  RunGraphResponse response;
};

struct TensorDataService::State {
  absl::Mutex mu;
  // By connection id: at most one call per connection (file comment).
  absl::flat_hash_map<uint64_t, std::shared_ptr<Call>> calls
      ABSL_GUARDED_BY(mu);
  // Count answered tensors and RunGraphs (statistics; relaxed).
  std::atomic<uint64_t> sent{0};
  std::atomic<uint64_t> run_graphs{0};
};

TensorDataService::TensorDataService(Worker* worker)
    : worker_(worker), state_(std::make_shared<State>()) {}

absl::StatusOr<std::unique_ptr<TensorDataService>> TensorDataService::Start(
    Worker* worker, rpc::FramedServerOptions options) {
  options.max_frame_bytes = kMaxRequestBytes;
  options.identity = TensorDataIdentity(worker->task_name());
  std::unique_ptr<TensorDataService> service(new TensorDataService(worker));
  COHORT_ASSIGN_OR_RETURN(service->server_,
                          rpc::FramedServer::Start(options, service.get()));
  COHORT_ASSIGN_OR_RETURN(rpc::HostPort bound,
                          rpc::ParseHostPort(service->server_->address()));
  service->port_ = bound.port;
  return service;
}

TensorDataService::~TensorDataService() {
  // Closing the connections runs OnClose, which cancels their waiters.
  server_.reset();
}

uint64_t TensorDataService::num_tensors_sent() const {
  return state_->sent.load(std::memory_order_relaxed);
}

uint64_t TensorDataService::num_run_graphs() const {
  return state_->run_graphs.load(std::memory_order_relaxed);
}

void TensorDataService::OnRequest(
    const std::shared_ptr<rpc::FramedConnection>& c, std::string request) {
  absl::string_view body;
  absl::StatusOr<DataPlaneMethod> method =
      DecodeDataPlaneRequest(request, &body);
  if (!method.ok()) {
    // Not a peer of this protocol: nothing it sends next can be trusted to
    // be framed as we expect.
    c->Close(std::string(method.status().message()));
    return;
  }
  switch (*method) {
    case DataPlaneMethod::kRecvTensor:
      return ServeRecvTensor(c, body);
    case DataPlaneMethod::kRunGraph:
      return ServeRunGraph(c, body);
  }
}

template <typename CallType>
std::shared_ptr<CallType> TensorDataService::Admit(
    const std::shared_ptr<rpc::FramedConnection>& c, absl::string_view request,
    const char* rpc) {
  auto call = std::make_shared<CallType>();
  call->connection = c;
  if (!call->request.ParseFromArray(request.data(),
                                    static_cast<int>(request.size()))) {
    c->Reply(
        absl::StatusCode::kInvalidArgument,
        EncodeErrorBody(absl::InvalidArgumentError(absl::StrCat(
            rpc, " over the tensor data plane: the request (", request.size(),
            " bytes) is not a ", call->request.GetTypeName()))));
    return nullptr;
  }
  absl::MutexLock lock(&state_->mu);
  if (state_->calls.emplace(c->id(), call).second) return call;
  // Closing (not answering) keeps replies in request order for a
  // well-behaved client, which never pipelines.
  c->Close("sent a second request before the first was answered");
  return nullptr;
}

void TensorDataService::Forget(State& state, const Call& call) {
  absl::MutexLock lock(&state.mu);
  auto it = state.calls.find(call.connection->id());
  if (it != state.calls.end() && it->second.get() == &call) {
    state.calls.erase(it);
  }
}

void TensorDataService::ServeRecvTensor(
    const std::shared_ptr<rpc::FramedConnection>& c,
    absl::string_view request) {
  auto call = Admit<RecvCall>(c, request, "RecvTensor");
  if (call == nullptr) return;
  if (PhaseStats::enabled()) call->arrived = PhaseStats::Now();
  // The worker may answer inline (errors, a tensor already sent); never
  // under this service's lock.
  std::shared_ptr<State> state = state_;
  worker_->RecvTensorValueAsync(
      &call->opts, &call->request, &call->value,
      [state, call](const absl::Status& s) { AnswerRecv(state, call, s); });
}

void TensorDataService::ServeRunGraph(
    const std::shared_ptr<rpc::FramedConnection>& c,
    absl::string_view request) {
  auto call = Admit<RunCall>(c, request, "RunGraph");
  if (call == nullptr) return;
  // RunGraph never blocks its caller: the step runs on a step thread of
  // the worker, which answers from there.
  std::shared_ptr<State> state = state_;
  worker_->RunGraphAsync(
      &call->opts, &call->request, &call->response,
      [state, call](const absl::Status& s) { AnswerRun(state, call, s); });
}

void TensorDataService::AnswerRun(const std::shared_ptr<State>& state,
                                  const std::shared_ptr<RunCall>& call,
                                  const absl::Status& status) {
  Forget(*state, *call);
  rpc::FramedConnection& c = *call->connection;
  absl::Status s = status;
  std::string body;
  if (s.ok()) {
    body = call->response.SerializeAsString();
    if (body.size() > kMaxReplyBytes) {
      s = absl::ResourceExhaustedError(absl::StrCat(
          "RunGraph of step ", call->request.step_id(), ": the answer (",
          body.size(), " bytes of fetched tensors) is over the limit of ",
          kMaxReplyBytes,
          " bytes for one message; fetch fewer or smaller "
          "tensors per step"));
    }
  }
  // Counted before the answer, so a caller that has it sees the count.
  state->run_graphs.fetch_add(1, std::memory_order_relaxed);
  if (s.ok()) {
    c.Reply(absl::StatusCode::kOk, body);
  } else {
    c.Reply(s.code(), EncodeErrorBody(s));
  }
}

void TensorDataService::AnswerRecv(const std::shared_ptr<State>& state,
                                   const std::shared_ptr<RecvCall>& call,
                                   const absl::Status& status) {
  Forget(*state, *call);
  rpc::FramedConnection& c = *call->connection;
  absl::Status s = status;
  const Tensor& tensor = call->value.tensor;
  const bool timed = PhaseStats::enabled() && call->arrived != absl::Time();
  const absl::Time ready = timed ? PhaseStats::Now() : absl::Time();
  if (timed) PhaseStats::Add(Phase::kServeWait, ready - call->arrived);
  if (s.ok() &&
      static_cast<int64_t>(tensor.TotalBytes()) > kMaxWireTensorBytes) {
    s = absl::ResourceExhaustedError(absl::StrCat(
        "RecvTensor '", call->request.rendezvous_key(), "': a tensor of ",
        tensor.TotalBytes(), " bytes is over the limit of ",
        kMaxWireTensorBytes, " bytes for one tensor on the wire"));
  }
  TensorEncoding encoding = TensorEncoding::kRawBytes;
  std::string header;
  if (s.ok()) {
    header = EncodeTensorHeader(tensor, call->value.is_dead,
                                call->value.send_start_micros, &encoding);
  }
  if (s.ok() && encoding == TensorEncoding::kRawBytes) {
    // Zero copy: the reply references the sender's buffer until the kernel
    // has taken its bytes.
    std::shared_ptr<const Tensor> keep;
    if (timed) {
      // The payload is released once the connection wrote its last byte:
      // that is when serving ends.
      keep = std::shared_ptr<const Tensor>(
          new Tensor(tensor), [ready](const Tensor* t) {
            PhaseStats::Add(Phase::kServeWrite, PhaseStats::Now() - ready,
                            static_cast<int64_t>(t->TotalBytes()));
            delete t;
          });
    } else {
      keep = std::make_shared<const Tensor>(tensor);
    }
    rpc::FramedConnection::Payload payload;
    payload.data = static_cast<const char*>(keep->raw_data());
    payload.size = keep->TotalBytes();
    payload.keepalive = std::move(keep);
    state->sent.fetch_add(1, std::memory_order_relaxed);
    c.ReplyWithPayload(header, std::move(payload));
    return;
  }
  if (s.ok()) {
    // Strings and handles have no flat form: they travel as a TensorProto
    // (rare on hot paths, so the copy is acceptable).
    TensorProto proto;
    s = EncodeWireTensor(
        tensor,
        absl::StrCat("RecvTensor '", call->request.rendezvous_key(), "'"),
        &proto);
    if (s.ok()) {
      auto bytes =
          std::make_shared<const std::string>(proto.SerializeAsString());
      rpc::FramedConnection::Payload payload;
      payload.data = bytes->data();
      payload.size = bytes->size();
      payload.keepalive = std::move(bytes);
      state->sent.fetch_add(1, std::memory_order_relaxed);
      c.ReplyWithPayload(header, std::move(payload));
      return;
    }
  }
  c.Reply(s.code(), EncodeErrorBody(s));
}

void TensorDataService::OnClose(
    const std::shared_ptr<rpc::FramedConnection>& c) {
  std::shared_ptr<Call> call;
  {
    absl::MutexLock lock(&state_->mu);
    auto it = state_->calls.find(c->id());
    if (it == state_->calls.end()) return;
    call = it->second;
    state_->calls.erase(it);
  }
  // The client went away (cancelled, deadline, died): drop only its waiter,
  // as a cancelled gRPC RecvTensor does. Outside the lock: the worker hands
  // the cancel to its timer thread, whose answer then goes nowhere.
  call->opts.StartCancel();
}

}  // namespace cohort::runtime
