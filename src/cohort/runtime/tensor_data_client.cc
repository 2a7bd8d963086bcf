#include "cohort/runtime/tensor_data_client.h"

#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <utility>

#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "cohort/base/env.h"
#include "cohort/base/logging.h"
#include "cohort/base/status.h"
#include "cohort/rpc/socket.h"
#include "cohort/runtime/tensor_data_service.h"
#include "cohort/runtime/tensor_wire.h"
#include "cohort/runtime/worker_tensor_coding.h"

namespace cohort::runtime {
namespace {

// How long opening a connection may take when the call has no deadline.
constexpr absl::Duration kConnectTimeout = absl::Seconds(10);

// Below this, a tensor's buffer comes from malloc's heap (pages already
// mapped); above, it is a fresh mmap whose pages fault one by one while
// recv() copies into them.
constexpr size_t kPrefaultBytes = size_t{1} << 20;

// Makes the pages of a freshly allocated receive buffer resident before
// recv() fills it. Measured on this machine (a virtualised guest where each
// page fault traps): recv() into fresh 4 KiB pages ran at ~0.24 GB/s, the
// faults costing most of it; transparent huge pages cut the faults 512x
// (TensorBuffer puts blocks of 2 MiB and more on them) and
// MADV_POPULATE_WRITE takes the rest in one syscall. A hint: a kernel
// without it (EINVAL) just faults as before.
void PrefaultBuffer(char* data, size_t size) {
  if (size < kPrefaultBytes) return;
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t begin =
      (reinterpret_cast<uintptr_t>(data) + page - 1) & ~(page - 1);
  const uintptr_t end =
      (reinterpret_cast<uintptr_t>(data) + size) & ~(page - 1);
  if (end <= begin) return;
  void* start = reinterpret_cast<void*>(begin);
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14; older headers lack it.
#endif
  (void)madvise(start, end - begin, MADV_POPULATE_WRITE);
}

// True for "127.x.y.z:port", "localhost:port" and "[::1]:port": the peer is
// reached over this host's loopback.
bool IsLoopbackAddress(absl::string_view address) {
  const size_t colon = address.rfind(':');
  absl::string_view host =
      colon == absl::string_view::npos ? address : address.substr(0, colon);
  if (host == "localhost" || host == "[::1]" || host == "::1") return true;
  return absl::StartsWith(host, "127.");
}

// Copies ref.bytes bytes of process ref.pid at ref.address into `dst`;
// 0 or the errno of the failure.
int ReadSameHost(const SameHostRef& ref, char* dst) {
  uint64_t done = 0;
  while (done < ref.bytes) {
    iovec local{dst + done, static_cast<size_t>(ref.bytes - done)};
    iovec remote{reinterpret_cast<void*>(ref.address + done),
                 static_cast<size_t>(ref.bytes - done)};
    const ssize_t n = process_vm_readv(ref.pid, &local, 1, &remote, 1, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return n < 0 ? errno : EFAULT;
    done += static_cast<uint64_t>(n);
  }
  return 0;
}

}  // namespace

TensorDataClient::TensorDataClient(std::string task, std::string address,
                                   std::string job_token,
                                   uint64_t max_tensor_bytes)
    : task_(std::move(task)),
      address_(std::move(address)),
      job_token_(std::move(job_token)),
      max_tensor_bytes_(max_tensor_bytes),
      same_host_reader_(ReadSameHost) {
  // The switch for comparing both paths, or for a host where the copy
  // succeeds but should not be used.
  const std::optional<std::string> v =
      Env::Default()->GetVar("COHORT_TENSOR_SAME_HOST");
  if (v.has_value() && *v == "0") same_host_ok_.store(false);
  // References are asked for (and honoured) only over loopback: a peer
  // across a network can never name memory on this host, whatever it
  // claims (a producer is trusted with its own buffers, not this host's).
  if (!IsLoopbackAddress(address_)) same_host_ok_.store(false);
}

TensorDataClient::~TensorDataClient() {
  {
    absl::MutexLock lock(&mu_);
    shutting_down_ = true;
    // Shutdown() only shuts the socket down: safe under the lock.
    for (rpc::FramedClient* c : busy_) c->Shutdown();
    idle_.clear();
  }
  // pool_ is destroyed next (last member, first destroyed) and joins.
}

int TensorDataClient::num_idle_connections() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(idle_.size());
}

void TensorDataClient::RecvAsync(CallOptions* opts,
                                 const RecvTensorRequest* request,
                                 RecvTensorValue* value, StatusCallback done) {
  // The blocking part (waiting for the producer, receiving) runs on a pool
  // thread, so the remote rendezvous that calls this never blocks.
  pool_.Schedule([this, opts, request, value, done = std::move(done)] {
    done(Call(opts, "RecvTensor", /*retry_stale=*/true,
              [&](rpc::FramedClient* conn, absl::Time deadline, int wake_fd) {
                return ExchangeRecv(conn, *request, value, deadline, wake_fd);
              }));
  });
}

void TensorDataClient::RunGraphAsync(CallOptions* opts,
                                     const RunGraphRequest* request,
                                     RunGraphResponse* response,
                                     StatusCallback done) {
  std::string frame = EncodeDataPlaneRequest(DataPlaneMethod::kRunGraph,
                                             request->SerializeAsString());
  if (frame.size() > TensorDataService::kMaxRequestBytes) {
    absl::Status s = absl::ResourceExhaustedError(absl::StrCat(
        "RunGraph to ", task_, " (", address_, "): the request (", frame.size(),
        " bytes) is over the tensor data plane's limit of ",
        TensorDataService::kMaxRequestBytes, " bytes"));
    s.SetPayload(kNotConnectedPayload, absl::Cord());
    return done(s);
  }
  // Blocks a pool thread for the step, as a synchronous gRPC client would;
  // the master's thread stays free.
  pool_.Schedule([this, opts, frame = std::move(frame), response,
                  done = std::move(done)] {
    // No retry after a send: a RunGraph that reached the worker before the
    // connection broke would be refused as a duplicate (Aborted), hiding
    // the real failure.
    done(Call(opts, "RunGraph", /*retry_stale=*/false,
              [&](rpc::FramedClient* conn, absl::Time deadline, int wake_fd) {
                return ExchangeRun(conn, frame, response, deadline, wake_fd);
              }));
  });
}

absl::StatusOr<std::unique_ptr<rpc::FramedClient>>
TensorDataClient::TakeConnection(absl::Time deadline, bool allow_idle,
                                 bool* pooled) {
  *pooled = false;
  {
    absl::MutexLock lock(&mu_);
    if (shutting_down_) {
      return absl::UnavailableError(absl::StrCat(task_, " (", address_,
                                                 ") is unavailable: the "
                                                 "client is shutting down"));
    }
    while (allow_idle && !idle_.empty()) {
      std::unique_ptr<rpc::FramedClient> c = std::move(idle_.back());
      idle_.pop_back();
      // One the peer closed while it sat idle (restart, idle timeout) is
      // dropped here, before a request is risked on it.
      if (c->IdleConnectionClosed()) continue;
      *pooled = true;
      busy_.insert(c.get());
      return c;
    }
  }
  // Connect outside the lock: it blocks for a round trip or more.
  absl::StatusOr<std::unique_ptr<rpc::FramedClient>> c =
      rpc::FramedClient::Connect(
          address_, job_token_,
          std::min(deadline, absl::Now() + kConnectTimeout),
          TensorDataService::kMaxReplyFrameBytes, TensorDataIdentity(task_));
  if (!c.ok()) return c.status();
  (*c)->set_max_payload_bytes(max_tensor_bytes_);
  absl::MutexLock lock(&mu_);
  if (shutting_down_) {
    return absl::UnavailableError(
        absl::StrCat(task_, " (", address_,
                     ") is unavailable: the client is shutting down"));
  }
  busy_.insert(c->get());
  return c;
}

void TensorDataClient::ReturnConnection(
    std::unique_ptr<rpc::FramedClient> client) {
  absl::MutexLock lock(&mu_);
  busy_.erase(client.get());
  // A broken stream may still hold a late reply: never reuse it.
  if (!client->broken() && !shutting_down_ &&
      static_cast<int>(idle_.size()) < kMaxIdleConnections) {
    idle_.push_back(std::move(client));
  }
}

absl::Status TensorDataClient::TransportError(const char* rpc,
                                              const absl::Status& s) const {
  const std::string target = absl::StrCat(task_, " (", address_, ")");
  switch (s.code()) {
    case absl::StatusCode::kDeadlineExceeded:
      return absl::DeadlineExceededError(
          absl::StrCat(rpc, " to ", target,
                       " did not finish before its deadline: ", s.message()));
    case absl::StatusCode::kCancelled:
      return absl::CancelledError(
          absl::StrCat(rpc, " to ", target, " was cancelled: ", s.message()));
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kInternal:
      return absl::UnavailableError(
          absl::StrCat(target, " is unavailable: ", s.message()));
    default:  // DataLoss, ResourceExhausted, Unauthenticated, ...
      return Annotate(s, absl::StrCat(rpc, " with ", target));
  }
}

absl::Status TensorDataClient::Call(CallOptions* opts, const char* rpc,
                                    bool retry_stale,
                                    const Exchange& exchange) {
  const absl::Time deadline =
      opts != nullptr ? opts->deadline() : absl::InfiniteFuture();
  // Cancellation wakes the blocked call through an eventfd (a poll()able
  // fd; the call closes its connection, which the producer sees).
  rpc::UniqueFd wake(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake.valid()) return rpc::SocketError("eventfd for", errno, address_);
  if (opts != nullptr) {
    const int fd = wake.get();
    opts->SetCancelCallback([fd] {
      const uint64_t one = 1;
      ssize_t ignored = write(fd, &one, sizeof(one));
      (void)ignored;
    });
  }
  absl::Status status;
  for (int attempt = 0;; ++attempt) {
    bool pooled = false;
    absl::StatusOr<std::unique_ptr<rpc::FramedClient>> conn =
        TakeConnection(deadline, /*allow_idle=*/attempt == 0, &pooled);
    if (!conn.ok()) {
      // Nothing was sent: the caller may look for the peer elsewhere (a
      // restarted task listens on a new tensor port).
      status = TransportError(rpc, conn.status());
      status.SetPayload(kNotConnectedPayload, absl::Cord());
      status.SetPayload(kTransportFailurePayload, absl::Cord());
      break;
    }
    status = exchange(conn->get(), deadline, wake.get());
    if (!status.ok() && (*conn)->broken()) {
      status = TransportError(rpc, status);
      status.SetPayload(kTransportFailurePayload, absl::Cord());
    }
    const bool stale = retry_stale && pooled && (*conn)->broken() &&
                       absl::IsUnavailable(status);
    ReturnConnection(*std::move(conn));
    // A pooled connection the peer closed while it sat idle (restart, idle
    // timeout) fails at once: retry once on a new one. Safe because the
    // request id is the same: a producer that did get the first copy
    // refuses the second (Aborted) rather than answering it twice.
    if (!stale) break;
  }
  // Waits for a cancel callback running right now, so `wake` can close.
  if (opts != nullptr) opts->ClearCancelCallback();
  return status;
}

bool TensorDataClient::IsNotConnected(const absl::Status& status) {
  return status.GetPayload(kNotConnectedPayload).has_value();
}

bool TensorDataClient::IsTransportFailure(const absl::Status& status) {
  return status.GetPayload(kTransportFailurePayload).has_value();
}

absl::Status TensorDataClient::ExchangeRun(rpc::FramedClient* conn,
                                           absl::string_view request,
                                           RunGraphResponse* response,
                                           absl::Time deadline, int wake_fd) {
  absl::StatusOr<std::string> r = conn->Call(request, deadline, wake_fd);
  if (!r.ok()) {
    // A broken connection's error is the transport's (Call rewords it);
    // otherwise the worker's own answer, whose body carries message and
    // payloads.
    if (conn->broken()) return r.status();
    return DecodeErrorBody(r.status().code(), r.status().message());
  }
  if (!response->ParseFromString(*r)) {
    return absl::DataLossError(absl::StrCat(
        "RunGraph with ", task_, " (", address_, "): the answer (", r->size(),
        " bytes) is not a RunGraphResponse; is the peer a cohort server of "
        "the same version?"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> TensorDataClient::ReadByReference(
    rpc::FramedClient* conn, absl::string_view ref_payload,
    const std::string& peer, RecvTensorValue* value, absl::Time deadline,
    int wake_fd) {
  char* data = static_cast<char*>(value->tensor.raw_data());
  const uint64_t bytes = value->tensor.TotalBytes();
  COHORT_ASSIGN_OR_RETURN(SameHostRef ref,
                          DecodeSameHostRef(ref_payload, bytes, peer));
  const int err = same_host_reader_(ref, data);
  if (err == 0 && conn->IdleConnectionClosed()) {
    // The producer closes the connection before it drops the hold (and
    // frees the buffer), so a connection still open after the copy means
    // the bytes were the held tensor's; a closed one means they may be a
    // freed (or reused) buffer's.
    return absl::UnavailableError(absl::StrCat(
        "RecvTensor from ", peer,
        ": the producer closed the connection while its tensor was being "
        "copied; the bytes are not trusted (retry the step)"));
  }
  if (err == 0) {
    // Done with the producer's buffer: let it go now, not at this
    // connection's next call (a variable still lent when its update runs
    // is copied first). One-way; a failure only breaks this connection,
    // whose end releases the tensor as well.
    (void)conn->SendOneWay(
        EncodeDataPlaneRequest(DataPlaneMethod::kRelease, ""), deadline,
        wake_fd);
    return std::string();
  }
  // The producer still holds the tensor for this connection: ask for its
  // bytes. When the copy was refused (a sandbox, another user) rather than
  // the producer gone (ESRCH: the connection is gone too, and the fetch
  // says so), stop asking for references.
  const bool refused = err == EPERM || err == EACCES || err == ENOSYS;
  if (refused && same_host_ok_.exchange(false)) {
    COHORT_LOG(WARNING) << "tensor data plane: process_vm_readv from " << peer
                        << " failed (" << strerror(err)
                        << "); same-host tensors now go through the socket";
  }
  TensorHeader again;
  auto sink = [&](absl::string_view h, uint64_t n) -> absl::StatusOr<char*> {
    COHORT_ASSIGN_OR_RETURN(again,
                            DecodeTensorHeader(h, n, max_tensor_bytes_, peer));
    if (again.encoding != TensorEncoding::kRawBytes || n != bytes ||
        again.dtype != value->tensor.dtype() ||
        again.shape != value->tensor.shape()) {
      return absl::DataLossError(
          absl::StrCat("RecvTensor from ", peer,
                       ": the held tensor's bytes do not match its reference"));
    }
    return data;
  };
  return conn->CallWithPayload(
      EncodeDataPlaneRequest(DataPlaneMethod::kFetchHeld, ""), sink, deadline,
      wake_fd);
}

absl::Status TensorDataClient::ExchangeRecv(rpc::FramedClient* conn,
                                            const RecvTensorRequest& request,
                                            RecvTensorValue* value,
                                            absl::Time deadline, int wake_fd) {
  absl::Status status;
  TensorHeader header;
  std::string proto_bytes;
  char ref_bytes[kSameHostRefBytes];
  const std::string peer = absl::StrCat(task_, " (", address_, ")");
  // Runs after the reply frame arrived and before any payload byte is
  // read: everything is checked before the tensor is allocated.
  auto sink = [&](absl::string_view h, uint64_t n) -> absl::StatusOr<char*> {
    COHORT_ASSIGN_OR_RETURN(header,
                            DecodeTensorHeader(h, n, max_tensor_bytes_, peer));
    if (header.encoding == TensorEncoding::kTensorProto) {
      proto_bytes.resize(n);
      return proto_bytes.data();
    }
    // The header's shape was checked against max_tensor_bytes_ (for a
    // reference, too: the shape sizes this allocation, not `n`).
    value->tensor = Tensor(header.dtype, header.shape);
    char* data = static_cast<char*>(value->tensor.raw_data());
    PrefaultBuffer(data, value->tensor.TotalBytes());
    if (header.encoding == TensorEncoding::kSameHostRef) return ref_bytes;
    return data;
  };
  const uint64_t key = SameHostKey();
  const bool ask_same_host = key != 0 && same_host_ok_.load();
  // A reference is honoured only in answer to a request that asked for
  // one: otherwise a peer could make this process copy memory it names.
  auto checked_sink = [&](absl::string_view h,
                          uint64_t n) -> absl::StatusOr<char*> {
    COHORT_ASSIGN_OR_RETURN(char* dst, sink(h, n));
    if (header.encoding == TensorEncoding::kSameHostRef && !ask_same_host) {
      return absl::DataLossError(absl::StrCat(
          "RecvTensor from ", peer,
          ": answered with a same-host reference to a request that asked for "
          "the bytes (is the peer a cohort server of this version?)"));
    }
    return dst;
  };
  absl::StatusOr<std::string> r = conn->CallWithPayload(
      ask_same_host
          ? EncodeDataPlaneRequest(
                DataPlaneMethod::kRecvTensorSameHost,
                EncodeSameHostRecvRequest(key, request.SerializeAsString()))
          : EncodeDataPlaneRequest(DataPlaneMethod::kRecvTensor,
                                   request.SerializeAsString()),
      checked_sink, deadline, wake_fd);
  if (r.ok() && header.encoding == TensorEncoding::kSameHostRef) {
    r = ReadByReference(conn, absl::string_view(ref_bytes, sizeof(ref_bytes)),
                        peer, value, deadline, wake_fd);
  }
  if (r.ok()) {
    status = absl::OkStatus();
  } else if (conn->broken()) {
    status = r.status();  // Call() rewords the transport's failure.
  } else {
    // The producer's own answer; its body carries message and payloads.
    status = DecodeErrorBody(r.status().code(), r.status().message());
  }
  if (status.ok() && header.encoding == TensorEncoding::kTensorProto) {
    TensorProto proto;
    if (!proto.ParseFromString(proto_bytes)) {
      status = absl::DataLossError(
          absl::StrCat("RecvTensor '", request.rendezvous_key(), "' from ",
                       peer, ": the TensorProto payload does not parse"));
    } else {
      absl::StatusOr<Tensor> t = DecodeWireTensor(
          proto, absl::StrCat("RecvTensor '", request.rendezvous_key(),
                              "' from ", peer));
      if (t.ok()) value->tensor = *std::move(t);
      status = t.status();
    }
  }
  if (status.ok() && value->tensor.dtype() == DT_BOOL) {
    // As Tensor::FromProto: every byte must be a valid bool.
    auto* b = static_cast<uint8_t*>(value->tensor.raw_data());
    for (int64_t i = 0; i < value->tensor.NumElements(); ++i) b[i] = b[i] != 0;
  }
  if (status.ok()) {
    value->is_dead = header.is_dead;
    value->send_start_micros = header.send_start_micros;
  }
  return status;
}

}  // namespace cohort::runtime
