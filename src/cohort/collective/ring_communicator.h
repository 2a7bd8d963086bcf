// RingCommunicator: the collectives of a group over TCP, for members on
// different hosts: each member serves one framed endpoint (rpc/, so every
// connection proves the job token) and sends to the next member of the
// ring, receiving from the previous one.
//
//   auto c = RingCommunicator::Start(options, "10.0.0.5");
//   addresses = exchange(c->address());        // every member's, by rank
//   c->Connect(addresses, deadline);
//   c->AllReduce(grads, n, kFloat32, kSum, deadline);
//
// Algorithms (N members, data split into N parts on 16-element bounds):
//   AllReduce: reduce-scatter, N - 1 steps in which member r sends part
//     (r - s) mod N and adds the part it receives; member r then holds the
//     complete sum of part (r + 1) mod N (divided by N for MEAN), which an
//     all-gather of N - 1 steps hands round the ring. Every element is
//     summed once, by one member, so all end with the same bits.
//   Broadcast: the root's data travels the chain root, root + 1, ...
//   AllGather: N - 1 steps, each forwarding the block received last.
// Parts travel in pieces of at most `chunk_bytes`, so a member reduces one
// piece while the next is on the wire.
//
// Wire: each piece is one framed request: its u64 sequence number on the
// link, the call's descriptor (call_desc.h), then the bytes. The first
// request of a connection is the sender's u32 rank and the group's name;
// only the previous member's connection may deliver pieces. A piece out of
// order, of another call or of the wrong size breaks the group
// (InvalidArgument naming both calls). A member that fails sends its next
// member an abort with the reason, which goes round the ring, so every
// member reports the first cause. Pieces wait in an inbox capped at
// `max_inbox_bytes` (only a broadcast's sender can run that far ahead of a
// late receiver); a sender that overfills it is cut off.
//
// Security: every connection proves the job token (rpc/framed_server.h).
//
// Errors: as communicator.h; Unavailable when the previous member's
// connection closes or the next member cannot be reached.
//
// Thread safety: as communicator.h. The endpoint's loop thread fills the
// inbox; the caller's thread sends and consumes.
#ifndef COHORT_COLLECTIVE_RING_COMMUNICATOR_H_
#define COHORT_COLLECTIVE_RING_COMMUNICATOR_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "cohort/base/env.h"
#include "cohort/collective/call_desc.h"
#include "cohort/collective/communicator.h"
#include "cohort/rpc/framed_client.h"
#include "cohort/rpc/framed_server.h"

namespace cohort::collective {

struct RingOptions {
  std::string group;  // Named in errors.
  int rank = 0;
  std::vector<std::string> tasks;  // One per member; the size.
  std::string job_token;           // Proven on every connection.
  size_t chunk_bytes = kDefaultRingChunkBytes;
  size_t max_inbox_bytes = size_t{1} << 30;
  Env* env = nullptr;  // nullptr: Env::Default().
};

class RingCommunicator : public Communicator {
 public:
  // Starts this member's endpoint on `host`. InvalidArgument for bad
  // options; the server's errors (rpc/framed_server.h).
  static absl::StatusOr<std::unique_ptr<RingCommunicator>> Start(
      RingOptions options, const std::string& host);
  ~RingCommunicator() override;

  // "host:port" of this member's endpoint.
  std::string address() const { return server_->address(); }
  // The framed identity of `rank`'s endpoint (its FramedServerOptions::
  // identity): the previous member connects to that rank's and no other.
  std::string Identity(int rank) const;

  // Connects to the next member (addresses[(rank + 1) % N]) by `deadline`.
  // Unavailable / Unauthenticated / DeadlineExceeded naming the member.
  absl::Status Connect(const std::vector<std::string>& addresses,
                       absl::Time deadline);

  absl::Status AllReduce(void* data, size_t count, ElementType type,
                         ReduceOp op, int64_t instance,
                         absl::Time deadline) override;
  absl::Status Broadcast(void* data, size_t bytes, int root, int64_t instance,
                         absl::Time deadline) override;
  absl::Status AllGather(const void* in, size_t bytes, void* out,
                         int64_t instance, absl::Time deadline) override;
  const char* transport() const override { return "tcp"; }
  // Also hangs up on the next member, so that a send blocked on it ends.
  void Cancel(const absl::Status& why) override;

 private:
  class Inbox;

  explicit RingCommunicator(RingOptions options);

  int size() const { return static_cast<int>(options_.tasks.size()); }
  int next() const { return (options_.rank + 1) % size(); }
  int prev() const { return (options_.rank + size() - 1) % size(); }
  std::string Member(int rank) const;
  absl::Status CheckUsable() const;
  absl::Status Fail(absl::Status error);
  // Cancel()'s reason; OK when it was not called.
  absl::Status Cancelled();

  // Sends `bytes` at `data` as the next piece to the next member.
  absl::Status SendPiece(const char* data, size_t bytes, absl::Time deadline);
  // Waits for the next piece from the previous member; it must be `bytes`
  // long. The returned string holds the header before the data (at
  // kPieceHeader).
  absl::StatusOr<std::string> RecvPiece(size_t bytes, absl::Time deadline);
  // Sends part `send` of `data` and receives into part `recv` piece by
  // piece, adding (accumulate) or copying what arrives.
  absl::Status Exchange(char* data, size_t elem, size_t send_lo, size_t send_hi,
                        size_t recv_lo, size_t recv_hi, bool accumulate,
                        ElementType type, absl::Time deadline);

  const RingOptions options_;
  std::unique_ptr<Inbox> inbox_;
  std::unique_ptr<rpc::FramedServer> server_;
  std::unique_ptr<rpc::FramedClient> client_;
  std::string next_address_;
  uint64_t sent_ = 0;  // Pieces sent to the next member.
  CallDesc desc_;      // The call in progress; every piece carries it.
  absl::Status broken_;
  absl::Mutex cancel_mu_;
  absl::Status cancelled_ ABSL_GUARDED_BY(cancel_mu_);
};

}  // namespace cohort::collective

#endif  // COHORT_COLLECTIVE_RING_COMMUNICATOR_H_
