#include "cohort/runtime/tensor_data_service.h"

#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "cohort/base/status.h"
#include "cohort/rpc/socket.h"
#include "cohort/runtime/call_options.h"
#include "cohort/runtime/tensor_wire.h"
#include "cohort/runtime/worker.h"
#include "cohort/runtime/worker_tensor_coding.h"

namespace cohort::runtime {

// One RecvTensor being served. The CallOptions let a closing connection
// cancel the worker's waiter; they live until the worker's `done` ran.
struct TensorDataService::Call {
  std::shared_ptr<rpc::FramedConnection> connection;
  CallOptions opts;
  RecvTensorRequest request;
  RecvTensorValue value;
};

struct TensorDataService::State {
  absl::Mutex mu;
  // By connection id: at most one call per connection (file comment).
  absl::flat_hash_map<uint64_t, std::shared_ptr<Call>> calls
      ABSL_GUARDED_BY(mu);
  // Counts answered tensors (a statistic; relaxed).
  std::atomic<uint64_t> sent{0};
};

TensorDataService::TensorDataService(Worker* worker)
    : worker_(worker), state_(std::make_shared<State>()) {}

absl::StatusOr<std::unique_ptr<TensorDataService>> TensorDataService::Start(
    Worker* worker, rpc::FramedServerOptions options) {
  options.max_frame_bytes = kMaxRequestBytes;
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

void TensorDataService::OnRequest(
    const std::shared_ptr<rpc::FramedConnection>& c, std::string request) {
  auto call = std::make_shared<Call>();
  call->connection = c;
  if (!call->request.ParseFromString(request)) {
    c->Reply(absl::StatusCode::kInvalidArgument,
             EncodeErrorBody(absl::InvalidArgumentError(absl::StrCat(
                 "RecvTensor over the tensor data plane: the request (",
                 request.size(), " bytes) is not a RecvTensorRequest"))));
    return;
  }
  {
    absl::MutexLock lock(&state_->mu);
    if (!state_->calls.emplace(c->id(), call).second) {
      // Closing (not answering) keeps replies in request order for a
      // well-behaved client, which never pipelines.
      c->Close("sent a second RecvTensor before the first was answered");
      return;
    }
  }
  // The worker may answer inline (errors, a tensor already sent); never
  // under this service's lock.
  std::shared_ptr<State> state = state_;
  worker_->RecvTensorValueAsync(
      &call->opts, &call->request, &call->value,
      [state, call](const absl::Status& s) { Answer(state, call, s); });
}

void TensorDataService::Answer(const std::shared_ptr<State>& state,
                               const std::shared_ptr<Call>& call,
                               const absl::Status& status) {
  {
    absl::MutexLock lock(&state->mu);
    auto it = state->calls.find(call->connection->id());
    if (it != state->calls.end() && it->second == call) state->calls.erase(it);
  }
  rpc::FramedConnection& c = *call->connection;
  absl::Status s = status;
  const Tensor& tensor = call->value.tensor;
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
    auto keep = std::make_shared<const Tensor>(tensor);
    rpc::FramedConnection::Payload payload;
    payload.data = static_cast<const char*>(keep->raw_data());
    payload.size = keep->TotalBytes();
    payload.keepalive = std::move(keep);
    c.ReplyWithPayload(header, std::move(payload));
    state->sent.fetch_add(1, std::memory_order_relaxed);
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
      c.ReplyWithPayload(header, std::move(payload));
      state->sent.fetch_add(1, std::memory_order_relaxed);
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
