// TensorDataClient: the consumer side of the tensor data plane
// (tensor_data_service.h) for one peer task: RecvTensor answered as a
// Tensor whose bytes are received straight into its buffer (one copy, the
// kernel's), after the header was checked (tensor_wire.h); and RunGraph,
// the master's per-step call, without gRPC's thread hand-offs.
//
//   TensorDataClient ps0("/job:ps/replica:0/task:0", "127.0.0.1:4711", token);
//   ps0.RecvAsync(&opts, &request, &value, done);
//
// Same host: when producer and consumer share a host (tensor_wire.h's
// SameHostKey), a tensor of 64 KiB or more is copied straight from the
// producer's buffer into this one with process_vm_readv: one copy, where a
// loopback socket makes two (measured here: 4 MiB in ~0.4 ms against ~2 ms).
// When the copy is refused (a sandbox without process_vm_readv; Yama's
// ptrace_scope 1, the default of some distributions, refuses it between
// sibling processes), the call asks the producer for the bytes on the same
// connection and later calls no longer ask for references.
// COHORT_TENSOR_SAME_HOST=0 in the environment turns the same-host path
// off. Trust: references are asked for only from a peer reached over
// loopback, honoured only in answer to such a request, and a copy after
// which the connection turned out closed (the producer may have freed the
// buffer) fails the call with Unavailable instead of returning its bytes.
//
// Connections are pooled: each call takes an idle authenticated connection
// (or opens one) and returns it when the call ends cleanly, so several
// RecvTensors to one peer run at once, each on its own TCP stream. Several
// connections rather than request ids on one: a 64 MiB tensor then never
// delays a small one queued behind it (no head-of-line blocking), the
// server stays one-request-per-connection (no reordering state), and on
// loopback one stream already reaches the iperf3 figure, so multiplexing
// would buy nothing but latency for small tensors.
//
// A call blocks one pool thread (StepThreadPool: grows, reuses idle
// threads) while it waits for the producer; `done` runs on that thread.
// CallOptions: the deadline bounds connect and wait (DeadlineExceeded);
// StartCancel wakes the call (Cancelled) and closes its connection, which
// makes the producer drop only this waiter.
//
// Errors:
//  - the producer's, as it answered them (worker.h: code, message,
//    payloads);
//  - Unavailable `<task> (<address>) is unavailable: <detail>`: cannot
//    connect (IsNotConnected: nothing was sent), connection lost,
//    truncated tensor. A pooled connection found dead is retried once on a
//    new one (the request id makes the retry safe);
//  - DeadlineExceeded `<Rpc> to <task> (<address>) did not finish before
//    its deadline: ...`; Cancelled `<Rpc> to <task> (<address>) was
//    cancelled: ...` (<Rpc> is RecvTensor or RunGraph);
//  - ResourceExhausted: a RunGraph request over the service's
//    kMaxRequestBytes (nothing sent: IsNotConnected, so the caller may use
//    gRPC), or an answer over kMaxReplyBytes;
//  - DataLoss / ResourceExhausted naming the peer: a malformed or
//    oversized header (the connection is closed; nothing was allocated);
//  - Unauthenticated: the peer refused the job token.
//
// Thread safety: thread-safe. The destructor shuts down calls in flight
// (they end Unavailable) and joins the pool.
#ifndef COHORT_RUNTIME_TENSOR_DATA_CLIENT_H_
#define COHORT_RUNTIME_TENSOR_DATA_CLIENT_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "cohort/rpc/framed_client.h"
#include "cohort/runtime/tensor_wire.h"
#include "cohort/runtime/worker_interface.h"
#include "cohort/runtime/worker_thread_pool.h"

namespace cohort::runtime {

class TensorDataClient {
 public:
  // `address` is "a.b.c.d:port" of the peer's tensor port.
  TensorDataClient(std::string task, std::string address, std::string job_token,
                   uint64_t max_tensor_bytes = (uint64_t{1} << 31) - 1);
  ~TensorDataClient();
  TensorDataClient(const TensorDataClient&) = delete;
  TensorDataClient& operator=(const TensorDataClient&) = delete;

  // RecvTensor (WorkerInterface::RecvTensorValueAsync's contract). Never
  // blocks the caller.
  void RecvAsync(CallOptions* opts, const RecvTensorRequest* request,
                 RecvTensorValue* value, StatusCallback done);

  // RunGraph (WorkerInterface::RunGraphAsync's contract). Never blocks the
  // caller; `done` runs on a pool thread.
  void RunGraphAsync(CallOptions* opts, const RunGraphRequest* request,
                     RunGraphResponse* response, StatusCallback done);

  // True for a failure before the request was sent: no connection to the
  // address could be made (the peer is down or moved to another port), or
  // the request is too large for the data plane.
  static bool IsNotConnected(const absl::Status& status);
  // True for a failure of the transport (connecting, a broken connection),
  // not an answer of the peer's worker.
  static bool IsTransportFailure(const absl::Status& status);

  const std::string& address() const { return address_; }

  // How a same-host tensor's bytes are copied out of the producer
  // (process_vm_readv); tests replace it to see the fallback. Returns the
  // errno of a failure, 0 on success. Set before the first call.
  using SameHostReader = std::function<int(const SameHostRef& ref, char* dst)>;
  void set_same_host_reader_for_testing(SameHostReader reader) {
    same_host_reader_ = std::move(reader);
  }
  // False once a same-host copy failed: later calls ask for bytes.
  bool same_host_enabled() const { return same_host_ok_.load(); }
  // Idle pooled connections (for tests).
  int num_idle_connections() const;

 private:
  static constexpr int kMaxIdleConnections = 16;
  static constexpr char kNotConnectedPayload[] =
      "type.googleapis.com/cohort.runtime.TensorDataNotConnected";
  static constexpr char kTransportFailurePayload[] =
      "type.googleapis.com/cohort.runtime.TensorDataTransportFailure";

  // One exchange on a connection: sends and waits for the reply.
  using Exchange = std::function<absl::Status(
      rpc::FramedClient* conn, absl::Time deadline, int wake_fd)>;
  // Runs `exchange` on a pooled connection with the call's deadline and
  // cancellation; `rpc` names the call in errors. With `retry_stale`, a
  // pooled connection that turns out dead is retried once on a fresh one.
  absl::Status Call(CallOptions* opts, const char* rpc, bool retry_stale,
                    const Exchange& exchange);
  // RecvTensor's exchange; errors as the file comment's.
  absl::Status ExchangeRecv(rpc::FramedClient* conn,
                            const RecvTensorRequest& request,
                            RecvTensorValue* value, absl::Time deadline,
                            int wake_fd);
  // After a kSameHostRef answer: copies the referenced bytes into
  // value->tensor (allocated from the header), or fetches them from the
  // producer when the copy is refused.
  absl::StatusOr<std::string> ReadByReference(rpc::FramedClient* conn,
                                              absl::string_view ref_payload,
                                              const std::string& peer,
                                              RecvTensorValue* value,
                                              absl::Time deadline, int wake_fd);
  // RunGraph's exchange.
  absl::Status ExchangeRun(rpc::FramedClient* conn, absl::string_view request,
                           RunGraphResponse* response, absl::Time deadline,
                           int wake_fd);
  // An idle pooled connection (*pooled set) when `allow_idle`, else a new
  // one.
  absl::StatusOr<std::unique_ptr<rpc::FramedClient>> TakeConnection(
      absl::Time deadline, bool allow_idle, bool* pooled);
  void ReturnConnection(std::unique_ptr<rpc::FramedClient> client);
  // The transport's own failure of a call, worded as worker_interface.h
  // asks.
  absl::Status TransportError(const char* rpc,
                              const absl::Status& status) const;

  const std::string task_;
  const std::string address_;
  const std::string job_token_;
  const uint64_t max_tensor_bytes_;
  SameHostReader same_host_reader_;
  // RecvTensor asks for same-host references while this holds (and this
  // process has a SameHostKey).
  std::atomic<bool> same_host_ok_{true};

  mutable absl::Mutex mu_;
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::unique_ptr<rpc::FramedClient>> idle_ ABSL_GUARDED_BY(mu_);
  // Connections inside a call, so the destructor can wake them.
  absl::flat_hash_set<rpc::FramedClient*> busy_ ABSL_GUARDED_BY(mu_);

  // Last: joined first, while everything the calls use still exists.
  StepThreadPool pool_;
};

}  // namespace cohort::runtime

#endif  // COHORT_RUNTIME_TENSOR_DATA_CLIENT_H_
