#include "cohort/coord/elastic_membership.h"

#include <algorithm>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "cohort/base/status.h"
#include "cohort/coord/coordination_agent.h"
#include "cohort/coord/coordination_service.h"

namespace cohort::coord {
namespace {

// Bounds what a reader accepts from the store (any job-token holder can
// write there): a member list longer than this is not one of ours.
constexpr size_t kMaxMembers = 1 << 16;
// A member list longer than this is not read at all (task names are short).
constexpr size_t kMaxValueBytes = size_t{1} << 20;
// Generations are few (one per loss and one per return, bounded by the
// tasks times their restarts); a longer series is not ours.

// Orders by job, then index; names that do not parse sort last, by text.
bool MemberBefore(const std::string& a, const std::string& b) {
  absl::StatusOr<TaskId> ta = TaskId::Parse(a), tb = TaskId::Parse(b);
  if (ta.ok() != tb.ok()) return ta.ok();
  if (!ta.ok()) return a < b;
  return *ta < *tb;
}

absl::StatusOr<Membership> Decode(int64_t generation,
                                  const std::string& value) {
  Membership m;
  m.generation = generation;
  if (value.empty()) return m;
  const size_t members =
      static_cast<size_t>(std::count(value.begin(), value.end(), ',')) + 1;
  if (value.size() > kMaxValueBytes || members > kMaxMembers) {
    return absl::InvalidArgumentError(absl::StrCat(
        GenerationKey(generation), " holds ", value.size(), " bytes (", members,
        " names), more than any job has; something other than "
        "`cohort launch --elastic` wrote it"));
  }
  m.members = absl::StrSplit(value, ',');
  for (const std::string& task : m.members) {
    absl::Status parsed = TaskId::Parse(task).status();
    if (!parsed.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          GenerationKey(generation),
          " is not a member list: ", parsed.message().substr(0, 200),
          "; something other than `cohort launch "
          "--elastic` wrote it"));
    }
  }
  return m;
}

}  // namespace

absl::StatusOr<ElasticRange> ParseElasticRange(absl::string_view text,
                                               absl::string_view what) {
  std::vector<absl::string_view> parts = absl::StrSplit(text, ':');
  ElasticRange r;
  if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &r.min) ||
      !absl::SimpleAtoi(parts[1], &r.max) || r.min < 1 || r.max < r.min) {
    return absl::InvalidArgumentError(absl::StrCat(
        what,
        " expects MIN:MAX with 1 <= MIN <= MAX (as torchrun's --nnodes), "
        "got \"",
        text, "\""));
  }
  return r;
}

ElasticStore ElasticStoreOf(CoordinationAgent* agent) {
  ElasticStore s;
  s.insert_new = [agent](const std::string& key, const std::string& value) {
    return agent->InsertKeyValue(key, value, /*allow_overwrite=*/false);
  };
  s.try_get = [agent](const std::string& key) {
    return agent->TryGetKeyValue(key);
  };
  return s;
}

ElasticStore ElasticStoreOf(CoordinationService* service) {
  ElasticStore s;
  s.insert_new = [service](const std::string& key, const std::string& value) {
    return service->InsertKeyValue(key, value, /*allow_overwrite=*/false);
  };
  s.try_get = [service](const std::string& key) {
    return service->TryGetKeyValue(key);
  };
  return s;
}

int Membership::RankOf(absl::string_view task) const {
  auto it = std::find(members.begin(), members.end(), task);
  return it == members.end() ? -1 : static_cast<int>(it - members.begin());
}

std::string Membership::ToString() const {
  return absl::StrCat(
      "generation ", generation, ": ",
      members.empty() ? "no tasks" : absl::StrJoin(members, ", "));
}

std::string GenerationKey(int64_t generation) {
  return absl::StrCat(kElasticKeyPrefix, "/generation/", generation);
}

absl::StatusOr<Membership> ReadMembership(const ElasticStore& store,
                                          int64_t generation) {
  COHORT_ASSIGN_OR_RETURN(std::string value,
                          store.try_get(GenerationKey(generation)));
  return Decode(generation, value);
}

absl::StatusOr<Membership> LatestMembership(const ElasticStore& store) {
  // Generations are few (one per change of membership): read them in order
  // up to the first that is missing.
  Membership latest;
  for (int64_t g = 0;; ++g) {
    if (g >= kMaxElasticGenerations) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "more than ", kMaxElasticGenerations, " elastic generations under ",
          kElasticKeyPrefix,
          "/generation/: far more changes of membership "
          "than any job makes; something other than `cohort launch "
          "--elastic` wrote them"));
    }
    absl::StatusOr<Membership> m = ReadMembership(store, g);
    if (absl::IsNotFound(m.status())) return latest;
    if (!m.ok()) return m.status();
    latest = *std::move(m);
  }
}

absl::Status WriteInitialMembership(const ElasticStore& store,
                                    std::vector<std::string> members) {
  std::sort(members.begin(), members.end(), MemberBefore);
  return store.insert_new(GenerationKey(0), absl::StrJoin(members, ","));
}

absl::StatusOr<Membership> ChangeMembership(
    const ElasticStore& store,
    const std::function<std::vector<std::string>(std::vector<std::string>)>&
        change) {
  COHORT_ASSIGN_OR_RETURN(Membership now, LatestMembership(store));
  if (now.generation < 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "no elastic membership under ", kElasticKeyPrefix,
        "/generation/: `cohort launch --elastic` writes generation 0 before "
        "it starts the tasks; is this task running under it?"));
  }
  for (;;) {
    Membership next;
    next.generation = now.generation + 1;
    next.members = change(now.members);
    std::sort(next.members.begin(), next.members.end(), MemberBefore);
    if (next.members == now.members) return now;
    absl::Status written = store.insert_new(GenerationKey(next.generation),
                                            absl::StrJoin(next.members, ","));
    if (written.ok()) return next;
    if (!absl::IsAlreadyExists(written)) return written;
    // Another writer changed this generation first: apply the change to
    // what it wrote (and to anything written after it).
    COHORT_ASSIGN_OR_RETURN(now, LatestMembership(store));
  }
}

std::vector<std::string> WithMember(std::vector<std::string> members,
                                    const std::string& task) {
  if (std::find(members.begin(), members.end(), task) == members.end()) {
    members.push_back(task);
    std::sort(members.begin(), members.end(), MemberBefore);
  }
  return members;
}

std::vector<std::string> WithoutMember(std::vector<std::string> members,
                                       const std::string& task) {
  members.erase(std::remove(members.begin(), members.end(), task),
                members.end());
  return members;
}

}  // namespace cohort::coord
