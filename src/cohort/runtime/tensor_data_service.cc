#include "cohort/runtime/tensor_data_service.h"

#include <unistd.h>

#include <cstdint>
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
  // The consumer runs on this host (kRecvTensorSameHost with our key).
  bool same_host = false;
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
  // A tensor answered by reference, held for its connection until the
  // connection's next request or its end (tensor_wire.h).
  struct Held {
    std::shared_ptr<const Tensor> tensor;
    std::string raw_header;  // Its kRawBytes header, for kFetchHeld.
  };
  absl::flat_hash_map<uint64_t, Held> held ABSL_GUARDED_BY(mu);
  // Count answered tensors and RunGraphs (statistics; relaxed).
  std::atomic<uint64_t> sent{0};
  std::atomic<uint64_t> run_graphs{0};
  std::atomic<uint64_t> by_reference{0};
  std::atomic<uint64_t> held_fetched{0};
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

uint64_t TensorDataService::num_tensors_by_reference() const {
  return state_->by_reference.load(std::memory_order_relaxed);
}

size_t TensorDataService::num_held() const {
  absl::MutexLock lock(&state_->mu);
  return state_->held.size();
}

uint64_t TensorDataService::num_held_fetched() const {
  return state_->held_fetched.load(std::memory_order_relaxed);
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
  if (*method == DataPlaneMethod::kFetchHeld) return ServeFetchHeld(c);
  {
    // Any other request means the consumer is done with the tensor it was
    // lent; it goes when this scope ends, outside the lock.
    State::Held done;
    absl::MutexLock lock(&state_->mu);
    auto it = state_->held.find(c->id());
    if (it != state_->held.end()) {
      done = std::move(it->second);
      state_->held.erase(it);
    }
  }
  switch (*method) {
    case DataPlaneMethod::kRecvTensor:
      return ServeRecvTensor(c, /*same_host=*/false, body);
    case DataPlaneMethod::kRecvTensorSameHost: {
      uint64_t key = 0;
      absl::string_view request;
      const absl::Status s = DecodeSameHostRecvRequest(body, &key, &request);
      if (!s.ok()) {
        c->Reply(s.code(), EncodeErrorBody(s));
        return;
      }
      return ServeRecvTensor(c, key != 0 && key == SameHostKey(), request);
    }
    case DataPlaneMethod::kRunGraph:
      return ServeRunGraph(c, body);
    case DataPlaneMethod::kFetchHeld:
      break;  // Served above.
    case DataPlaneMethod::kRelease:
      break;  // One-way: the hold was dropped above; no answer.
  }
}

void TensorDataService::ServeFetchHeld(
    const std::shared_ptr<rpc::FramedConnection>& c) {
  State::Held held;
  {
    absl::MutexLock lock(&state_->mu);
    auto it = state_->held.find(c->id());
    if (it != state_->held.end()) {
      held = std::move(it->second);
      state_->held.erase(it);
    }
  }
  if (held.tensor == nullptr) {
    const absl::Status s = absl::FailedPreconditionError(
        "FetchHeld over the tensor data plane: this connection holds no "
        "tensor (only the request right after a same-host answer may ask)");
    c->Reply(s.code(), EncodeErrorBody(s));
    return;
  }
  rpc::FramedConnection::Payload payload;
  payload.data = static_cast<const char*>(held.tensor->raw_data());
  payload.size = held.tensor->TotalBytes();
  payload.keepalive = std::move(held.tensor);
  state_->held_fetched.fetch_add(1, std::memory_order_relaxed);
  c->ReplyWithPayload(held.raw_header, std::move(payload));
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
    const std::shared_ptr<rpc::FramedConnection>& c, bool same_host,
    absl::string_view request) {
  auto call = Admit<RecvCall>(c, request, "RecvTensor");
  if (call == nullptr) return;
  call->same_host = same_host;
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
  if (!s.ok() || encoding != TensorEncoding::kRawBytes) {
    Forget(*state, *call);
  } else {
    // Zero copy: the reply (or the consumer, by reference) reads the
    // sender's buffer until it has taken its bytes.
    bool by_reference =
        call->same_host && tensor.TotalBytes() >= kSameHostMinBytes;
    std::shared_ptr<const Tensor> keep;
    if (timed && !by_reference) {
      // Released once the last byte was written: serving ends.
      keep = std::shared_ptr<const Tensor>(
          new Tensor(tensor), [ready](const Tensor* t) {
            PhaseStats::Add(Phase::kServeWrite, PhaseStats::Now() - ready,
                            static_cast<int64_t>(t->TotalBytes()));
            delete t;
          });
    } else {
      keep = std::make_shared<const Tensor>(tensor);
    }
    {
      // Forgetting the call and holding the tensor in one step: OnClose
      // drops what its connection holds, and it either ran before (the
      // call is gone: nothing is held for a closed connection) or runs
      // after (and finds the tensor).
      absl::MutexLock lock(&state->mu);
      auto it = state->calls.find(c.id());
      const bool open =
          it != state->calls.end() && it->second.get() == call.get();
      if (open) state->calls.erase(it);
      by_reference = by_reference && open;
      if (by_reference) state->held[c.id()] = State::Held{keep, header};
    }
    state->sent.fetch_add(1, std::memory_order_relaxed);
    rpc::FramedConnection::Payload payload;
    if (by_reference) {
      // The consumer copies the bytes out of this process (one copy
      // instead of the socket's two; tensor_wire.h).
      SameHostRef ref;
      ref.pid = static_cast<int32_t>(getpid());
      ref.address = reinterpret_cast<uintptr_t>(keep->raw_data());
      ref.bytes = keep->TotalBytes();
      MarkSameHostRef(&header);
      auto bytes = std::make_shared<const std::string>(EncodeSameHostRef(ref));
      payload.data = bytes->data();
      payload.size = bytes->size();
      payload.keepalive = std::move(bytes);
      state->by_reference.fetch_add(1, std::memory_order_relaxed);
      // The consumer's copy is its RecvTensor call's time; this side only
      // answers.
      if (timed) {
        PhaseStats::Add(Phase::kServeWrite, PhaseStats::Now() - ready,
                        static_cast<int64_t>(ref.bytes));
      }
    } else {
      payload.data = static_cast<const char*>(keep->raw_data());
      payload.size = keep->TotalBytes();
      payload.keepalive = std::move(keep);
    }
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
  State::Held held;  // Dropped outside the lock.
  {
    absl::MutexLock lock(&state_->mu);
    auto h = state_->held.find(c->id());
    if (h != state_->held.end()) {
      held = std::move(h->second);
      state_->held.erase(h);
    }
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
