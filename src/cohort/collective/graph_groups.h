// Collective groups for the graph engine's collective ops
// (graph/kernels/collective_ops.h): registers a CollectiveGroup under a
// group key in a device's resource manager, so that CollectiveReduce,
// CollectiveBcastSend/Recv and CollectiveGather with that group_key run on
// it.
//
//   auto group = CollectiveGroup::Create(options, exchange);
//   RegisterGroupForGraphs(session->device()->resource_manager(), 1,
//                          std::move(*group));
//   // graph: ops::CollectiveReduce(s, grads, 2, /*group_key=*/1, 7, "Div")
//
// Ops of one group may run concurrently in a step; the registered group
// runs one collective at a time, in the order the ops reach it, and the
// instance keys must then agree across the members (control dependencies
// order them).
//
// Errors: AlreadyExists when the key is taken in `resources`.
//
// Thread safety: thread-safe.
#ifndef COHORT_COLLECTIVE_GRAPH_GROUPS_H_
#define COHORT_COLLECTIVE_GRAPH_GROUPS_H_

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "cohort/collective/collective_group.h"
#include "cohort/graph/collective.h"
#include "cohort/graph/resource_mgr.h"

namespace cohort::collective {

absl::Status RegisterGroupForGraphs(ResourceMgr* resources, int64_t group_key,
                                    std::shared_ptr<CollectiveGroup> group);

// `group` as the graph ops use it (what RegisterGroupForGraphs adds, and
// what a CollectiveGroups::Resolver returns).
std::shared_ptr<CollectiveGroups::Group> GroupForGraphs(
    std::shared_ptr<CollectiveGroup> group);

}  // namespace cohort::collective

#endif  // COHORT_COLLECTIVE_GRAPH_GROUPS_H_
