// What the collective graph ops (kernels/collective_ops.h) need from the
// process: the collective groups this task belongs to, by group key, kept
// as a resource ("collective_groups") in a device's resource manager. The
// collective library fills it (collective/graph_groups.h); the graph engine
// only sees this interface, so it does not depend on any transport.
//
//   CollectiveGroups* groups = *CollectiveGroupsOf(device->resource_manager());
//   groups->Add(1, my_group);        // group_key 1 in the graph's ops
//
// A group nobody added is resolved on first use when a resolver is set: the
// distributed runtime sets one that asks the session's collective group
// leader who the members are (runtime/collective_resolver.h). Resolution
// runs one at a time per task; a failed one is not remembered, so the next
// step tries again.
//
// Thread safety: thread-safe. A Group serialises its own calls.
#ifndef COHORT_GRAPH_COLLECTIVE_H_
#define COHORT_GRAPH_COLLECTIVE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "cohort/graph/resource_mgr.h"
#include "cohort/graph/tensor.h"

namespace cohort {

class CollectiveGroups : public ResourceBase {
 public:
  static constexpr char kTypeName[] = "CollectiveGroups";
  static constexpr char kName[] = "collective_groups";
  // The largest group the ops accept and the runtime's leader forms.
  static constexpr int kMaxGroupSize = 4096;

  // One group as the ops use it. Every call blocks until the group's other
  // members made the same call (same instance) or `deadline`; errors name
  // the member that failed (collective/communicator.h).
  class Group {
   public:
    virtual ~Group() = default;
    virtual int size() const = 0;
    virtual int rank() const = 0;
    // How the data moves ("shm", "tcp"): for logs and tests.
    virtual std::string transport() const = 0;
    // `t` (float or double) replaced by the sum, or the mean when `mean`.
    virtual absl::Status AllReduce(Tensor* t, bool mean, int64_t instance,
                                   absl::Time deadline) = 0;
    // `t` replaced on every member by the one member's that has `is_root`.
    virtual absl::Status Broadcast(Tensor* t, bool is_root, int64_t instance,
                                   absl::Time deadline) = 0;
    // `out` (allocated by the caller: size() times `in`'s first dimension)
    // gets every member's `in`, by rank, along the first dimension.
    virtual absl::Status AllGather(const Tensor& in, Tensor* out,
                                   int64_t instance, absl::Time deadline) = 0;
  };

  // AlreadyExists when `group_key` is taken.
  absl::Status Add(int64_t group_key, std::shared_ptr<Group> group)
      ABSL_LOCKS_EXCLUDED(mu_);
  // FailedPrecondition naming the key and the keys there are.
  absl::StatusOr<std::shared_ptr<Group>> Find(int64_t group_key) const
      ABSL_LOCKS_EXCLUDED(mu_);

  // Forms the group of `group_key` with `group_size` members by `deadline`;
  // `communication_hint` is the first op's attr ("auto", or "ring": the
  // TCP ring even on one host).
  using Resolver = std::function<absl::StatusOr<std::shared_ptr<Group>>(
      int64_t group_key, int group_size, const std::string& communication_hint,
      absl::Time deadline)>;
  // Sets the resolver, named by `source` (the leader it asks). OK when one
  // of the same source is set (kept); FailedPrecondition naming both when
  // one of another source is.
  absl::Status SetResolver(const std::string& source, Resolver resolver)
      ABSL_LOCKS_EXCLUDED(mu_);
  // The added group of `group_key`, else the resolver's (added on success);
  // without a resolver, Find's error. The resolver's errors are returned.
  // Keys resolve independently; a second op of the same key waits for the
  // first's resolution (until `deadline`: DeadlineExceeded).
  absl::StatusOr<std::shared_ptr<Group>> FindOrResolve(
      int64_t group_key, int group_size, const std::string& communication_hint,
      absl::Time deadline) ABSL_LOCKS_EXCLUDED(mu_);

  std::string TypeName() const override { return kTypeName; }
  std::string DebugString() const override;

 private:
  // FailedPrecondition naming `group_key` and the keys there are.
  absl::Status NotFoundLocked(int64_t group_key) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  std::map<int64_t, std::shared_ptr<Group>> groups_ ABSL_GUARDED_BY(mu_);
  Resolver resolver_ ABSL_GUARDED_BY(mu_);
  std::string resolver_source_ ABSL_GUARDED_BY(mu_);
  // Keys whose resolution runs now (outside mu_: it blocks on other tasks).
  std::set<int64_t> resolving_ ABSL_GUARDED_BY(mu_);
};

// The groups of `resources` (created empty on first use).
absl::StatusOr<std::shared_ptr<CollectiveGroups>> CollectiveGroupsOf(
    ResourceMgr* resources);

}  // namespace cohort

#endif  // COHORT_GRAPH_COLLECTIVE_H_
