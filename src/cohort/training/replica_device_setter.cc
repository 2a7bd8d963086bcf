#include "cohort/training/replica_device_setter.h"

#include <memory>
#include <utility>

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
  // Variables first, in node order, so the assignment does not depend on
  // where their consumers appear.
  absl::flat_hash_map<std::string, std::string> variable_device;
  int next_ps = 0;
  for (NodeDef& node : *graph->mutable_node()) {
    if (node.op() != "VarHandleOp") continue;
    if (node.device().empty()) {
      node.set_device(options.ps_tasks > 0
                          ? absl::StrCat("/job:", options.ps_job,
                                         "/task:", next_ps++ % options.ps_tasks)
                          : options.worker_device);
    }
    variable_device[node.name()] = node.device();
  }
  for (NodeDef& node : *graph->mutable_node()) {
    if (node.op() == "VarHandleOp" || !node.device().empty()) continue;
    const std::string* colocated = nullptr;
    for (const std::string& input : node.input()) {
      auto it = variable_device.find(ProducerOf(input));
      if (it == variable_device.end()) continue;
      if (colocated != nullptr && *colocated != it->second) {
        return absl::InvalidArgumentError(absl::StrCat(
            "replica device setter: node '", node.name(),
            "' uses variables on ", *colocated, " and ", it->second,
            "; a node can use the handles of variables on one device only"));
      }
      colocated = &it->second;
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
