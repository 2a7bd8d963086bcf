#include "cohort/launch/task_failure_watch.h"

#include <set>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

namespace cohort::launch {

struct TaskFailureWatch::Shared {
  coord::CoordinationService* service = nullptr;
  std::vector<TaskSpec> tasks;
  std::vector<std::string> hosts;
  int attempt = 0;
  absl::Mutex mu;
  AttemptEvents* events ABSL_GUARDED_BY(mu) = nullptr;  // nullptr: stopped
  std::set<int> reported ABSL_GUARDED_BY(mu);

  // Reports the tasks newly in ERROR and watches for the next change.
  static void OnState(const std::shared_ptr<Shared>& self,
                      absl::StatusOr<coord::JobStatus> status) {
    // A stopped service (the attempt's end) answers with an error: nothing
    // more will change.
    if (!status.ok()) return;
    {
      absl::MutexLock lock(&self->mu);
      if (self->events == nullptr) return;
      for (const coord::TaskStateSnapshot& st : status->tasks) {
        if (st.state != coord::TaskState::kError) continue;
        for (int k = 0; k < static_cast<int>(self->tasks.size()); ++k) {
          const TaskSpec& t = self->tasks[k];
          if (t.job != st.task.job || t.index != st.task.index ||
              !self->reported.insert(k).second) {
            continue;
          }
          FailureRecord r;
          r.task = t.Name();
          r.job_task = k;
          r.where = k < static_cast<int>(self->hosts.size())
                        ? "on " + self->hosts[k]
                        : "on this machine";
          r.reason = absl::StrCat("was failed by the coordination service: ",
                                  st.error.message());
          r.when = st.error_time;
          self->events->TaskFailed(self->attempt, std::move(r));
        }
      }
    }
    Arm(self, status->version);
  }

  static void Arm(const std::shared_ptr<Shared>& self, int64_t after_version) {
    self->service->WatchJobStateAsync(
        after_version, absl::InfiniteFuture(),
        [self](absl::StatusOr<coord::JobStatus> status) {
          OnState(self, std::move(status));
        });
  }
};

TaskFailureWatch::TaskFailureWatch(coord::CoordinationService* service,
                                   std::vector<TaskSpec> tasks,
                                   std::vector<std::string> hosts, int attempt,
                                   AttemptEvents* events)
    : shared_(std::make_shared<Shared>()) {
  shared_->service = service;
  shared_->tasks = std::move(tasks);
  shared_->hosts = std::move(hosts);
  shared_->attempt = attempt;
  {
    absl::MutexLock lock(&shared_->mu);
    shared_->events = events;
  }
  // -1: answered at once with the current state, then on each change.
  Shared::Arm(shared_, -1);
}

TaskFailureWatch::~TaskFailureWatch() {
  absl::MutexLock lock(&shared_->mu);
  shared_->events = nullptr;
}

}  // namespace cohort::launch
