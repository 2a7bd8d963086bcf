// ShmCommunicator: the collectives of a group whose members all run on one
// host, through one shared-memory segment that every member maps.
//
//   // rank 0
//   auto c0 = ShmCommunicator::Create(o0);
//   publish(c0->segment_name());
//   c0->WaitAllAttached(deadline);
//   c0->AllReduce(grads, n, kFloat32, kMean, deadline);
//
//   // every other rank
//   auto c = ShmCommunicator::Attach(o, name);
//   c->WaitAllAttached(deadline);
//   c->AllReduce(grads, n, kFloat32, kMean, deadline);
//
// The segment: a control block (barrier, per-member call descriptors and
// process ids, the first failure) and two banks of one slot per member
// (`slot_bytes` each). Data moves in rounds of at most `slot_bytes` per
// member, small enough to stay in cache between the copy into the slot, the
// reduction and the copy out:
//   AllReduce: each member copies its round, except its own part, into its
//     slot; barrier; member q reduces part q over its own buffer and the
//     other slots, in rank order, into its buffer and publishes it in its
//     slot; barrier; each member copies the other parts out of their
//     owners' slots. One member computes each element, so all get the same
//     bits.
//   Broadcast: the root fills its slot; barrier; the others copy it out.
//   AllGather: each member fills its slot; barrier; each copies all slots.
// Consecutive rounds (and calls) alternate banks, so a member writing round
// k + 1 never overwrites what a slower member still reads from round k.
//
// Security: the segment is created with mode 0600 (only this user can open
// it) under a name with 128 random bits, its pages are reserved up front
// (a full /dev/shm is an error here, never a SIGBUS later), and rank 0
// removes the name as soon as every member mapped it, so nothing is left if
// the job dies. A file of the wrong size or without the header is refused.
// The trust boundary is the user: another process of the same user could
// map the segment while it has a name, but it can as well read the job
// token from the tasks' /proc/PID/environ or attach a debugger, so the
// token adds nothing against it.
//
// Waiting: a member spins briefly (only when the group fits the CPUs), then
// sleeps on a futex, waking every 10 ms to check the deadline, a failure
// reported by another member, and whether each member's process still
// exists (so a lost member is known within about 10 ms).
//
// Errors: as communicator.h. Create/Attach: Internal when the segment
// cannot be made or mapped (with the syscall and errno), InvalidArgument
// for a segment that is not a cohort collective segment for this group.
//
// Thread safety: as communicator.h.
#ifndef COHORT_COLLECTIVE_SHM_COMMUNICATOR_H_
#define COHORT_COLLECTIVE_SHM_COMMUNICATOR_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "cohort/base/env.h"
#include "cohort/collective/call_desc.h"
#include "cohort/collective/communicator.h"

namespace cohort::collective {

inline constexpr int kMaxShmMembers = 256;

struct ShmOptions {
  std::string group;  // Named in errors.
  int rank = 0;
  std::vector<std::string> tasks;  // One per member ("worker:1"); the size.
  // Bytes per member per round; rank 0's value is the group's.
  size_t slot_bytes = size_t{512} << 10;
  Env* env = nullptr;  // nullptr: Env::Default().
};

class ShmCommunicator : public Communicator {
 public:
  // Rank 0: creates a fresh segment sized for the group.
  static absl::StatusOr<std::unique_ptr<ShmCommunicator>> Create(
      ShmOptions options);
  // Other ranks: maps the segment rank 0 created under `name`.
  static absl::StatusOr<std::unique_ptr<ShmCommunicator>> Attach(
      ShmOptions options, const std::string& name);
  ~ShmCommunicator() override;

  // Blocks until every member has mapped the segment (DeadlineExceeded
  // naming those that did not); then rank 0 removes its name.
  absl::Status WaitAllAttached(absl::Time deadline);

  const std::string& segment_name() const { return name_; }

  absl::Status AllReduce(void* data, size_t count, ElementType type,
                         ReduceOp op, int64_t instance,
                         absl::Time deadline) override;
  absl::Status Broadcast(void* data, size_t bytes, int root, int64_t instance,
                         absl::Time deadline) override;
  absl::Status AllGather(const void* in, size_t bytes, void* out,
                         int64_t instance, absl::Time deadline) override;
  const char* transport() const override { return "shm"; }
  void Cancel(const absl::Status& why) override;

 private:
  struct Control;

  ShmCommunicator(ShmOptions options, std::string name, void* base,
                  size_t bytes);

  int size() const { return static_cast<int>(options_.tasks.size()); }
  char* Slot(uint64_t round, int member) const;
  // Publishes this member's call and checks, after the first barrier, that
  // every member made the same call.
  absl::Status BeginCall(const CallDesc& desc, absl::Time deadline);
  // Waits until every member arrived (errors as above; each breaks us).
  absl::Status Barrier(absl::Time deadline);
  absl::Status WaitError(absl::Time deadline, uint32_t my_barriers);
  // Records `error` as the group's failure (first one wins), wakes the
  // others, and returns it; later calls return FailedPrecondition.
  absl::Status Fail(absl::Status error);
  // Fail() with Cancel()'s reason.
  absl::Status FailCancelled();
  std::string Member(int rank) const;
  static size_t DataOffset();
  static size_t SegmentBytes(int size, size_t slot_bytes);

  const ShmOptions options_;
  const std::string name_;
  void* const base_;
  const size_t bytes_;
  Control* const control_;
  const bool spin_;     // The group fits the CPUs: spin before sleeping.
  uint64_t round_ = 0;  // Rounds done; picks the bank.
  uint64_t calls_ = 0;  // Calls made; picks the descriptor.
  absl::Status broken_;
  // Cancel(): the waits look at the flag every kLivenessPoll.
  std::atomic<bool> cancelled_{false};
  absl::Mutex cancel_mu_;
  absl::Status cancel_why_ ABSL_GUARDED_BY(cancel_mu_);
};

}  // namespace cohort::collective

#endif  // COHORT_COLLECTIVE_SHM_COMMUNICATOR_H_
