// Elastic membership: which tasks of an elastic data-parallel job
// (`cohort launch --elastic MIN:MAX`) train together, as a numbered series
// of generations in the coordination service's key-value store.
//
//   ElasticStore store = ElasticStoreOf(agent);
//   COHORT_ASSIGN_OR_RETURN(Membership now, LatestMembership(store));
//   COHORT_ASSIGN_OR_RETURN(Membership next, ChangeMembership(store,
//       [](std::vector<std::string> m) { return WithMember(m, "worker:2"); }));
//
// Keys: "cohort/elastic/generation/<G>" holds generation G's members, task
// names joined by ",", ordered by job and index ("worker:0,worker:2,..."):
// a member's rank in the generation is its place in that list. A generation
// is written once and never changed: ChangeMembership inserts G + 1 without
// overwrite, so of two writers that change the same generation the first
// wins and the second retries on the new one (compare-and-swap on the key's
// absence). The launcher writes generation 0 (every task) and removes lost
// tasks; a task that comes back adds itself.
//
// Errors: the store's errors; InvalidArgument for a stored value that is not
// a member list (anyone with the job token can write keys).
//
// Thread safety: the functions are thread-safe if the store's are.
#ifndef COHORT_COORD_ELASTIC_MEMBERSHIP_H_
#define COHORT_COORD_ELASTIC_MEMBERSHIP_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace cohort::coord {

class CoordinationAgent;
class CoordinationService;

// "MIN:MAX" of `cohort launch --elastic`, in every task's environment.
inline constexpr char kEnvElastic[] = "COHORT_ELASTIC";
// How long members wait for a lost task's replacement or the next
// generation (an absl duration, "60s").
inline constexpr char kEnvElasticWait[] = "COHORT_ELASTIC_WAIT";
inline constexpr char kElasticKeyPrefix[] = "cohort/elastic";
// A job has at most this many generations (anyone with the job token can
// write keys: readers stop there).
inline constexpr int64_t kMaxElasticGenerations = 1 << 14;

struct ElasticRange {
  int min = 0;
  int max = 0;
};
// "3:4" (1 <= MIN <= MAX); InvalidArgument naming `what` otherwise.
absl::StatusOr<ElasticRange> ParseElasticRange(absl::string_view text,
                                               absl::string_view what);

// The two key-value operations the protocol needs.
struct ElasticStore {
  // Writes a new key; AlreadyExists when it is present.
  std::function<absl::Status(const std::string& key, const std::string& value)>
      insert_new;
  // NotFound when absent.
  std::function<absl::StatusOr<std::string>(const std::string& key)> try_get;
};
ElasticStore ElasticStoreOf(CoordinationAgent* agent);
ElasticStore ElasticStoreOf(CoordinationService* service);

struct Membership {
  int64_t generation = -1;  // -1: none written yet
  std::vector<std::string> members;
  // The member's rank, or -1.
  int RankOf(absl::string_view task) const;
  std::string ToString() const;  // "generation 2: worker:0, worker:1"
};

std::string GenerationKey(int64_t generation);

// Generation `generation`; NotFound when it was not written (yet).
absl::StatusOr<Membership> ReadMembership(const ElasticStore& store,
                                          int64_t generation);
// The newest generation (generation -1 when none exists).
absl::StatusOr<Membership> LatestMembership(const ElasticStore& store);
// Writes generation 0 (AlreadyExists when there is one).
absl::Status WriteInitialMembership(const ElasticStore& store,
                                    std::vector<std::string> members);
// Applies `change` to the newest generation and writes the result as the
// next one, retrying when another writer was first. Returns the generation
// that holds the change (the newest one, unwritten, when `change` changes
// nothing). FailedPrecondition when there is no generation 0.
absl::StatusOr<Membership> ChangeMembership(
    const ElasticStore& store,
    const std::function<std::vector<std::string>(std::vector<std::string>)>&
        change);
// `members` with `task` added in order / removed.
std::vector<std::string> WithMember(std::vector<std::string> members,
                                    const std::string& task);
std::vector<std::string> WithoutMember(std::vector<std::string> members,
                                       const std::string& task);

}  // namespace cohort::coord

#endif  // COHORT_COORD_ELASTIC_MEMBERSHIP_H_
