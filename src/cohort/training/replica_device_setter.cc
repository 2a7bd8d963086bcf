#include "cohort/training/replica_device_setter.h"

#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "cohort/base/status.h"

namespace cohort::training {
namespace {

// The producing node of a data input ("w", "w:0"); "" for a control input.
absl::string_view ProducerOf(absl::string_view input) {
  if (absl::StartsWith(input, "^")) return "";
  const size_t colon = input.rfind(':');
  return colon == absl::string_view::npos ? input : input.substr(0, colon);
}

}  // namespace

absl::Status ApplyReplicaDeviceSetter(const ReplicaDeviceSetterOptions& options,
                                      GraphDef* graph) {
  if (options.ps_tasks < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("replica device setter: ps_tasks is ", options.ps_tasks,
                     "; it must be >= 0"));
  }
  // Variables, in node order, and the groups that one node's handle
  // inputs make (an optimizer's variable and its slots): a group shares a
  // device, that of its first variable.
  std::vector<NodeDef*> variables;
  absl::flat_hash_map<std::string, int> index;  // Variable name -> position.
  for (NodeDef& node : *graph->mutable_node()) {
    if (node.op() != "VarHandleOp") continue;
    index[node.name()] = static_cast<int>(variables.size());
    variables.push_back(&node);
  }
  std::vector<int> group(variables.size());
  for (size_t i = 0; i < group.size(); ++i) group[i] = static_cast<int>(i);
  auto find = [&group](int v) {
    while (group[v] != v) v = group[v] = group[group[v]];
    return v;
  };
  for (const NodeDef& node : graph->node()) {
    int first = -1;
    for (const std::string& input : node.input()) {
      auto it = index.find(ProducerOf(input));
      if (it == index.end()) continue;
      if (first < 0) {
        first = find(it->second);
      } else {
        // The earlier variable leads, so placement follows node order.
        const int other = find(it->second);
        group[std::max(first, other)] = std::min(first, other);
        first = std::min(first, other);
      }
    }
  }
  int next_ps = 0;
  for (size_t i = 0; i < variables.size(); ++i) {
    NodeDef* v = variables[i];
    if (!v->device().empty()) continue;
    const int leader = find(static_cast<int>(i));
    if (leader != static_cast<int>(i)) {
      v->set_device(variables[leader]->device());
    } else if (options.ps_tasks > 0) {
      v->set_device(absl::StrCat("/job:", options.ps_job,
                                 "/task:", next_ps++ % options.ps_tasks));
    } else {
      v->set_device(options.worker_device);
    }
  }
  for (NodeDef& node : *graph->mutable_node()) {
    if (node.op() == "VarHandleOp" || !node.device().empty()) continue;
    const std::string* colocated = nullptr;
    for (const std::string& input : node.input()) {
      auto it = index.find(ProducerOf(input));
      if (it == index.end()) continue;
      const std::string& device = variables[it->second]->device();
      if (colocated != nullptr && *colocated != device) {
        return absl::InvalidArgumentError(
            absl::StrCat("replica device setter: node '", node.name(),
                         "' uses variables placed explicitly on ", *colocated,
                         " and ", device,
                         "; a node can use the handles of variables on one "
                         "device only"));
      }
      colocated = &device;
    }
    node.set_device(colocated != nullptr ? *colocated : options.worker_device);
  }
  return absl::OkStatus();
}

SessionFactory WithReplicaDeviceSetter(SessionFactory inner,
                                       ReplicaDeviceSetterOptions options) {
  return [inner = std::move(inner), options = std::move(options)](
             const std::string& master, const GraphDef& graph,
             const ConfigProto& config)
             -> absl::StatusOr<std::unique_ptr<Session>> {
    GraphDef placed = graph;
    COHORT_RETURN_IF_ERROR(ApplyReplicaDeviceSetter(options, &placed));
    return inner(master, placed, config);
  };
}

}  // namespace cohort::training
