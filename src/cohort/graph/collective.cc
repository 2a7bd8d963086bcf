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
  return NotFoundLocked(group_key);
}

absl::Status CollectiveGroups::NotFoundLocked(int64_t group_key) const {
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

absl::Status CollectiveGroups::SetResolver(const std::string& source,
                                           Resolver resolver) {
  absl::MutexLock lock(&mu_);
  if (resolver_) {
    if (resolver_source_ == source) return absl::OkStatus();
    return absl::FailedPreconditionError(absl::StrCat(
        "this task's collective groups are formed through the group leader ",
        resolver_source_, "; a session now names ", source,
        ": every session of a job must name the same "
        "collective_group_leader"));
  }
  resolver_ = std::move(resolver);
  resolver_source_ = source;
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<CollectiveGroups::Group>>
CollectiveGroups::FindOrResolve(int64_t group_key, int group_size,
                                const std::string& communication_hint,
                                absl::Time deadline) {
  Resolver resolver;
  {
    absl::MutexLock lock(&mu_);
    struct Ready {
      CollectiveGroups* self;
      int64_t key;
      bool operator()() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(self->mu_) {
        return self->groups_.count(key) > 0 || self->resolving_.count(key) == 0;
      }
    } ready{this, group_key};
    if (!mu_.AwaitWithDeadline(absl::Condition(&ready), deadline)) {
      return absl::DeadlineExceededError(absl::StrCat(
          "another op of this task is still forming collective group ",
          group_key, " (it waits for the group's other members)"));
    }
    auto it = groups_.find(group_key);
    if (it != groups_.end()) return it->second;
    if (!resolver_) return NotFoundLocked(group_key);
    resolver = resolver_;
    resolving_.insert(group_key);
  }
  absl::StatusOr<std::shared_ptr<Group>> group =
      resolver(group_key, group_size, communication_hint, deadline);
  absl::MutexLock lock(&mu_);
  resolving_.erase(group_key);
  if (!group.ok()) return group.status();
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
