#include "cohort/runtime/collective_leader.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cohort/runtime/device_name.h"

namespace cohort::runtime {
namespace {

std::string GroupName(int64_t key) {
  return absl::StrCat("collective group ", key);
}

}  // namespace

CollectiveLeader::CollectiveLeader(std::string task, DeadlineTimer* timer)
    : task_(std::move(task)), timer_(timer) {}

CollectiveLeader::~CollectiveLeader() {
  Stop(absl::UnavailableError(
      absl::StrCat("collective group leader ", task_, " is stopping")));
}

std::vector<std::string> CollectiveLeader::Group::Members() const {
  std::vector<std::string> members;
  for (const auto& [key, member] : joined) members.push_back(member.first);
  return members;
}

int CollectiveLeader::Group::RankOf(const std::string& task) const {
  int rank = 0;
  for (const auto& [key, member] : joined) {
    if (member.first == task) return rank;
    ++rank;
  }
  return -1;
}

void CollectiveLeader::Fill(const Group& group, int64_t key,
                            CompleteGroupResponse* response) const {
  response->set_group_key(key);
  response->set_group_size(group.size);
  response->set_generation(group.generation);
  response->clear_task();
  for (const std::string& t : group.Members()) response->add_task(t);
}

uint64_t CollectiveLeader::Arm(absl::Time deadline, std::function<void()> fn) {
  if (deadline == absl::InfiniteFuture()) return 0;
  return timer_->Schedule(deadline, std::move(fn));
}

void CollectiveLeader::Run(Answers answers) {
  for (auto& [done, status] : answers) done(status);
}

void CollectiveLeader::CompleteGroup(absl::Time deadline,
                                     const CompleteGroupRequest& request,
                                     CompleteGroupResponse* response,
                                     StatusCallback done) {
  const int64_t key = request.group_key();
  const std::string& task = request.task();
  if (request.group_size() < 1 || request.group_size() > kMaxGroupSize) {
    return done(absl::InvalidArgumentError(
        absl::StrCat(GroupName(key), ": ", task, " asked for group_size ",
                     request.group_size(), "; a group has 1 to ", kMaxGroupSize,
                     " members")));
  }
  absl::StatusOr<DeviceName> name = DeviceName::Parse(task);
  if (!name.ok() || !name->has_job || !name->has_task || name->has_type) {
    return done(absl::InvalidArgumentError(
        absl::StrCat(GroupName(key), ": the asking task '", task,
                     "' is not a task name (/job:J/replica:0/task:T)")));
  }
  Answers answers;
  {
    absl::MutexLock lock(&mu_);
    JoinLocked(deadline, request, {name->job, name->task}, response,
               std::move(done), &answers);
  }
  Run(std::move(answers));
}

void CollectiveLeader::JoinLocked(absl::Time deadline,
                                  const CompleteGroupRequest& request,
                                  const MemberKey& member,
                                  CompleteGroupResponse* response,
                                  StatusCallback done, Answers* answers) {
  const int64_t key = request.group_key();
  const std::string& task = request.task();
  if (!stopped_.ok()) {
    answers->emplace_back(std::move(done), stopped_);
    return;
  }
  auto it = groups_.find(key);
  if (it == groups_.end()) {
    if (static_cast<int>(groups_.size()) >= kMaxGroups) {
      answers->emplace_back(
          std::move(done),
          absl::ResourceExhaustedError(absl::StrCat(
              GroupName(key), ": the leader ", task_, " already holds ",
              kMaxGroups, " groups; use fewer group keys")));
      return;
    }
    it = groups_.emplace(key, Group()).first;
    it->second.size = request.group_size();
  }
  Group& group = it->second;
  auto joined = group.joined.find(member);
  if (joined != group.joined.end() &&
      joined->second.second != request.incarnation()) {
    if (!group.complete()) {
      // Restarted while the group was forming: nothing was set up yet.
      joined->second.second = request.incarnation();
    } else {
      // Restarted after: whatever the old membership set up is gone.
      for (auto& [r, round] : group.rounds) {
        for (auto& [id, w] : round.waiters) {
          if (w.timer_id != 0) timer_->Cancel(w.timer_id);
          answers->emplace_back(
              std::move(w.done),
              absl::AbortedError(absl::StrCat(
                  GroupName(key), ": ", task,
                  " restarted (new incarnation) during set-up round ", r,
                  "; the group is formed anew")));
        }
      }
      group.joined.clear();
      group.rounds.clear();
      group.size = request.group_size();
      ++group.generation;
      joined = group.joined.end();
    }
  }
  if (group.size != request.group_size()) {
    answers->emplace_back(
        std::move(done),
        absl::InvalidArgumentError(
            absl::StrCat(GroupName(key), ": ", task, " asked for group_size ",
                         request.group_size(), " but ",
                         group.joined.empty() ? std::string("the group")
                                              : group.Members().front(),
                         " asked for ", group.size,
                         "; every member's collective ops must have the same "
                         "group_size")));
    return;
  }
  if (joined == group.joined.end()) {
    if (group.complete()) {
      answers->emplace_back(
          std::move(done),
          absl::InvalidArgumentError(absl::StrCat(
              GroupName(key), " (group_size ", group.size, ") already has ",
              group.size, " members (", absl::StrJoin(group.Members(), ", "),
              "); ", task,
              " would be one more: check the group_size of its collective "
              "ops")));
      return;
    }
    group.joined.emplace(member, std::make_pair(task, request.incarnation()));
  }
  if (!group.complete()) {
    const uint64_t id = next_waiter_++;
    Waiter& w = group.waiters[id];
    w.done = std::move(done);
    w.group_response = response;
    w.timer_id = Arm(deadline, [this, key, id] { OnGroupDeadline(key, id); });
    return;
  }
  Fill(group, key, response);
  answers->emplace_back(std::move(done), absl::OkStatus());
  for (auto& [id, w] : group.waiters) {
    if (w.timer_id != 0) timer_->Cancel(w.timer_id);
    Fill(group, key, w.group_response);
    answers->emplace_back(std::move(w.done), absl::OkStatus());
  }
  group.waiters.clear();
}

void CollectiveLeader::CompleteInstance(absl::Time deadline,
                                        const CompleteInstanceRequest& request,
                                        CompleteInstanceResponse* response,
                                        StatusCallback done) {
  const int64_t key = request.group_key();
  const std::string& task = request.task();
  if (request.payload().size() > kMaxPayloadBytes) {
    return done(absl::InvalidArgumentError(
        absl::StrCat(GroupName(key), ": ", task, " sent ",
                     request.payload().size(), " bytes for set-up round ",
                     request.round(), "; at most ", kMaxPayloadBytes)));
  }
  Answers answers;
  {
    absl::MutexLock lock(&mu_);
    if (!stopped_.ok()) return done(stopped_);
    auto it = groups_.find(key);
    if (it == groups_.end() || !it->second.complete() ||
        it->second.generation != request.generation()) {
      return done(absl::FailedPreconditionError(absl::StrCat(
          GroupName(key), ": set-up round ", request.round(), " from ", task,
          " names generation ", request.generation(), ", but the leader ",
          task_, " has ",
          it == groups_.end()
              ? std::string("no such group")
              : absl::StrCat("generation ", it->second.generation,
                             it->second.complete() ? "" : " still forming"),
          ": a member restarted; resolve the group again")));
    }
    Group& group = it->second;
    const int rank = group.RankOf(task);
    if (rank < 0) {
      return done(absl::FailedPreconditionError(
          absl::StrCat(GroupName(key), ": ", task, " is not a member (",
                       absl::StrJoin(group.Members(), ", "), ")")));
    }
    auto round_it = group.rounds.find(request.round());
    if (round_it == group.rounds.end()) {
      if (static_cast<int>(group.rounds.size()) >= kMaxOpenRounds) {
        return done(absl::ResourceExhaustedError(
            absl::StrCat(GroupName(key), ": ", kMaxOpenRounds,
                         " set-up rounds already wait at the leader ", task_)));
      }
      round_it = group.rounds.emplace(request.round(), Round()).first;
      round_it->second.payloads.resize(group.size);
      round_it->second.sent.resize(group.size, false);
    }
    Round& round = round_it->second;
    round.payloads[rank] = request.payload();
    round.sent[rank] = true;
    if (std::find(round.sent.begin(), round.sent.end(), false) !=
        round.sent.end()) {
      const uint64_t id = next_waiter_++;
      Waiter& w = round.waiters[id];
      w.done = std::move(done);
      w.round_response = response;
      const int64_t r = request.round();
      w.timer_id =
          Arm(deadline, [this, key, r, id] { OnRoundDeadline(key, r, id); });
      return;
    }
    for (const std::string& p : round.payloads) response->add_payload(p);
    answers.emplace_back(std::move(done), absl::OkStatus());
    for (auto& [id, w] : round.waiters) {
      if (w.timer_id != 0) timer_->Cancel(w.timer_id);
      for (const std::string& p : round.payloads) {
        w.round_response->add_payload(p);
      }
      answers.emplace_back(std::move(w.done), absl::OkStatus());
    }
    group.rounds.erase(round_it);
  }
  Run(std::move(answers));
}

void CollectiveLeader::OnGroupDeadline(int64_t key, uint64_t waiter) {
  StatusCallback done;
  absl::Status status;
  {
    absl::MutexLock lock(&mu_);
    auto it = groups_.find(key);
    if (it == groups_.end()) return;
    Group& group = it->second;
    auto w = group.waiters.find(waiter);
    if (w == group.waiters.end()) return;
    done = std::move(w->second.done);
    group.waiters.erase(w);
    status = absl::DeadlineExceededError(absl::StrCat(
        GroupName(key), " (group_size ", group.size, ") at the leader ", task_,
        ": ", group.joined.size(), " of ", group.size,
        " members joined by the deadline (",
        absl::StrJoin(group.Members(), ", "), "), ",
        group.size - static_cast<int>(group.joined.size()),
        " missing: check that every task of the group runs its graph with "
        "this group's collective ops and names the same "
        "collective_group_leader"));
  }
  done(status);
}

void CollectiveLeader::OnRoundDeadline(int64_t key, int64_t r,
                                       uint64_t waiter) {
  StatusCallback done;
  absl::Status status;
  {
    absl::MutexLock lock(&mu_);
    auto it = groups_.find(key);
    if (it == groups_.end()) return;
    auto round = it->second.rounds.find(r);
    if (round == it->second.rounds.end()) return;
    auto w = round->second.waiters.find(waiter);
    if (w == round->second.waiters.end()) return;
    done = std::move(w->second.done);
    round->second.waiters.erase(w);
    std::vector<std::string> missing;
    const std::vector<std::string> members = it->second.Members();
    for (size_t q = 0; q < members.size(); ++q) {
      if (!round->second.sent[q]) missing.push_back(members[q]);
    }
    status = absl::DeadlineExceededError(absl::StrCat(
        GroupName(key), ": set-up round ", r, " at the leader ", task_,
        " still waits for ", absl::StrJoin(missing, ", "),
        ": check that it is running and reaches the same collective op"));
  }
  done(status);
}

void CollectiveLeader::Stop(const absl::Status& status) {
  Answers answers;
  {
    absl::MutexLock lock(&mu_);
    if (!stopped_.ok()) return;
    stopped_ = status.ok()
                   ? absl::UnavailableError(absl::StrCat(
                         "collective group leader ", task_, " is stopping"))
                   : status;
    for (auto& [key, group] : groups_) {
      for (auto& [id, w] : group.waiters) {
        if (w.timer_id != 0) timer_->Cancel(w.timer_id);
        answers.emplace_back(std::move(w.done), stopped_);
      }
      for (auto& [r, round] : group.rounds) {
        for (auto& [id, w] : round.waiters) {
          if (w.timer_id != 0) timer_->Cancel(w.timer_id);
          answers.emplace_back(std::move(w.done), stopped_);
        }
      }
    }
    groups_.clear();
  }
  Run(std::move(answers));
}

}  // namespace cohort::runtime
