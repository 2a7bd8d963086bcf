// What every collective transport of a group implements: the collectives
// over raw buffers, for one member (rank) of a fixed group. The group
// (collective_group.h) picks the transport; users call the group.
//
// Every member must make the same calls, in the same order, with the same
// sizes, element type, operation, root and instance (the caller's name for
// the call: TensorFlow's instance key, or a counter). The transports check
// this and report a mismatch (InvalidArgument naming both members' calls);
// then the group is broken.
//
// Errors (each message names the group, the ranks and tasks involved, and
// what to check):
//   - DeadlineExceeded: a member did not take part by the deadline (named);
//   - Unavailable: a member's process or connection is gone;
//   - InvalidArgument: the members disagree on the call;
//   - FailedPrecondition: the group broke in an earlier call (its error is
//     repeated), or a member reported a failure of its own.
// After any error the communicator is broken: every later call returns
// FailedPrecondition with the first error.
//
// Thread safety: thread-compatible; one call at a time per member.
#ifndef COHORT_COLLECTIVE_COMMUNICATOR_H_
#define COHORT_COLLECTIVE_COMMUNICATOR_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace cohort::collective {

// The TCP ring's default piece size (GroupOptions::tcp_chunk_bytes,
// RingOptions::chunk_bytes). 256 KiB rather than 1 MiB: a member forwards a
// piece only once it has all of it, so smaller pieces keep more of a ring's
// links busy at once; across 4 lab hosts on 5 Gbit/s links the all-reduce
// went from 0.66 to 0.88 of the link's bound (docs/lab.md).
inline constexpr size_t kDefaultRingChunkBytes = size_t{256} << 10;

enum class ElementType { kFloat32, kFloat64 };
enum class ReduceOp { kSum, kMean };

size_t ElementSize(ElementType type);
const char* ElementTypeName(ElementType type);
const char* ReduceOpName(ReduceOp op);

class Communicator {
 public:
  virtual ~Communicator() = default;

  // Replaces `count` elements at `data` by their element-wise reduction over
  // the group (kMean: the sum divided by the group size). Every member ends
  // with bit-identical values.
  virtual absl::Status AllReduce(void* data, size_t count, ElementType type,
                                 ReduceOp op, int64_t instance,
                                 absl::Time deadline) = 0;
  // Copies `bytes` at `data` of member `root` into `data` of every member.
  virtual absl::Status Broadcast(void* data, size_t bytes, int root,
                                 int64_t instance, absl::Time deadline) = 0;
  // Writes member q's `bytes` from `in` at out + q * bytes, on every member
  // (out holds size() * bytes).
  virtual absl::Status AllGather(const void* in, size_t bytes, void* out,
                                 int64_t instance, absl::Time deadline) = 0;

  // "shm" or "tcp".
  virtual const char* transport() const = 0;

  // Ends the call in flight, and every later one, with `why` (the others
  // see this member fail): a member that knows the group is over (an
  // elastic gang whose membership changed) stops waiting for a member that
  // may never answer. Thread-safe: the one call that may run concurrently
  // with a collective; only after the communicator is set up.
  virtual void Cancel(const absl::Status& why) = 0;
};

}  // namespace cohort::collective

#endif  // COHORT_COLLECTIVE_COMMUNICATOR_H_
