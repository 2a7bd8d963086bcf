#include "cohort/launch/task_failure_watch.h"

#include <set>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace cohort::launch {

TaskFailureWatch::TaskFailureWatch(coord::CoordinationService* service,
                                   std::vector<TaskSpec> tasks,
                                   std::vector<std::string> hosts, int attempt,
                                   AttemptEvents* events)
    : service_(service),
      tasks_(std::move(tasks)),
      hosts_(std::move(hosts)),
      attempt_(attempt),
      events_(events) {
  listener_ = service_->AddTaskStateListener(
      [this](const coord::TaskStateSnapshot& state) { Report(state); });
  // Transitions before the listener are not replayed: read them once. A
  // task reported twice is one failure (the attempt's ledger keeps the
  // first).
  absl::StatusOr<std::vector<coord::TaskStateSnapshot>> now =
      service_->GetTaskState({});
  if (now.ok()) {
    for (const coord::TaskStateSnapshot& state : *now) Report(state);
  }
}

TaskFailureWatch::~TaskFailureWatch() {
  service_->RemoveTaskStateListener(listener_);
}

void TaskFailureWatch::Report(const coord::TaskStateSnapshot& state) {
  if (state.state != coord::TaskState::kError) return;
  for (int k = 0; k < static_cast<int>(tasks_.size()); ++k) {
    const TaskSpec& t = tasks_[k];
    if (t.job != state.task.job || t.index != state.task.index) continue;
    FailureRecord r;
    r.task = t.Name();
    r.job_task = k;
    r.where = k < static_cast<int>(hosts_.size()) ? "on " + hosts_[k]
                                                  : "on this machine";
    r.reason = absl::StrCat("was failed by the coordination service: ",
                            state.error.message());
    r.when = state.error_time;
    events_->TaskFailed(attempt_, std::move(r));
    return;
  }
}

std::string EtcdLostLauncherKey(int k) {
  return absl::StrCat(kEtcdLostLaunchersDir, k);
}

EtcdLauncherLossWatch::EtcdLauncherLossWatch(
    std::shared_ptr<coord::EtcdClient> etcd, int me,
    std::vector<TaskSpec> tasks, std::vector<std::string> hosts, int attempt,
    absl::Duration lost_after, std::function<bool(int k)> finished, Env* env,
    AttemptEvents* events)
    : etcd_(std::move(etcd)),
      me_(me),
      tasks_(std::move(tasks)),
      hosts_(std::move(hosts)),
      attempt_(attempt),
      lost_after_(lost_after),
      finished_(std::move(finished)),
      env_(env),
      events_(events),
      losses_(etcd_, "launchers/") {
  std::vector<std::string> launchers;
  for (int k = 0; k < static_cast<int>(tasks_.size()); ++k) {
    launchers.push_back(absl::StrCat("launcher:", k));
  }
  losses_.AssumeRegistered(launchers);
  thread_ = std::thread([this] { Run(); });
}

EtcdLauncherLossWatch::~EtcdLauncherLossWatch() {
  stop_.Notify();
  cancel_.Cancel();
  thread_.join();
}

int EtcdLauncherLossWatch::LauncherIndex(absl::string_view name) const {
  int k = -1;
  if (!absl::ConsumePrefix(&name, "launcher:") || !absl::SimpleAtoi(name, &k) ||
      k < 0 || k >= static_cast<int>(tasks_.size()) || k == me_) {
    return -1;
  }
  return k;
}

void EtcdLauncherLossWatch::Run() {
  std::set<int> reported;
  while (!stop_.HasBeenNotified()) {
    absl::StatusOr<coord::EtcdTaskLosses::Look> look = losses_.Read();
    if (!look.ok()) {
      // etcd out of reach: this launcher's own agent finds that (its
      // heartbeats fail); look again.
      stop_.WaitForNotificationWithTimeout(absl::Seconds(1));
      continue;
    }
    // A launcher recorded lost that registered again was replaced
    // (ClusterLauncher's rejoin): its task is that launcher's again.
    for (const std::string& name : look->present) {
      const int k = LauncherIndex(name);
      if (k >= 0 && reported.erase(k) > 0) events_->TaskAdopted(attempt_, k);
    }
    bool retry = false;
    for (const std::string& name : look->lost) {
      const int k = LauncherIndex(name);
      if (k < 0 || reported.count(k)) continue;
      const std::string host =
          k < static_cast<int>(hosts_.size()) ? hosts_[k] : "its host";
      // Recorded before it is reported: the end barrier leaves out only
      // launchers recorded lost. Not recorded (etcd out of reach): the next
      // look tries again.
      if (!etcd_->Put(EtcdLostLauncherKey(k), host).ok()) {
        retry = true;
        continue;
      }
      reported.insert(k);
      if (finished_ && finished_(k)) continue;  // its task had exited 0
      FailureRecord r;
      r.task = tasks_[k].Name();
      r.job_task = k;
      r.where = absl::StrCat("on ", host);
      r.reason = absl::StrCat("was lost with its launcher: launcher:", k,
                              "'s lease in etcd expired (no heartbeat for ",
                              absl::FormatDuration(lost_after_),
                              ") or its key was deleted; check that host and "
                              "its launcher process");
      r.when = env_->Now();
      events_->TaskOrphaned(attempt_, std::move(r));
    }
    if (retry) {
      stop_.WaitForNotificationWithTimeout(absl::Seconds(1));
      continue;
    }
    absl::Status changed =
        losses_.AwaitChange(look->revision, absl::Seconds(30), &cancel_);
    if (absl::IsCancelled(changed)) return;
    if (!changed.ok() && !absl::IsDeadlineExceeded(changed) &&
        !absl::IsFailedPrecondition(changed)) {
      stop_.WaitForNotificationWithTimeout(absl::Seconds(1));
    }
  }
}

}  // namespace cohort::launch
