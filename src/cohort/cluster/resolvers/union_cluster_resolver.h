// UnionClusterResolver: one cluster made of several resolvers' clusters (for
// example several GCE instance groups, or a fixed ps job plus a discovered
// worker job).
//
// Merging cluster_spec(): resolvers are read in order, each job by job.
//  - When every resolver gives a job as a dense list, the lists are
//    concatenated in resolver order and re-indexed from 0.
//  - When any resolver gives the job sparse (or with no tasks), all are merged
//    as index -> address maps (a dense list counts as 0..n-1); an index that
//    two resolvers define is AlreadyExists "Duplicate keys detected when
//    merging two ClusterSpecs: {1}". So [a, b] + {1: c} collides, while
//    [a, b] + {3: c} merges.
//  - Jobs found in one resolver only are copied as they are.
//
// task_type, task_id and rpc_layer return the union's own override when one
// is set, else the first resolver's value. Unlike TensorFlow, an override is
// used whenever it is *set*: TensorFlow tests truthiness, so a task_id
// override of 0 (or "") silently fell back to the first resolver; here 0 is
// honoured. environment and num_accelerators are the first resolver's.
//
// Thread safety: not thread-safe (see ClusterResolver).
#ifndef COHORT_CLUSTER_RESOLVERS_UNION_CLUSTER_RESOLVER_H_
#define COHORT_CLUSTER_RESOLVERS_UNION_CLUSTER_RESOLVER_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cohort/cluster/cluster_resolver.h"

namespace cohort {

class UnionClusterResolver : public ClusterResolverWithTaskAttributes {
 public:
  struct Overrides {
    std::optional<std::string> task_type;
    std::optional<int64_t> task_id;
    std::optional<std::string> rpc_layer;
  };

  // InvalidArgument "At least one ClusterResolver is required." for an empty
  // list, and "All arguments must be a sub-class of `ClusterResolver`" for a
  // null entry.
  static absl::StatusOr<std::unique_ptr<UnionClusterResolver>> Create(
      std::vector<std::unique_ptr<ClusterResolver>> resolvers,
      Overrides overrides = {});

  std::string name() const override { return "union"; }
  // Calls each resolver's cluster_spec() once, in order; their errors are
  // returned annotated with the resolver's position and name.
  absl::StatusOr<ClusterSpec> cluster_spec() override;
  // With task_type and task_id: the address from the merged spec, prefixed
  // with `rpc_layer` or else the union's own rpc_layer override (not the
  // first resolver's). Otherwise the first resolver's master(rpc_layer).
  absl::StatusOr<std::string> master(
      std::optional<std::string> task_type = std::nullopt,
      std::optional<int64_t> task_id = std::nullopt,
      std::optional<std::string> rpc_layer = std::nullopt) override;
  // The override when set (has_value, so a task id of 0 counts), else the
  // first resolver's value. The setters (inherited) set the overrides.
  std::optional<std::string> task_type() override;
  std::optional<int64_t> task_id() override;
  std::optional<std::string> rpc_layer() override;
  std::optional<std::string> environment() override;
  absl::StatusOr<AcceleratorCounts> num_accelerators(
      std::optional<std::string> task_type = std::nullopt,
      std::optional<int64_t> task_id = std::nullopt) override;
  // Passes the lister to every resolver of the union.
  void set_device_lister(DeviceLister* lister) override;

 private:
  UnionClusterResolver(std::vector<std::unique_ptr<ClusterResolver>> resolvers,
                       Overrides overrides);

  std::vector<std::unique_ptr<ClusterResolver>> resolvers_;
};

}  // namespace cohort

#endif  // COHORT_CLUSTER_RESOLVERS_UNION_CLUSTER_RESOLVER_H_
