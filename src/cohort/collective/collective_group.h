// CollectiveGroup: a fixed group of tasks that run collectives together
// (all-reduce, broadcast, all-gather), as TensorFlow's collective ops and
// the multi-worker mirrored strategy use them.
//
//   GroupOptions o;
//   o.name = "gradients"; o.rank = partition; o.size = num_tasks;
//   o.task = "worker:1"; o.job_token = token;
//   COHORT_ASSIGN_OR_RETURN(auto group, CollectiveGroup::Create(
//       o, ExchangeThroughCoordination(agent, "collective/gradients")));
//   COHORT_RETURN_IF_ERROR(group->AllReduce(grads.data(), grads.size(),
//                                           ReduceOp::kMean, deadline));
//
// Resolution: Create() tells every member who the others are through an
// Exchange (an all-gather of one short string per member), normally the
// coordination service's key-value store; nothing of the data goes through
// it. When every member runs on this host (same boot, PID and network
// namespaces and /dev/shm), the group moves data through shared memory
// (shm_communicator.h); otherwise over TCP between the members' own
// endpoints (ring_communicator.h), which check the job token like every
// cohort endpoint. GroupOptions::transport can force either.
//
// Every member must make the same calls in the same order (that is the
// instance matching TensorFlow does with instance keys); the transports
// check what they can and name both members when they disagree.
//
// Errors: Create(): the exchange's errors; InvalidArgument for bad options
// or members that disagree on the group; FailedPrecondition when shared
// memory was forced but the members are not on one host. Collectives: as
// communicator.h; every error names the group, the member and its task.
//
// Thread safety: thread-compatible (one collective at a time), except
// Cancel(), which any thread may call.
#ifndef COHORT_COLLECTIVE_COLLECTIVE_GROUP_H_
#define COHORT_COLLECTIVE_COLLECTIVE_GROUP_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cohort/base/env.h"
#include "cohort/collective/communicator.h"

namespace cohort::coord {
class CoordinationAgent;
}

namespace cohort::collective {

// Hands `mine` to every member and returns all members' strings by rank,
// or an error by `deadline`.
using Exchange = std::function<absl::StatusOr<std::vector<std::string>>(
    const std::string& mine, absl::Time deadline)>;

// An Exchange through the coordination service: round k stores `mine`
// under "<prefix>/<k>/<rank>" and reads every member's key (blocking gets
// with the deadline). Errors name the missing member's key.
Exchange ExchangeThroughCoordination(coord::CoordinationAgent* agent,
                                     std::string prefix, int rank, int size);

enum class Transport { kAuto, kSharedMemory, kTcp };

struct GroupOptions {
  std::string name = "default";  // Named in errors and keys.
  int rank = 0;
  int size = 1;
  std::string task;  // This member's task ("worker:1"); default "rank N".
  Transport transport = Transport::kAuto;
  // TCP only: the address this member's endpoint listens on (an address
  // the others can reach) and the job token it requires.
  std::string host = "127.0.0.1";
  std::string job_token;
  // Deadline for Create() (the exchange and connecting).
  absl::Duration setup_timeout = absl::Minutes(5);
  size_t shm_slot_bytes = size_t{512} << 10;
  // The TCP ring's piece size (why this default: kDefaultRingChunkBytes).
  size_t tcp_chunk_bytes = kDefaultRingChunkBytes;
  Env* env = nullptr;  // nullptr: Env::Default().
};

class CollectiveGroup {
 public:
  static absl::StatusOr<std::unique_ptr<CollectiveGroup>> Create(
      GroupOptions options, const Exchange& exchange);

  // `instance` names the call; every member must pass the same one (the
  // graph ops pass their instance key). kAutoInstance numbers the calls
  // 0, 1, 2, ... per group, which all members agree on when they make the
  // same calls.
  static constexpr int64_t kAutoInstance = -1;

  // In place; every member ends with the same bits.
  absl::Status AllReduce(float* data, size_t count, ReduceOp op,
                         absl::Time deadline, int64_t instance = kAutoInstance);
  absl::Status AllReduce(double* data, size_t count, ReduceOp op,
                         absl::Time deadline, int64_t instance = kAutoInstance);
  absl::Status AllReduce(void* data, size_t count, ElementType type,
                         ReduceOp op, absl::Time deadline,
                         int64_t instance = kAutoInstance);
  // `root`'s bytes into everyone's `data`.
  absl::Status Broadcast(void* data, size_t bytes, int root,
                         absl::Time deadline, int64_t instance = kAutoInstance);
  // out (size() * bytes) gets member q's `in` at q * bytes.
  absl::Status AllGather(const void* in, size_t bytes, void* out,
                         absl::Time deadline, int64_t instance = kAutoInstance);

  int rank() const { return options_.rank; }
  int size() const { return options_.size; }
  const std::string& name() const { return options_.name; }
  // Task of each member, by rank.
  const std::vector<std::string>& tasks() const { return tasks_; }
  // "shm" or "tcp".
  const char* transport() const { return communicator_->transport(); }
  // Ends the collective in flight and every later one with `why`; the other
  // members see this one fail. Thread-safe (communicator.h).
  void Cancel(const absl::Status& why) { communicator_->Cancel(why); }

 private:
  CollectiveGroup(GroupOptions options, std::vector<std::string> tasks,
                  std::unique_ptr<Communicator> communicator)
      : options_(std::move(options)),
        tasks_(std::move(tasks)),
        communicator_(std::move(communicator)) {}

  int64_t Instance(int64_t requested) {
    const int64_t counted = calls_++;
    return requested == kAutoInstance ? counted : requested;
  }

  const GroupOptions options_;
  const std::vector<std::string> tasks_;
  const std::unique_ptr<Communicator> communicator_;
  int64_t calls_ = 0;
};

// This host's identity for choosing shared memory: boot id, PID and network
// namespaces and the /dev/shm file system. Equal keys: the two processes are
// on one host and shared memory works between them.
std::string SharedMemoryHostKey();

}  // namespace cohort::collective

#endif  // COHORT_COLLECTIVE_COLLECTIVE_GROUP_H_
