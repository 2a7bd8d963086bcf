#include "cohort/cluster/resolvers/union_cluster_resolver.h"

#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cohort/base/status.h"

namespace cohort {
namespace {

bool IsDenseList(const ClusterSpec::TaskMap& tasks) {
  // Mirrors ClusterSpec's as_dict: dense only with tasks 0..n-1 (an empty job
  // is exported as {}).
  int expected = 0;
  for (const auto& entry : tasks) {
    if (entry.first != expected++) return false;
  }
  return !tasks.empty();
}

}  // namespace

absl::StatusOr<std::unique_ptr<UnionClusterResolver>>
UnionClusterResolver::Create(
    std::vector<std::unique_ptr<ClusterResolver>> resolvers,
    Overrides overrides) {
  if (resolvers.empty()) {
    return absl::InvalidArgumentError(
        "At least one ClusterResolver is required.");
  }
  for (size_t i = 0; i < resolvers.size(); ++i) {
    if (resolvers[i] == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "All arguments must be a sub-class of `ClusterResolver`; argument ",
          i, " is not a resolver (null)."));
    }
  }
  return std::unique_ptr<UnionClusterResolver>(
      new UnionClusterResolver(std::move(resolvers), std::move(overrides)));
}

UnionClusterResolver::UnionClusterResolver(
    std::vector<std::unique_ptr<ClusterResolver>> resolvers,
    Overrides overrides)
    : ClusterResolverWithTaskAttributes(std::move(overrides.task_type),
                                        overrides.task_id,
                                        std::move(overrides.rpc_layer)),
      resolvers_(std::move(resolvers)) {}

absl::StatusOr<ClusterSpec> UnionClusterResolver::cluster_spec() {
  std::vector<ClusterSpec> specs;
  for (size_t i = 0; i < resolvers_.size(); ++i) {
    auto spec = resolvers_[i]->cluster_spec();
    if (!spec.ok()) {
      return Annotate(spec.status(), absl::StrCat("union: resolver ", i, " (",
                                                  resolvers_[i]->name(), ")"));
    }
    specs.push_back(*std::move(spec));
  }
  // First pass: job order (first appearance) and whether a job is sparse
  // anywhere.
  std::vector<std::string> order;
  std::map<std::string, bool> sparse;
  for (const ClusterSpec& spec : specs) {
    for (const std::string& job : spec.jobs()) {
      bool dense = IsDenseList(*spec.tasks(job));
      auto it = sparse.find(job);
      if (it == sparse.end()) {
        order.push_back(job);
        sparse[job] = !dense;
      } else if (!dense) {
        it->second = true;
      }
    }
  }
  ClusterSpec merged;
  for (const std::string& job : order) {
    if (!sparse[job]) {
      std::vector<std::string> list;
      for (const ClusterSpec& spec : specs) {
        const ClusterSpec::TaskMap* tasks = spec.tasks(job);
        if (tasks == nullptr) continue;
        for (const auto& entry : *tasks) list.push_back(entry.second);
      }
      merged.SetJob(job, list);
      continue;
    }
    ClusterSpec::TaskMap map;
    for (const ClusterSpec& spec : specs) {
      const ClusterSpec::TaskMap* tasks = spec.tasks(job);
      if (tasks == nullptr) continue;
      std::vector<std::string> duplicates;
      for (const auto& entry : *tasks) {
        if (map.count(entry.first) != 0) {
          duplicates.push_back(std::to_string(entry.first));
        }
      }
      if (!duplicates.empty()) {
        return absl::AlreadyExistsError(absl::StrCat(
            "Duplicate keys detected when merging two ClusterSpecs: {",
            absl::StrJoin(duplicates, ", "), "} in job '", job,
            "'. Give each resolver's tasks of a sparse job distinct indices."));
      }
      map.insert(tasks->begin(), tasks->end());
    }
    merged.SetJob(job, std::move(map));
  }
  return merged;
}

absl::StatusOr<std::string> UnionClusterResolver::master(
    std::optional<std::string> task_type, std::optional<int64_t> task_id,
    std::optional<std::string> rpc_layer) {
  if (task_type.has_value() && task_id.has_value()) {
    COHORT_ASSIGN_OR_RETURN(ClusterSpec spec, cluster_spec());
    COHORT_ASSIGN_OR_RETURN(std::string address,
                            TaskAddress(spec, *task_type, *task_id));
    return FormatMasterUrl(address, RpcLayerOr(rpc_layer, rpc_layer_));
  }
  return resolvers_[0]->master(std::nullopt, std::nullopt, rpc_layer);
}

std::optional<std::string> UnionClusterResolver::task_type() {
  if (task_type_.has_value()) return task_type_;
  return resolvers_[0]->task_type();
}

std::optional<int64_t> UnionClusterResolver::task_id() {
  // Deliberately `has_value()`, not TensorFlow's truthiness: an override of 0
  // is a real task id.
  if (task_id_.has_value()) return task_id_;
  return resolvers_[0]->task_id();
}

std::optional<std::string> UnionClusterResolver::rpc_layer() {
  if (rpc_layer_.has_value()) return rpc_layer_;
  return resolvers_[0]->rpc_layer();
}

std::optional<std::string> UnionClusterResolver::environment() {
  return resolvers_[0]->environment();
}

absl::StatusOr<AcceleratorCounts> UnionClusterResolver::num_accelerators(
    std::optional<std::string> task_type, std::optional<int64_t> task_id) {
  return resolvers_[0]->num_accelerators(task_type, task_id);
}

void UnionClusterResolver::set_device_lister(DeviceLister* lister) {
  ClusterResolver::set_device_lister(lister);
  for (auto& r : resolvers_) r->set_device_lister(lister);
}

}  // namespace cohort
