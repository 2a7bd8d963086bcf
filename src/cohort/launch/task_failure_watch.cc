#include "cohort/launch/task_failure_watch.h"

#include <utility>

#include "absl/strings/str_cat.h"

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

}  // namespace cohort::launch
