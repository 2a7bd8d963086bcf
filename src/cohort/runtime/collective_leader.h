// CollectiveLeader: the group leader's half of collective group resolution,
// as TensorFlow's worker service answers CompleteGroup / CompleteInstance.
// Every worker has one; only the task that sessions name in
// ConfigProto.experimental.collective_group_leader (chief 0, else worker 0:
// the distribute coordinator sets it) is ever asked. The members' half is
// collective_resolver.h.
//
//   CompleteGroup(group_key, group_size, task, incarnation)
//     waits until group_size distinct tasks asked for the key, then answers
//     every one of them the members in rank order: sorted by job name, then
//     task index ("/job:chief/.../task:0" is rank 0 of a chief + workers
//     group), and the group's generation. Asked again by a member with the
//     same incarnation, it answers at once. A member that asks with a new
//     incarnation (its task restarted) forms the group anew: the old
//     membership is dropped, the generation goes up, and the others join
//     the new one when they resolve again.
//   CompleteInstance(group_key, generation, round, task, payload)
//     one set-up exchange of a formed group: waits for every member's
//     payload for (group, generation, round), then answers all payloads by
//     rank. Rounds of an older generation are refused.
//
// Who may ask: a task of the cluster (when the leader knows it), named in the
// canonical form "/job:J/replica:R/task:T", in a group no larger than the
// cluster. One call waits per member and group (per member and round): a
// newer call from the same member replaces the older, which is answered
// Aborted. A member whose wait for a forming group ends leaves it; a set-up
// round that a member's deadline ends is abandoned (its other waiters are
// answered Aborted) so that the next attempt starts clean.
//
// Bounds (nothing a caller sends sizes memory without a cap): group_size at
// most kMaxGroupSize (and the cluster's task count), kMaxGroups groups,
// kMaxPayloadBytes per payload, kMaxOpenRounds rounds open per group, task
// names of at most kMaxTaskNameBytes, and no wait longer than kMaxWait
// (also for a caller that gives no deadline); beyond them InvalidArgument or
// ResourceExhausted naming the limit. A cancelled call is answered at its
// deadline.
//
// Errors (each names the group key, the leader and the tasks concerned):
//   - DeadlineExceeded at the caller's deadline (CompleteGroup: the tasks
//     that joined and how many are missing; CompleteInstance: the members
//     that have not sent this round);
//   - InvalidArgument: group_size differs from the first asker's, a task
//     that would make the group larger than its size, a task name that is
//     not canonical or not of the cluster, a payload too large;
//   - Aborted: replaced by a newer call of the same member, or a round
//     abandoned, or a member's restart re-forming the group;
//   - FailedPrecondition: a round for a generation that is not current, or
//     from a task that is not a member;
//   - after Stop(status): that status, also for every waiting caller.
//
// Callbacks run exactly once, never under the leader's lock, on the calling
// thread or the thread whose call completed the group or round, or the
// leader's timer thread (deadlines).
//
// Thread safety: thread-safe.
#ifndef COHORT_RUNTIME_COLLECTIVE_LEADER_H_
#define COHORT_RUNTIME_COLLECTIVE_LEADER_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "cohort/base/deadline_timer.h"
#include "cohort/base/env.h"
#include "cohort/graph/collective.h"
#include "cohort/runtime/worker_interface.h"
#include "cohort/worker.pb.h"

namespace cohort::runtime {

class CollectiveLeader {
 public:
  static constexpr int kMaxGroupSize = CollectiveGroups::kMaxGroupSize;
  static constexpr int kMaxGroups = 1024;
  static constexpr size_t kMaxPayloadBytes = 4096;
  static constexpr int kMaxOpenRounds = 16;
  static constexpr size_t kMaxTaskNameBytes = 256;
  static constexpr absl::Duration kMaxWait = absl::Minutes(11);

  // The tasks that may ask, asked at each call (the worker cache may be
  // filled after the leader is built); null or empty: any canonical name.
  using TaskList = std::function<std::vector<std::string>()>;

  // `task` is this leader's own name (in errors); `env` its clock (not
  // owned, outlives the leader).
  CollectiveLeader(std::string task, Env* env, TaskList cluster_tasks);
  // Stop()s with Unavailable if not stopped.
  ~CollectiveLeader();
  CollectiveLeader(const CollectiveLeader&) = delete;
  CollectiveLeader& operator=(const CollectiveLeader&) = delete;

  // `deadline`: the caller's (InfiniteFuture: none, then kMaxWait).
  void CompleteGroup(absl::Time deadline, const CompleteGroupRequest& request,
                     CompleteGroupResponse* response, StatusCallback done)
      ABSL_LOCKS_EXCLUDED(mu_);
  void CompleteInstance(absl::Time deadline,
                        const CompleteInstanceRequest& request,
                        CompleteInstanceResponse* response, StatusCallback done)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Answers every waiting caller with `status` and every later call too.
  void Stop(const absl::Status& status) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // A caller waiting for a group or a round, with its deadline timer.
  struct Waiter {
    StatusCallback done;
    CompleteGroupResponse* group_response = nullptr;
    CompleteInstanceResponse* round_response = nullptr;
    uint64_t timer_id = 0;
    uint64_t id = 0;  // Tells a replaced waiter's timer from its successor's.
  };
  struct Round {
    std::vector<std::string> payloads;  // By rank.
    std::vector<bool> sent;             // By rank.
    std::map<int, Waiter> waiters;      // By rank.
  };
  // Members sort by this: job name, then task index.
  using MemberKey = std::pair<std::string, int>;
  struct Group {
    int size = 0;
    int64_t generation = 0;
    std::map<MemberKey, std::pair<std::string, uint64_t>> joined;  // task, inc.
    std::map<MemberKey, Waiter> waiters;  // For the membership.
    std::map<int64_t, Round> rounds;      // Of the current generation.
    bool complete() const { return static_cast<int>(joined.size()) == size; }
    std::vector<std::string> Members() const;
    int RankOf(const std::string& task) const;
  };
  // Callbacks to run once the lock is released.
  using Answers = std::vector<std::pair<StatusCallback, absl::Status>>;

  // The asking task's key, or InvalidArgument (not canonical, too long, not
  // of the cluster).
  absl::StatusOr<MemberKey> CheckTask(
      int64_t key, const std::string& task,
      const std::vector<std::string>& cluster) const;
  // CompleteGroup under the lock: `done` is stored as a waiter or put in
  // `answers` with its outcome.
  void JoinLocked(absl::Time deadline, const CompleteGroupRequest& request,
                  const MemberKey& member, CompleteGroupResponse* response,
                  StatusCallback done, Answers* answers)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SendLocked(absl::Time deadline, const CompleteInstanceRequest& request,
                  CompleteInstanceResponse* response, StatusCallback done,
                  Answers* answers) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Fill(const Group& group, int64_t key,
            CompleteGroupResponse* response) const;
  void OnGroupDeadline(int64_t key, MemberKey member, uint64_t id)
      ABSL_LOCKS_EXCLUDED(mu_);
  void OnRoundDeadline(int64_t key, int64_t round, int rank, uint64_t id)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Schedules `fn` at the earlier of `deadline` and now + kMaxWait.
  uint64_t Arm(absl::Time deadline, std::function<void()> fn);
  // Cancels `w`'s timer and queues its answer.
  void Answer(Waiter& w, absl::Status status, Answers* answers);
  // The waiter of `k` in `waiters`, new: one wait per member, so an older
  // call of `k` (a retry's predecessor) is answered `replaced` first.
  template <typename K>
  Waiter& NewWaiter(std::map<K, Waiter>& waiters, const K& k,
                    absl::Status replaced, Answers* answers)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static void Run(Answers answers);

  const std::string task_;
  Env* const env_;
  const TaskList cluster_tasks_;
  absl::Mutex mu_;
  absl::Status stopped_ ABSL_GUARDED_BY(mu_);
  std::map<int64_t, Group> groups_ ABSL_GUARDED_BY(mu_);
  uint64_t next_waiter_ ABSL_GUARDED_BY(mu_) = 1;
  // Last: destroyed first, so its thread (and any deadline callback it is
  // running) ends while the state above still exists.
  DeadlineTimer timer_;
};

}  // namespace cohort::runtime

#endif  // COHORT_RUNTIME_COLLECTIVE_LEADER_H_
