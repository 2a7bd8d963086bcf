#include "cohort/collective/graph_groups.h"

#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "cohort/base/status.h"
#include "cohort/graph/collective.h"

namespace cohort::collective {
namespace {

// A CollectiveGroup as the graph ops see it.
class GraphGroup : public CollectiveGroups::Group {
 public:
  explicit GraphGroup(std::shared_ptr<CollectiveGroup> group)
      : group_(std::move(group)) {}

  int size() const override { return group_->size(); }
  int rank() const override { return group_->rank(); }
  std::string transport() const override { return group_->transport(); }

  absl::Status AllReduce(Tensor* t, bool mean, int64_t instance,
                         absl::Time deadline) override {
    ElementType type;
    if (t->dtype() == DT_FLOAT) {
      type = ElementType::kFloat32;
    } else if (t->dtype() == DT_DOUBLE) {
      type = ElementType::kFloat64;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("all-reduce of ", DataTypeName(t->dtype()),
                       "; collectives reduce float and double"));
    }
    // Kernels of one step may reach the group at once; it takes one call at
    // a time.
    absl::MutexLock lock(&mu_);
    return group_->AllReduce(t->raw_data(), t->NumElements(), type,
                             mean ? ReduceOp::kMean : ReduceOp::kSum, deadline,
                             instance);
  }

  absl::Status Broadcast(Tensor* t, bool is_root, int64_t instance,
                         absl::Time deadline) override {
    absl::MutexLock lock(&mu_);
    // The receivers do not know who sends: agree on the root first.
    const char mine = is_root ? 1 : 0;
    std::vector<char> roots(group_->size());
    COHORT_RETURN_IF_ERROR(
        group_->AllGather(&mine, 1, roots.data(), deadline, instance));
    int root = -1;
    for (int q = 0; q < group_->size(); ++q) {
      if (roots[q] == 0) continue;
      if (root >= 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("broadcast instance ", instance, " has two senders: ",
                         group_->tasks()[root], " and ", group_->tasks()[q]));
      }
      root = q;
    }
    if (root < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("broadcast instance ", instance,
                       " has no sender (no member ran CollectiveBcastSend)"));
    }
    return group_->Broadcast(t->raw_data(), t->TotalBytes(), root, deadline,
                             instance);
  }

  absl::Status AllGather(const Tensor& in, Tensor* out, int64_t instance,
                         absl::Time deadline) override {
    absl::MutexLock lock(&mu_);
    return group_->AllGather(in.raw_data(), in.TotalBytes(), out->raw_data(),
                             deadline, instance);
  }

 private:
  const std::shared_ptr<CollectiveGroup> group_;
  absl::Mutex mu_;
};

}  // namespace

std::shared_ptr<CollectiveGroups::Group> GroupForGraphs(
    std::shared_ptr<CollectiveGroup> group) {
  return std::make_shared<GraphGroup>(std::move(group));
}

absl::Status RegisterGroupForGraphs(ResourceMgr* resources, int64_t group_key,
                                    std::shared_ptr<CollectiveGroup> group) {
  COHORT_ASSIGN_OR_RETURN(std::shared_ptr<CollectiveGroups> groups,
                          CollectiveGroupsOf(resources));
  return groups->Add(group_key, GroupForGraphs(std::move(group)));
}

}  // namespace cohort::collective
