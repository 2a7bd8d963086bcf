#include "cohort/training/elastic_gang.h"

#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cohort/base/status.h"

namespace cohort::training {
namespace {

std::string FinishedKey() {
  return absl::StrCat(coord::kElasticKeyPrefix, "/finished");
}

// How often a member waiting for another's part of the exchange looks
// whether the job finished meanwhile.
constexpr absl::Duration kFinishedPoll = absl::Milliseconds(200);

}  // namespace

ElasticGang::ElasticGang(ElasticGangOptions options,
                         coord::CoordinationAgent* agent)
    : options_(std::move(options)),
      env_(options_.env != nullptr ? options_.env : Env::Default()),
      agent_(agent),
      store_(coord::ElasticStoreOf(agent)) {
  watch_ = std::thread([this] { WatchLoop(); });
}

ElasticGang::~ElasticGang() {
  {
    absl::MutexLock lock(&watch_mu_);
    stop_watch_ = true;
  }
  watch_.join();
}

void ElasticGang::Watch(std::shared_ptr<collective::CollectiveGroup> group,
                        const coord::Membership& membership) {
  absl::MutexLock lock(&watch_mu_);
  watched_ = std::move(group);
  watched_membership_ = membership;
}

void ElasticGang::WatchLoop() {
  const absl::Duration interval =
      std::max(options_.poll_interval, absl::Milliseconds(5));
  for (;;) {
    // The group is held weakly: a read that takes long (the service out of
    // reach) does not keep a group the member has left open.
    std::weak_ptr<collective::CollectiveGroup> group;
    coord::Membership current;
    {
      absl::MutexLock lock(&watch_mu_);
      auto stopped = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(watch_mu_) {
        return stop_watch_;
      };
      env_->AwaitWithDeadline(&watch_mu_, absl::Condition(&stopped),
                              env_->Now() + interval);
      if (stop_watch_) return;
      if (watched_ == nullptr) continue;
      group = watched_;
      current = watched_membership_;
    }
    // Every generation written after the current one (a joiner's may come
    // before a removal): a member missing from any of them was removed. A
    // failed read (not written yet, or the service briefly unreachable)
    // ends the look; the next one tries again.
    std::vector<std::string> removed;
    int64_t newest = current.generation;
    for (int k = 0; k < coord::kMaxElasticGenerations; ++k) {
      absl::StatusOr<coord::Membership> next =
          coord::ReadMembership(store_, newest + 1);
      if (!next.ok()) break;
      newest = next->generation;
      for (const std::string& t : current.members) {
        if (next->RankOf(t) < 0 &&
            std::find(removed.begin(), removed.end(), t) == removed.end()) {
          removed.push_back(t);
        }
      }
    }
    int64_t seen = newest_seen_.load();
    while (seen < newest && !newest_seen_.compare_exchange_weak(seen, newest)) {
    }
    // Only joiners: the members move at a step boundary (ChangeAgreed).
    if (removed.empty()) continue;
    absl::MutexLock lock(&watch_mu_);
    std::shared_ptr<collective::CollectiveGroup> still = group.lock();
    if (still == nullptr || watched_ != still) continue;  // re-formed meanwhile
    still->Cancel(absl::UnavailableError(absl::StrCat(
        options_.task, ": elastic generation ", newest, " removed ",
        absl::StrJoin(removed, ", "), " from the group of generation ",
        current.generation,
        " (lost: exited, or silent and declared lost by the coordination "
        "service); the members move to it")));
    watched_.reset();
  }
}

absl::StatusOr<std::unique_ptr<ElasticGang>> ElasticGang::Join(
    ElasticGangOptions options, coord::CoordinationAgent* agent) {
  std::unique_ptr<ElasticGang> gang(new ElasticGang(std::move(options), agent));
  const absl::Time deadline = gang->env_->Now() + gang->options_.wait;
  const absl::Status joining = absl::OkStatus();
  COHORT_ASSIGN_OR_RETURN(gang->first_,
                          gang->AwaitGeneration(0, deadline, joining));
  int64_t generation = 0;
  if (gang->options_.restarted) {
    // A replacement: the launcher removed this task when it was lost; it
    // comes back as a new generation, which the members pick up at their
    // next step boundary.
    const std::string& me = gang->options_.task;
    COHORT_ASSIGN_OR_RETURN(
        coord::Membership joined,
        coord::ChangeMembership(gang->store_,
                                [&me](std::vector<std::string> members) {
                                  return coord::WithMember(members, me);
                                }));
    generation = joined.generation;
  }
  absl::Status formed = gang->Form(generation, deadline, joining);
  if (gang->job_finished_) return gang;
  COHORT_RETURN_IF_ERROR(formed);
  return gang;
}

absl::StatusOr<coord::Membership> ElasticGang::AwaitGeneration(
    int64_t generation, absl::Time deadline, const absl::Status& cause) {
  const absl::Duration wait =
      std::max(deadline - env_->Now(), absl::ZeroDuration());
  absl::StatusOr<std::string> value =
      agent_->GetKeyValue(coord::GenerationKey(generation), wait);
  if (absl::IsDeadlineExceeded(value.status())) {
    return absl::DeadlineExceededError(absl::StrCat(
        options_.task, ": elastic generation ", generation,
        " did not appear within ",
        absl::FormatDuration(absl::Trunc(wait, absl::Milliseconds(1))),
        cause.ok()
            ? std::string()
            : absl::StrCat(" after the group failed (", cause.message(), ")"),
        "; the launcher writes it when a task is lost or comes back: check "
        "its output (is the task still running, and its launcher alive?)"));
  }
  COHORT_RETURN_IF_ERROR(value.status());
  return coord::ReadMembership(store_, generation);
}

absl::Status ElasticGang::Form(int64_t generation, absl::Time deadline,
                               const absl::Status& cause) {
  // Leave the old generation's group first.
  Watch(nullptr, coord::Membership());
  group_.reset();
  for (;; ++generation) {
    COHORT_ASSIGN_OR_RETURN(coord::Membership m,
                            AwaitGeneration(generation, deadline, cause));
    // Anyone with the job token can write the store: a generation must be
    // a set of the job's own tasks.
    std::vector<std::string> sorted = m.members;
    std::sort(sorted.begin(), sorted.end());
    const bool unique =
        std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end();
    for (const std::string& t : m.members) {
      if (!unique || first_.RankOf(t) < 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "elastic ", m.ToString(),
            " is not a set of the job's tasks (generation 0: ",
            absl::StrJoin(first_.members, ", "),
            "); something other than `cohort launch --elastic` wrote ",
            coord::GenerationKey(generation)));
      }
    }
    const int rank = m.RankOf(options_.task);
    if (rank < 0) {
      // Only a task that was lost is removed; one that is alive again comes
      // back as a replacement with a new process.
      return absl::FailedPreconditionError(absl::StrCat(
          options_.task, " is not a member of elastic ", m.ToString(),
          ": it was declared lost; its launcher restarts it"));
    }
    if (static_cast<int>(m.members.size()) < options_.range.min) {
      // Below MIN: wait for a replacement (a newer generation) by the
      // deadline.
      std::vector<std::string> missing;
      for (const std::string& t : first_.members) {
        if (m.RankOf(t) < 0) missing.push_back(t);
      }
      // The launcher fails the job after `wait` below MIN, naming the
      // missing tasks; a member waits longer, so that verdict comes first
      // and this error only outside a launcher.
      const absl::Duration replacement_wait =
          options_.replacement_wait > absl::ZeroDuration()
              ? options_.replacement_wait
              : 2 * options_.wait + absl::Seconds(10);
      absl::StatusOr<coord::Membership> next = AwaitGeneration(
          generation + 1, std::max(deadline, env_->Now() + replacement_wait),
          cause);
      if (!next.ok()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "the elastic job has ", m.members.size(), " task(s) (",
            absl::StrJoin(m.members, ", "), "), fewer than its minimum ",
            options_.range.min, ", and no replacement joined within ",
            absl::FormatDuration(replacement_wait),
            "; missing: ", absl::StrJoin(missing, ", "),
            "; check why they failed in the launcher's output"));
      }
      continue;
    }
    collective::GroupOptions o = options_.group;
    o.name = absl::StrCat("elastic-", generation);
    o.rank = rank;
    o.size = static_cast<int>(m.members.size());
    o.task = options_.task;
    o.env = env_;
    o.setup_timeout = std::max(deadline - env_->Now(), absl::Seconds(1));
    absl::StatusOr<std::unique_ptr<collective::CollectiveGroup>> group =
        collective::CollectiveGroup::Create(
            o, MembersExchange(generation, rank, o.size));
    if (job_finished_) return absl::OkStatus();
    if (group.ok()) {
      group_ = *std::move(group);
      membership_ = std::move(m);
      rank_ = rank;
      Watch(group_, membership_);
      return absl::OkStatus();
    }
    // A member of this generation was lost while it formed: the launcher
    // writes the next one, which gets a deadline of its own.
    if (!AwaitGeneration(generation + 1, env_->Now() + options_.wait,
                         group.status())
             .ok()) {
      return Annotate(
          group.status(),
          absl::StrCat(options_.task, ": forming elastic ", m.ToString()));
    }
    deadline = env_->Now() + options_.wait;
  }
}

collective::Exchange ElasticGang::MembersExchange(int64_t generation, int rank,
                                                  int size) {
  // Round k of the group's set-up stores rank r's part under
  // ".../group/<generation>/<k>/<r>".
  auto round = std::make_shared<int>(0);
  return [this, round, generation, rank, size](
             const std::string& mine,
             absl::Time deadline) -> absl::StatusOr<std::vector<std::string>> {
    const std::string prefix = absl::StrCat(coord::kElasticKeyPrefix, "/group/",
                                            generation, "/", (*round)++, "/");
    COHORT_RETURN_IF_ERROR(agent_->InsertKeyValue(
        absl::StrCat(prefix, rank), mine, /*allow_overwrite=*/true));
    std::vector<std::string> all(size);
    for (int q = 0; q < size; ++q) {
      const std::string key = absl::StrCat(prefix, q);
      for (;;) {
        const absl::Duration left = deadline - env_->Now();
        absl::StatusOr<std::string> value = agent_->GetKeyValue(
            key, std::clamp(left, absl::ZeroDuration(), kFinishedPoll));
        if (value.ok()) {
          all[q] = *std::move(value);
          break;
        }
        if (!absl::IsDeadlineExceeded(value.status())) return value.status();
        if (store_.try_get(coord::GenerationKey(generation + 1)).ok()) {
          // A member was lost (or came back) meanwhile: the members move
          // to the next generation rather than wait for this one.
          return absl::UnavailableError(
              absl::StrCat(options_.task, ": elastic generation ",
                           generation + 1, " was written before rank ", q,
                           " of generation ", generation, " joined its group"));
        }
        if (store_.try_get(FinishedKey()).ok()) {
          job_finished_ = true;
          return absl::CancelledError(absl::StrCat(
              options_.task, ": the elastic job finished before rank ", q,
              " of generation ", generation, " joined"));
        }
        if (left <= absl::ZeroDuration()) {
          return absl::DeadlineExceededError(absl::StrCat(
              options_.task, ": rank ", q, " of elastic generation ",
              generation, " did not join the group (key ", key,
              "); check that task's log"));
        }
      }
    }
    return all;
  };
}

absl::Status ElasticGang::MarkFinished() {
  return agent_->InsertKeyValue(FinishedKey(), "1", /*allow_overwrite=*/true);
}

absl::Status ElasticGang::AllReduceMean(float* data, size_t count) {
  return group_->AllReduce(data, count, collective::ReduceOp::kMean,
                           Deadline());
}

absl::StatusOr<std::vector<std::string>> ElasticGang::AllGather(
    const std::string& mine) {
  std::string all(mine.size() * size(), '\0');
  COHORT_RETURN_IF_ERROR(
      group_->AllGather(mine.data(), mine.size(), all.data(), Deadline()));
  std::vector<std::string> out;
  for (int q = 0; q < size(); ++q) {
    out.push_back(all.substr(q * mine.size(), mine.size()));
  }
  return out;
}

absl::Status ElasticGang::Broadcast(void* data, size_t bytes, int root) {
  return group_->Broadcast(data, bytes, root, Deadline());
}

absl::StatusOr<bool> ElasticGang::ChangeAgreed() {
  // The mean is above 0 exactly when some member's watch saw the next
  // generation, and every member gets the same bits.
  float seen = newest_seen_.load() > membership_.generation ? 1.f : 0.f;
  COHORT_RETURN_IF_ERROR(AllReduceMean(&seen, 1));
  return seen > 0;
}

absl::Status ElasticGang::Reform(const absl::Status& cause) {
  return Form(membership_.generation + 1, env_->Now() + options_.wait, cause);
}

}  // namespace cohort::training
