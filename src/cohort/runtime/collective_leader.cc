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

CollectiveLeader::CollectiveLeader(std::string task, Env* env,
                                   TaskList cluster_tasks)
    : task_(std::move(task)),
      env_(env),
      cluster_tasks_(std::move(cluster_tasks)),
      timer_(env) {}

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
  return timer_.Schedule(std::min(deadline, env_->Now() + kMaxWait),
                         std::move(fn));
}

void CollectiveLeader::Answer(Waiter& w, absl::Status status,
                              Answers* answers) {
  timer_.Cancel(w.timer_id);
  answers->emplace_back(std::move(w.done), std::move(status));
}

template <typename K>
CollectiveLeader::Waiter& CollectiveLeader::NewWaiter(
    std::map<K, Waiter>& waiters, const K& k, absl::Status replaced,
    Answers* answers) {
  auto previous = waiters.find(k);
  if (previous != waiters.end()) {
    Answer(previous->second, std::move(replaced), answers);
    waiters.erase(previous);
  }
  Waiter& w = waiters[k];
  w.id = next_waiter_++;
  return w;
}

void CollectiveLeader::Run(Answers answers) {
  for (auto& [done, status] : answers) done(status);
}

absl::StatusOr<CollectiveLeader::MemberKey> CollectiveLeader::CheckTask(
    int64_t key, const std::string& task,
    const std::vector<std::string>& cluster) const {
  if (task.size() > kMaxTaskNameBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        GroupName(key), ": a task name of ", task.size(),
        " bytes asked; task names have at most ", kMaxTaskNameBytes));
  }
  absl::StatusOr<DeviceName> name = DeviceName::Parse(task);
  if (!name.ok() || !name->has_job || !name->has_replica || !name->has_task ||
      name->has_type || name->TaskName() != task) {
    return absl::InvalidArgumentError(absl::StrCat(
        GroupName(key), ": the asking task '", task,
        "' is not a task name in canonical form (/job:J/replica:R/task:T)"));
  }
  if (!cluster.empty() &&
      std::find(cluster.begin(), cluster.end(), task) == cluster.end()) {
    return absl::InvalidArgumentError(absl::StrCat(
        GroupName(key), ": ", task, " is not a task of the cluster the leader ",
        task_, " serves; check the session's cluster"));
  }
  return MemberKey{name->job, name->task};
}

void CollectiveLeader::CompleteGroup(absl::Time deadline,
                                     const CompleteGroupRequest& request,
                                     CompleteGroupResponse* response,
                                     StatusCallback done) {
  const int64_t key = request.group_key();
  const std::vector<std::string> cluster =
      cluster_tasks_ ? cluster_tasks_() : std::vector<std::string>();
  const int limit = cluster.empty()
                        ? kMaxGroupSize
                        : std::min<int>(kMaxGroupSize, cluster.size());
  if (request.group_size() < 1 || request.group_size() > limit) {
    return done(absl::InvalidArgumentError(absl::StrCat(
        GroupName(key), ": ", request.task().substr(0, kMaxTaskNameBytes),
        " asked for group_size ", request.group_size(), "; a group has 1 to ",
        limit, " members (the cluster's tasks, at most ", kMaxGroupSize, ")")));
  }
  absl::StatusOr<MemberKey> member = CheckTask(key, request.task(), cluster);
  if (!member.ok()) return done(member.status());
  Answers answers;
  {
    absl::MutexLock lock(&mu_);
    JoinLocked(deadline, request, *member, response, std::move(done), &answers);
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
  auto refuse = [&](absl::Status status) {
    answers->emplace_back(std::move(done), std::move(status));
  };
  if (!stopped_.ok()) return refuse(stopped_);
  auto it = groups_.find(key);
  if (it == groups_.end()) {
    if (static_cast<int>(groups_.size()) >= kMaxGroups) {
      return refuse(absl::ResourceExhaustedError(absl::StrCat(
          GroupName(key), ": the leader ", task_, " already holds ", kMaxGroups,
          " groups; use fewer group keys")));
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
        for (auto& [rank, w] : round.waiters) {
          Answer(w,
                 absl::AbortedError(absl::StrCat(
                     GroupName(key), ": ", task,
                     " restarted (new incarnation) during set-up round ", r,
                     "; the group is formed anew")),
                 answers);
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
    return refuse(absl::InvalidArgumentError(absl::StrCat(
        GroupName(key), ": ", task, " asked for group_size ",
        request.group_size(), " but ",
        group.joined.empty() ? std::string("the group")
                             : group.Members().front(),
        " asked for ", group.size,
        "; every member's collective ops must have the same group_size")));
  }
  if (joined == group.joined.end()) {
    if (group.complete()) {
      return refuse(absl::InvalidArgumentError(absl::StrCat(
          GroupName(key), " (group_size ", group.size, ") already has ",
          group.size, " members (", absl::StrJoin(group.Members(), ", "), "); ",
          task,
          " would be one more: check the group_size of its collective ops")));
    }
    group.joined.emplace(member, std::make_pair(task, request.incarnation()));
  }
  if (!group.complete()) {
    Waiter& w = NewWaiter(
        group.waiters, member,
        absl::AbortedError(absl::StrCat(
            GroupName(key), ": replaced by a newer call from ", task)),
        answers);
    w.done = std::move(done);
    w.group_response = response;
    const uint64_t id = w.id;
    w.timer_id = Arm(deadline, [this, key, member, id] {
      OnGroupDeadline(key, member, id);
    });
    return;
  }
  Fill(group, key, response);
  answers->emplace_back(std::move(done), absl::OkStatus());
  for (auto& [m, w] : group.waiters) {
    Fill(group, key, w.group_response);
    Answer(w, absl::OkStatus(), answers);
  }
  group.waiters.clear();
}

void CollectiveLeader::CompleteInstance(absl::Time deadline,
                                        const CompleteInstanceRequest& request,
                                        CompleteInstanceResponse* response,
                                        StatusCallback done) {
  const int64_t key = request.group_key();
  if (request.payload().size() > kMaxPayloadBytes) {
    return done(absl::InvalidArgumentError(absl::StrCat(
        GroupName(key), ": ", request.task().substr(0, kMaxTaskNameBytes),
        " sent ", request.payload().size(), " bytes for set-up round ",
        request.round(), "; at most ", kMaxPayloadBytes)));
  }
  Answers answers;
  {
    absl::MutexLock lock(&mu_);
    SendLocked(deadline, request, response, std::move(done), &answers);
  }
  Run(std::move(answers));
}

void CollectiveLeader::SendLocked(absl::Time deadline,
                                  const CompleteInstanceRequest& request,
                                  CompleteInstanceResponse* response,
                                  StatusCallback done, Answers* answers) {
  const int64_t key = request.group_key();
  const std::string& task = request.task();
  auto refuse = [&](absl::Status status) {
    answers->emplace_back(std::move(done), std::move(status));
  };
  if (!stopped_.ok()) return refuse(stopped_);
  auto it = groups_.find(key);
  if (it == groups_.end() || !it->second.complete() ||
      it->second.generation != request.generation()) {
    return refuse(absl::FailedPreconditionError(absl::StrCat(
        GroupName(key), ": set-up round ", request.round(), " from ",
        task.substr(0, kMaxTaskNameBytes), " names generation ",
        request.generation(), ", but the leader ", task_, " has ",
        it == groups_.end()
            ? std::string("no such group")
            : absl::StrCat("generation ", it->second.generation,
                           it->second.complete() ? "" : " still forming"),
        ": a member restarted; resolve the group again")));
  }
  Group& group = it->second;
  const int rank = group.RankOf(task);
  if (rank < 0) {
    return refuse(absl::FailedPreconditionError(absl::StrCat(
        GroupName(key), ": ", task.substr(0, kMaxTaskNameBytes),
        " is not a member (", absl::StrJoin(group.Members(), ", "), ")")));
  }
  auto round_it = group.rounds.find(request.round());
  if (round_it == group.rounds.end()) {
    if (static_cast<int>(group.rounds.size()) >= kMaxOpenRounds) {
      return refuse(absl::ResourceExhaustedError(
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
    Waiter& w =
        NewWaiter(round.waiters, rank,
                  absl::AbortedError(absl::StrCat(
                      GroupName(key), ": set-up round ", request.round(),
                      ": replaced by a newer call from ", task)),
                  answers);
    w.done = std::move(done);
    w.round_response = response;
    const uint64_t id = w.id;
    const int64_t r = request.round();
    w.timer_id = Arm(deadline, [this, key, r, rank, id] {
      OnRoundDeadline(key, r, rank, id);
    });
    return;
  }
  for (const std::string& p : round.payloads) response->add_payload(p);
  answers->emplace_back(std::move(done), absl::OkStatus());
  for (auto& [q, w] : round.waiters) {
    for (const std::string& p : round.payloads) {
      w.round_response->add_payload(p);
    }
    Answer(w, absl::OkStatus(), answers);
  }
  group.rounds.erase(round_it);
}

void CollectiveLeader::OnGroupDeadline(int64_t key, MemberKey member,
                                       uint64_t id) {
  StatusCallback done;
  absl::Status status;
  {
    absl::MutexLock lock(&mu_);
    auto it = groups_.find(key);
    if (it == groups_.end()) return;
    Group& group = it->second;
    auto w = group.waiters.find(member);
    if (w == group.waiters.end() || w->second.id != id) return;
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
    // It no longer waits: it is not counted until it asks again, and a
    // group nobody waits for is forgotten (its key and size with it).
    group.joined.erase(member);
    if (group.joined.empty()) groups_.erase(it);
  }
  done(status);
}

void CollectiveLeader::OnRoundDeadline(int64_t key, int64_t r, int rank,
                                       uint64_t id) {
  Answers answers;
  {
    absl::MutexLock lock(&mu_);
    auto it = groups_.find(key);
    if (it == groups_.end()) return;
    auto round = it->second.rounds.find(r);
    if (round == it->second.rounds.end()) return;
    auto w = round->second.waiters.find(rank);
    if (w == round->second.waiters.end() || w->second.id != id) return;
    std::vector<std::string> missing;
    const std::vector<std::string> members = it->second.Members();
    for (size_t q = 0; q < members.size(); ++q) {
      if (!round->second.sent[q]) missing.push_back(members[q]);
    }
    const std::string who = absl::StrJoin(missing, ", ");
    answers.emplace_back(
        std::move(w->second.done),
        absl::DeadlineExceededError(absl::StrCat(
            GroupName(key), ": set-up round ", r, " at the leader ", task_,
            " still waits for ", who,
            ": check that it is running and reaches the same collective op")));
    round->second.waiters.erase(w);
    // The round is abandoned: a later attempt must not complete against the
    // payloads of this one (an endpoint that is closed by then).
    for (auto& [q, other] : round->second.waiters) {
      Answer(other,
             absl::AbortedError(absl::StrCat(
                 GroupName(key), ": set-up round ", r, " abandoned: ", who,
                 " did not send by ", members[rank],
                 "'s deadline; the set-up starts over at the next step")),
             &answers);
    }
    it->second.rounds.erase(round);
  }
  Run(std::move(answers));
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
      for (auto& [member, w] : group.waiters) Answer(w, stopped_, &answers);
      for (auto& [r, round] : group.rounds) {
        for (auto& [rank, w] : round.waiters) Answer(w, stopped_, &answers);
      }
    }
    groups_.clear();
  }
  Run(std::move(answers));
}

}  // namespace cohort::runtime
