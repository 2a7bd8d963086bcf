// Feeds the failures the coordination service sees (a task whose heartbeats
// stopped, or that reported an error) to an attempt's supervisor: a
// task-state listener on the service (told of each transition, not
// polled) reports each of the job's tasks that goes to ERROR as a
// FailureRecord ("was failed by the coordination service: ...").
//
//   TaskFailureWatch watch(server->service(), tasks, hosts, attempt, &events);
//   ... the attempt runs; destroying the watch stops it ...
//
// Thread safety: the listener runs on the service's threads and only
// pushes events.
#ifndef COHORT_LAUNCH_TASK_FAILURE_WATCH_H_
#define COHORT_LAUNCH_TASK_FAILURE_WATCH_H_

#include <cstdint>
#include <string>
#include <vector>

#include "cohort/coord/coordination_service.h"
#include "cohort/launch/attempt_supervisor.h"
#include "cohort/launch/job_plan.h"

namespace cohort::launch {

class TaskFailureWatch {
 public:
  // `tasks`: the job's tasks (a record's job_task is the index here);
  // `hosts`: where each runs, named in the record (empty: this machine).
  // `service` and `events` must outlive the watch. A task already in ERROR
  // when the watch starts is reported too.
  TaskFailureWatch(coord::CoordinationService* service,
                   std::vector<TaskSpec> tasks, std::vector<std::string> hosts,
                   int attempt, AttemptEvents* events);
  // Removes the listener; once this returns nothing more is reported.
  ~TaskFailureWatch();
  TaskFailureWatch(const TaskFailureWatch&) = delete;
  TaskFailureWatch& operator=(const TaskFailureWatch&) = delete;

 private:
  void Report(const coord::TaskStateSnapshot& state);

  coord::CoordinationService* const service_;
  const std::vector<TaskSpec> tasks_;
  const std::vector<std::string> hosts_;
  const int attempt_;
  AttemptEvents* const events_;
  uint64_t listener_ = 0;
};

}  // namespace cohort::launch

#endif  // COHORT_LAUNCH_TASK_FAILURE_WATCH_H_
