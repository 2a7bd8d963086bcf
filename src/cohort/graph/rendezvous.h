// Rendezvous: where a Send kernel leaves a tensor for the matching Recv.
//
// Keys follow TensorFlow:
//   "<src_device>;<src_incarnation
//   hex>;<dst_device>;<tensor_name>;<frame>:<iter>"
// e.g. "/job:worker/replica:0/task:0/device:CPU:0;0000000000000001;
//       /job:ps/replica:0/task:0/device:CPU:0;w/read:0;0:0".
// A Send and a Recv with equal keys meet; each key is used once per step
// (a step has its own rendezvous). The incarnation tells a restarted task's
// tensors from its predecessor's.
//
// Contract:
//  - Send never blocks; it fails with the abort status after StartAbort,
//    and with InvalidArgument if the key was already sent in this step.
//  - RecvAsync calls `done` exactly once: with the value when (or if
//    already) sent, or with the abort status. `done` may run on the
//    sending thread or inline; it must not block.
//  - StartAbort(status) fails all waiting and future Recvs with `status`
//    (Cancelled for cancellation, DeadlineExceeded for timeouts, or the
//    step's first error).
//
// Thread safety: implementations are thread-safe.
#ifndef COHORT_GRAPH_RENDEZVOUS_H_
#define COHORT_GRAPH_RENDEZVOUS_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "cohort/graph/rendezvous_table.h"
#include "cohort/graph/tensor.h"

namespace cohort {

class Rendezvous {
 public:
  struct ParsedKey {
    std::string full_key;
    std::string src_device;
    uint64_t src_incarnation = 0;
    std::string dst_device;
    std::string edge_name;  // tensor_name
    int64_t frame_id = 0;
    int64_t iter_id = 0;
  };
  using DoneCallback =
      std::function<void(const absl::Status& status, const Tensor& value)>;

  virtual ~Rendezvous() = default;

  static std::string CreateKey(absl::string_view src_device,
                               uint64_t src_incarnation,
                               absl::string_view dst_device,
                               absl::string_view tensor_name,
                               int64_t frame_id = 0, int64_t iter_id = 0);
  // InvalidArgument naming the key when malformed.
  static absl::StatusOr<ParsedKey> ParseKey(absl::string_view key);

  virtual absl::Status Send(const ParsedKey& key, const Tensor& value) = 0;
  virtual void RecvAsync(const ParsedKey& key, DoneCallback done) = 0;
  virtual void StartAbort(const absl::Status& status) = 0;

  // Blocking receive with a deadline (absl::InfiniteFuture() for none);
  // DeadlineExceeded naming the key when it passes. Real time.
  absl::Status Recv(const ParsedKey& key, Tensor* value, absl::Time deadline);
};

// An in-process rendezvous (one per step). Destruction fails what still
// waits with Cancelled.
class LocalRendezvous : public Rendezvous {
 public:
  LocalRendezvous() = default;
  absl::Status Send(const ParsedKey& key, const Tensor& value) override;
  void RecvAsync(const ParsedKey& key, DoneCallback done) override;
  void StartAbort(const absl::Status& status) override;

 private:
  RendezvousTable table_;
};

}  // namespace cohort

#endif  // COHORT_GRAPH_RENDEZVOUS_H_
