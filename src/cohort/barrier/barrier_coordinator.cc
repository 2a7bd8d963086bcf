#include "cohort/barrier/barrier_coordinator.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cohort/base/logging.h"

namespace cohort::barrier {
namespace {

// "1" for whole seconds (Spark's wording), "0.25" otherwise.
std::string FormatSeconds(absl::Duration d) {
  const double seconds = absl::ToDoubleSeconds(d);
  if (d == absl::Seconds(absl::ToInt64Seconds(d))) {
    return absl::StrCat(absl::ToInt64Seconds(d));
  }
  return absl::StrCat(seconds);
}

std::string GangName(int64_t stage_id, int stage_attempt) {
  return absl::StrCat("Stage ", stage_id, " (Attempt ", stage_attempt, ")");
}

}  // namespace

const char* SyncMethodName(SyncMethod method) {
  switch (method) {
    case SyncMethod::kBarrier:
      return "BARRIER";
    case SyncMethod::kAllGather:
      return "ALL_GATHER";
  }
  return "UNKNOWN";
}

BarrierCoordinator::BarrierCoordinator(Env* env, absl::Duration sync_timeout,
                                       size_t max_sync_bytes)
    : env_(env), sync_timeout_(sync_timeout), max_sync_bytes_(max_sync_bytes) {
  COHORT_CHECK(sync_timeout > absl::ZeroDuration())
      << "barrier sync timeout must be positive";
  timer_ = std::make_unique<DeadlineTimer>(env);
}

BarrierCoordinator::~BarrierCoordinator() {
  std::vector<Reply> replies;
  {
    absl::MutexLock lock(&mu_);
    // From here no sync starts a timer, and a timeout that fires finds
    // nothing to do.
    shutting_down_ = true;
    for (auto& [key, gang] : gangs_) {
      for (Pending& p : gang.requesters) {
        replies.emplace_back(
            std::move(p.done),
            absl::UnavailableError(absl::StrCat(
                "barrier coordinator is shutting down; partition ",
                p.partition_id, " of ", GangName(key.first, key.second),
                " was waiting for barrier epoch ", gang.epoch)));
      }
      gang.requesters.clear();
    }
    pending_.clear();
  }
  for (auto& [done, result] : replies) done(std::move(result));
  // Joins the timer's thread: no timeout callback runs once this returns.
  timer_.reset();
}

absl::Status BarrierCoordinator::OpenGang(int64_t stage_id, int stage_attempt,
                                          int num_tasks) {
  if (num_tasks <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot open ", GangName(stage_id, stage_attempt),
                     " with ", num_tasks, " task(s): need at least one"));
  }
  absl::MutexLock lock(&mu_);
  auto [it, inserted] = gangs_.try_emplace({stage_id, stage_attempt});
  if (!inserted) {
    return absl::AlreadyExistsError(
        absl::StrCat(GangName(stage_id, stage_attempt), " is already open"));
  }
  it->second.num_tasks = num_tasks;
  it->second.messages.assign(num_tasks, std::string());
  return absl::OkStatus();
}

void BarrierCoordinator::CloseGang(int64_t stage_id, int stage_attempt,
                                   const std::string& reason) {
  std::vector<Reply> replies;
  {
    absl::MutexLock lock(&mu_);
    auto it = gangs_.find({stage_id, stage_attempt});
    if (it == gangs_.end()) return;
    FailGangLocked(
        it->second,
        absl::AbortedError(absl::StrCat(GangName(stage_id, stage_attempt),
                                        " was closed: ", reason)),
        replies);
    CancelTimerLocked(it->second);
    gangs_.erase(it);
  }
  for (auto& [d, result] : replies) d(std::move(result));
}

uint64_t BarrierCoordinator::NewRequestId() {
  absl::MutexLock lock(&mu_);
  return next_request_id_++;
}

void BarrierCoordinator::ArmTimerLocked(const GangKey& key, Gang& gang) {
  if (gang.timer != 0 && gang.timer_due <= gang.deadline) return;
  // No entry, or one due too late (the clock went back): replace it. The
  // timer wakes its thread only when this is its earliest entry.
  if (gang.timer != 0) timer_->Cancel(gang.timer);
  const uint64_t generation = ++timer_generations_;
  gang.timer_generation = generation;
  gang.timer_due = gang.deadline;
  gang.timer = timer_->Schedule(gang.deadline, [this, key, generation] {
    SyncTimedOut(key, generation);
  });
}

void BarrierCoordinator::CancelTimerLocked(Gang& gang) {
  if (gang.timer != 0) timer_->Cancel(gang.timer);
  gang.timer = 0;
  gang.timer_generation = 0;
}

void BarrierCoordinator::FailGangLocked(Gang& gang, const absl::Status& status,
                                        std::vector<Reply>& replies) {
  for (Pending& p : gang.requesters) {
    pending_.erase(p.request_id);
    replies.emplace_back(std::move(p.done), status);
  }
  gang.requesters.clear();
  gang.methods.clear();
  std::fill(gang.messages.begin(), gang.messages.end(), std::string());
  gang.message_bytes = 0;
  gang.deadline = absl::InfiniteFuture();  // its timer entry finds it idle
  gang.epoch = -1;
  gang.failure = status;
}

absl::Status BarrierCoordinator::CheckRequestLocked(
    const Gang& gang, const SyncRequest& request,
    const std::string& gang_name) const {
  if (!gang.failure.ok()) {
    return absl::AbortedError(absl::StrCat(
        "barrier sync of ", gang_name, " from partition ", request.partition_id,
        " (task ", request.task_attempt_id,
        ") refused: the barrier state was cleared by an earlier failure: ",
        gang.failure.message()));
  }
  if (request.num_tasks != gang.num_tasks) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Number of tasks of ", gang_name, " is ", gang.num_tasks, " from Task ",
        request.task_attempt_id, " (partition ", request.partition_id,
        "), but now is ", request.num_tasks,
        "; every task of a gang must report the same number of tasks"));
  }
  if (request.partition_id < 0 || request.partition_id >= gang.num_tasks) {
    return absl::InvalidArgumentError(absl::StrCat(
        "barrier sync of ", gang_name, ": partition id ", request.partition_id,
        " is out of range for ", gang.num_tasks,
        " task(s); check COHORT_PARTITION_ID and COHORT_NUM_TASKS"));
  }
  if (request.barrier_epoch != gang.epoch) {
    return absl::FailedPreconditionError(absl::StrCat(
        "The request to sync of ", gang_name, " with barrier epoch ",
        request.barrier_epoch, " has already finished. Maybe task ",
        request.task_attempt_id, " is not properly killed. (partition ",
        request.partition_id, "; the current epoch is ", gang.epoch, ")"));
  }
  if (std::any_of(gang.requesters.begin(), gang.requesters.end(),
                  [&](const Pending& p) {
                    return p.partition_id == request.partition_id;
                  })) {
    return absl::FailedPreconditionError(absl::StrCat(
        "partition ", request.partition_id, " of ", gang_name,
        " is already waiting for barrier epoch ", gang.epoch, " (task ",
        request.task_attempt_id,
        " sent a second request); a task may run one sync at a time and "
        "each partition id must belong to one task"));
  }
  // Checked against what this side allows, not what the peer announces:
  // the answer to every requester carries all messages of the sync.
  if (request.message.size() > max_sync_bytes_ - gang.message_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "allGather() message of partition ", request.partition_id, " of ",
        gang_name, " is ", request.message.size(), " bytes; with the ",
        gang.message_bytes, " bytes already gathered for barrier epoch ",
        gang.epoch, " the sync would exceed its cap of ", max_sync_bytes_,
        " bytes; send large data another way (files, a collective)"));
  }
  return absl::OkStatus();
}

void BarrierCoordinator::CompleteSyncLocked(Gang& gang,
                                            std::vector<Reply>& replies) {
  // Everyone is here: hand each requester its own copy of the messages
  // (SPARK-40932), then start the next epoch.
  for (Pending& p : gang.requesters) {
    pending_.erase(p.request_id);
    replies.emplace_back(std::move(p.done), SyncResult(gang.messages));
  }
  gang.requesters.clear();
  gang.methods.clear();
  std::fill(gang.messages.begin(), gang.messages.end(), std::string());
  gang.message_bytes = 0;
  gang.deadline = absl::InfiniteFuture();  // its timer entry finds it idle
  ++gang.epoch;
}

void BarrierCoordinator::Sync(uint64_t request_id, SyncRequest request,
                              SyncDone done) {
  std::vector<Reply> replies;
  {
    absl::MutexLock lock(&mu_);
    const std::string gang_name =
        GangName(request.stage_id, request.stage_attempt);
    const GangKey key{request.stage_id, request.stage_attempt};
    auto it = gangs_.find(key);
    absl::Status refused;
    if (shutting_down_) {
      refused = absl::UnavailableError(
          absl::StrCat("barrier coordinator is shutting down; ", gang_name,
                       " partition ", request.partition_id, " cannot sync"));
    } else if (it == gangs_.end()) {
      refused = absl::NotFoundError(absl::StrCat(
          "barrier sync from partition ", request.partition_id, ": ", gang_name,
          " is not running on this coordinator (finished, or never "
          "started); check COHORT_STAGE_ID and COHORT_ATTEMPT_NUMBER, or "
          "whether this task belongs to an attempt that was stopped"));
    } else {
      refused = CheckRequestLocked(it->second, request, gang_name);
    }
    if (!refused.ok()) {
      replies.emplace_back(std::move(done), std::move(refused));
    } else {
      Gang& gang = it->second;
      gang.methods.insert(request.method);
      if (gang.methods.size() > 1) {
        std::vector<std::string> names;
        for (SyncMethod m : gang.methods) names.push_back(SyncMethodName(m));
        const absl::Status status = absl::InvalidArgumentError(absl::StrCat(
            "Different barrier sync types found for the sync ", gang_name,
            " barrier epoch ", gang.epoch, ": ", absl::StrJoin(names, ", "),
            ". Please use the same barrier sync type within a single sync "
            "(partition ",
            request.partition_id, " called ", SyncMethodName(request.method),
            ")."));
        FailGangLocked(gang, status, replies);
        replies.emplace_back(std::move(done), status);
      } else {
        if (gang.requesters.empty()) {
          // The sync's timeout, measured from its first request.
          gang.deadline = env_->Now() + sync_timeout_;
          ArmTimerLocked(key, gang);
        }
        gang.message_bytes += request.message.size();
        gang.messages[request.partition_id] = std::move(request.message);
        gang.requesters.push_back(Pending{request_id, request.partition_id,
                                          request.task_attempt_id,
                                          std::move(done)});
        pending_[request_id] = key;
        if (static_cast<int>(gang.requesters.size()) == gang.num_tasks) {
          CompleteSyncLocked(gang, replies);
        }
      }
    }
  }
  for (auto& [d, result] : replies) d(std::move(result));
}

void BarrierCoordinator::Cancel(uint64_t request_id) {
  SyncDone done;
  int partition = -1;
  GangKey key;
  int64_t epoch = 0;
  {
    absl::MutexLock lock(&mu_);
    auto pit = pending_.find(request_id);
    if (pit == pending_.end()) return;
    key = pit->second;
    pending_.erase(pit);
    auto git = gangs_.find(key);
    if (git == gangs_.end()) return;
    Gang& gang = git->second;
    auto it = std::find_if(
        gang.requesters.begin(), gang.requesters.end(),
        [&](const Pending& p) { return p.request_id == request_id; });
    if (it == gang.requesters.end()) return;
    done = std::move(it->done);
    partition = it->partition_id;
    epoch = gang.epoch;
    gang.message_bytes -= gang.messages[partition].size();
    gang.messages[partition].clear();
    gang.requesters.erase(it);
    // The sync's timer keeps running: it measures the sync, not a requester.
  }
  done(absl::CancelledError(absl::StrCat(
      "barrier sync of ", GangName(key.first, key.second), " partition ",
      partition, " at barrier epoch ", epoch,
      " was cancelled by the task (RPC cancelled or task killed)")));
}

void BarrierCoordinator::ClearStage(int64_t stage_id, int stage_attempt,
                                    const std::string& reason) {
  std::vector<Reply> replies;
  {
    absl::MutexLock lock(&mu_);
    auto it = gangs_.find({stage_id, stage_attempt});
    if (it == gangs_.end() || !it->second.failure.ok()) return;
    Gang& gang = it->second;
    FailGangLocked(
        gang,
        absl::AbortedError(absl::StrCat(GangName(stage_id, stage_attempt),
                                        " was stopped: ", reason)),
        replies);
  }
  for (auto& [d, result] : replies) d(std::move(result));
}

std::optional<GangSnapshot> BarrierCoordinator::Snapshot(int64_t stage_id,
                                                         int stage_attempt) {
  absl::MutexLock lock(&mu_);
  auto it = gangs_.find({stage_id, stage_attempt});
  if (it == gangs_.end()) return std::nullopt;
  GangSnapshot s;
  s.num_tasks = it->second.num_tasks;
  s.epoch = it->second.epoch;
  for (const Pending& p : it->second.requesters)
    s.waiting.push_back(p.partition_id);
  std::sort(s.waiting.begin(), s.waiting.end());
  s.failure = it->second.failure;
  return s;
}

void BarrierCoordinator::SyncTimedOut(GangKey key, uint64_t generation) {
  std::vector<Reply> replies;
  {
    absl::MutexLock lock(&mu_);
    if (shutting_down_) return;
    auto it = gangs_.find(key);
    // The gang closed, or the entry was replaced (one may be taken to run
    // just as it is cancelled).
    if (it == gangs_.end() || it->second.timer_generation != generation) {
      return;
    }
    Gang& gang = it->second;
    gang.timer = 0;                                       // this entry has run
    if (gang.deadline == absl::InfiniteFuture()) return;  // no sync running
    if (gang.deadline > env_->Now()) {
      // The sync this entry was armed for ended; a later one runs.
      ArmTimerLocked(key, gang);
      return;
    }
    std::vector<bool> arrived(gang.num_tasks, false);
    for (const Pending& p : gang.requesters) arrived[p.partition_id] = true;
    std::vector<int> missing;
    for (int i = 0; i < gang.num_tasks; ++i) {
      if (!arrived[i]) missing.push_back(i);
    }
    const absl::Status status = absl::DeadlineExceededError(absl::StrCat(
        "The coordinator didn't get all barrier sync requests for barrier "
        "epoch ",
        gang.epoch, " from ", GangName(key.first, key.second), " within ",
        FormatSeconds(sync_timeout_),
        " second(s). Partitions that did not arrive: [",
        absl::StrJoin(missing, ", "), "] of ", gang.num_tasks,
        "; check that every task calls the same sequence of barrier()/"
        "allGather() and that none is stuck or too slow (raise "
        "--barrier-timeout)."));
    COHORT_LOG(WARNING) << status.message();
    FailGangLocked(gang, status, replies);
  }
  for (auto& [d, result] : replies) d(std::move(result));
}

}  // namespace cohort::barrier
