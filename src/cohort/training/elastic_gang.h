// ElasticGang: the collective group of one task of an elastic data-parallel
// job (`cohort launch --elastic MIN:MAX`), which survives the loss and the
// return of members.
//
//   COHORT_ASSIGN_OR_RETURN(auto gang, ElasticGang::Join(options, agent));
//   for (;;) {
//     absl::Status s = gang->AllReduceMean(grads, n);
//     if (!s.ok()) { COHORT_RETURN_IF_ERROR(gang->Reform(s)); resync; continue;
//     } apply the update                                  // the commit point
//     COHORT_ASSIGN_OR_RETURN(bool change, gang->ChangeAgreed());
//     if (change) { COHORT_RETURN_IF_ERROR(gang->Reform(absl::OkStatus()));
//     resync; }
//   }
//
// Membership is a series of generations in the coordination service
// (coord/elastic_membership.h); each generation gets its own collective
// group ("elastic-<G>", collective_group.h), formed through the key-value
// store. The launcher writes generation 0 and removes a lost task at once; a
// restarted task adds itself when it is ready (Join). A lost member shows
// up as an error of the collective in flight (its socket closes, or the
// shared-memory group sees its process gone): every survivor then drops
// the step and Reform()s into the next generation. A member alive but
// silent (hung, or on a host cut off, whose connections never break) is
// removed by the launchers once the coordination service misses its
// heartbeats; a thread of each gang watches for the next generation every
// poll_interval and, when that removes a member of the group, cancels the
// group, so the collective blocked on the silent member ends at once. A
// task that joins is picked up at a step boundary: ChangeAgreed()
// all-reduces a flag "I have seen a newer generation" (the watch's), so
// every member gets the same answer at the same step and they move
// together. After every Reform() the caller makes
// the members' state identical (RunDataParallelTraining broadcasts it from
// the member with the most committed steps).
//
// A replacement that comes back after the others trained to the end (its
// job is marked finished) trains no more: Join() returns a gang whose
// job_finished() is true.
//
// Errors: Join/Reform: FailedPrecondition when this task is not a member of
// the generation it must join, or when fewer than MIN members remain and no
// replacement joined within `wait` (naming the members and the missing
// tasks); DeadlineExceeded naming the generation when the next one did not
// appear within `wait` after a collective failed; the collective group's
// errors. Collectives: as collective_group.h.
//
// Thread safety: thread-compatible (the watch thread is internal).
#ifndef COHORT_TRAINING_ELASTIC_GANG_H_
#define COHORT_TRAINING_ELASTIC_GANG_H_

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "cohort/collective/collective_group.h"
#include "cohort/coord/coordination_agent.h"
#include "cohort/coord/elastic_membership.h"

namespace cohort::training {

struct ElasticGangOptions {
  std::string task;  // "worker:1", as in the membership
  coord::ElasticRange range;
  // For the next generation to appear after a failure. Below MIN a member
  // waits 2 * wait + 10 s for a replacement: the launcher fails the job
  // after `wait` (naming the missing tasks), so its verdict comes first.
  absl::Duration wait = absl::Seconds(60);
  // Deadline of each collective.
  absl::Duration timeout = absl::Minutes(5);
  // A restarted task adds itself to the membership; a first one joins
  // generation 0.
  bool restarted = false;
  // Below MIN, how long a member waits for a replacement; zero: 2 * wait +
  // 10 s (see `wait`).
  absl::Duration replacement_wait = absl::ZeroDuration();
  // How often the gang's watch looks for a newer generation (at least
  // every 5 ms).
  absl::Duration poll_interval = absl::Milliseconds(50);
  // name, rank, size and setup_timeout are set per generation.
  collective::GroupOptions group;
  Env* env = nullptr;  // nullptr: Env::Default()
};

class ElasticGang {
 public:
  // `agent` need not be connected (the key-value store needs no
  // registration); it must outlive the gang.
  static absl::StatusOr<std::unique_ptr<ElasticGang>> Join(
      ElasticGangOptions options, coord::CoordinationAgent* agent);
  ~ElasticGang();
  ElasticGang(const ElasticGang&) = delete;
  ElasticGang& operator=(const ElasticGang&) = delete;

  // In place, MEAN; the same bits on every member.
  absl::Status AllReduceMean(float* data, size_t count);
  // Member q's `mine` at [q]; every string must have `mine`'s size.
  absl::StatusOr<std::vector<std::string>> AllGather(const std::string& mine);
  // `root`'s bytes into every member's `data`.
  absl::Status Broadcast(void* data, size_t bytes, int root);
  // At a step boundary, on every member: whether they all move to the next
  // generation now (some member saw it). Costs one one-float all-reduce.
  absl::StatusOr<bool> ChangeAgreed();
  // Records that the job trained to its end (the member of rank 0 calls
  // it): a replacement that joins or waits to join after that learns it
  // and trains no more (job_finished()).
  absl::Status MarkFinished();
  // The job had finished when this task joined or waited to form a group:
  // there is no group.
  bool job_finished() const { return job_finished_; }

  // Leaves the current group and forms the next generation's: after
  // `cause`, a failed collective (waiting for the launcher to write the
  // next generation), or after ChangeAgreed() (OK).
  absl::Status Reform(const absl::Status& cause);

  const coord::Membership& membership() const { return membership_; }
  int rank() const { return rank_; }
  int size() const { return static_cast<int>(membership_.members.size()); }
  const char* transport() const { return group_->transport(); }
  bool restarted() const { return options_.restarted; }

 private:
  ElasticGang(ElasticGangOptions options, coord::CoordinationAgent* agent);
  // Forms generation `generation` or, when it cannot be formed (a member
  // of it was lost meanwhile), the next one that can, by `deadline`.
  absl::Status Form(int64_t generation, absl::Time deadline,
                    const absl::Status& cause);
  // Blocks until generation `generation` exists, by `deadline`.
  absl::StatusOr<coord::Membership> AwaitGeneration(int64_t generation,
                                                    absl::Time deadline,
                                                    const absl::Status& cause);
  absl::Time Deadline() const { return env_->Now() + options_.timeout; }
  // The group's exchange through the key-value store, which also gives up
  // (Cancelled) once the job is marked finished.
  collective::Exchange MembersExchange(int64_t generation, int rank, int size);
  // The watch thread: see the class comment.
  void WatchLoop();
  // What the watch looks after: the group just formed, or none.
  void Watch(std::shared_ptr<collective::CollectiveGroup> group,
             const coord::Membership& membership);

  const ElasticGangOptions options_;
  Env* const env_;
  coord::CoordinationAgent* const agent_;
  coord::ElasticStore store_;
  coord::Membership membership_;
  coord::Membership first_;  // generation 0: every task of the job
  int rank_ = -1;
  std::shared_ptr<collective::CollectiveGroup> group_;
  bool job_finished_ = false;
  // The newest generation the watch read (-1: none yet).
  std::atomic<int64_t> newest_seen_{-1};

  absl::Mutex watch_mu_;
  std::shared_ptr<collective::CollectiveGroup> watched_
      ABSL_GUARDED_BY(watch_mu_);
  coord::Membership watched_membership_ ABSL_GUARDED_BY(watch_mu_);
  bool stop_watch_ ABSL_GUARDED_BY(watch_mu_) = false;
  std::thread watch_;
};

}  // namespace cohort::training

#endif  // COHORT_TRAINING_ELASTIC_GANG_H_
