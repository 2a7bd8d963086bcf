#include "cohort/graph/collective.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace cohort {

absl::Status CollectiveGroups::Add(int64_t group_key,
                                   std::shared_ptr<Group> group) {
  absl::MutexLock lock(&mu_);
  if (!groups_.emplace(group_key, std::move(group)).second) {
    return absl::AlreadyExistsError(
        absl::StrCat("collective group key ", group_key, " is taken"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<CollectiveGroups::Group>> CollectiveGroups::Find(
    int64_t group_key) const {
  absl::MutexLock lock(&mu_);
  auto it = groups_.find(group_key);
  if (it != groups_.end()) return it->second;
  std::vector<int64_t> keys;
  for (const auto& [key, group] : groups_) keys.push_back(key);
  return absl::FailedPreconditionError(absl::StrCat(
      "no collective group with group_key ", group_key, " in this task (",
      keys.empty() ? std::string("none registered")
                   : absl::StrCat("registered: ", absl::StrJoin(keys, ", ")),
      "); name a collective group leader in the session config "
      "(experimental.collective_group_leader, which the distribute "
      "coordinator sets) so that the runtime forms it, or register the "
      "group for the session's device (collective/graph_groups.h)"));
}

bool CollectiveGroups::SetResolver(Resolver resolver) {
  absl::MutexLock lock(&mu_);
  if (resolver_) return false;
  resolver_ = std::move(resolver);
  return true;
}

absl::StatusOr<std::shared_ptr<CollectiveGroups::Group>>
CollectiveGroups::FindOrResolve(int64_t group_key, int group_size,
                                const std::string& communication_hint,
                                absl::Time deadline) {
  absl::MutexLock resolving(&resolve_mu_);
  Resolver resolver;
  {
    absl::MutexLock lock(&mu_);
    auto it = groups_.find(group_key);
    if (it != groups_.end()) return it->second;
    resolver = resolver_;
  }
  if (!resolver) return Find(group_key);
  absl::StatusOr<std::shared_ptr<Group>> group =
      resolver(group_key, group_size, communication_hint, deadline);
  if (!group.ok()) return group.status();
  absl::MutexLock lock(&mu_);
  groups_.emplace(group_key, *group);
  return *group;
}

std::string CollectiveGroups::DebugString() const {
  absl::MutexLock lock(&mu_);
  return absl::StrCat("CollectiveGroups(", groups_.size(), " groups)");
}

absl::StatusOr<std::shared_ptr<CollectiveGroups>> CollectiveGroupsOf(
    ResourceMgr* resources) {
  return resources->LookupOrCreate<CollectiveGroups>(
      "", CollectiveGroups::kName,
      []() -> absl::StatusOr<std::shared_ptr<CollectiveGroups>> {
        return std::make_shared<CollectiveGroups>();
      });
}

}  // namespace cohort
