// Feeds the failures the coordination service sees (a task whose heartbeats
// stopped, or that reported an error) to an attempt's supervisor: it watches
// the service's job state (WatchJobStateAsync: answered on every change, not
// polled) and reports each task that goes to ERROR once, as a FailureRecord
// ("was failed by the coordination service: ...").
//
//   TaskFailureWatch watch(server->service(), tasks, hosts, attempt, &events);
//   ... the attempt runs; destroying the watch stops it ...
//
// Thread safety: the watch's callbacks run on the service's threads and
// only push events; the destructor may run while one is in flight.
#ifndef COHORT_LAUNCH_TASK_FAILURE_WATCH_H_
#define COHORT_LAUNCH_TASK_FAILURE_WATCH_H_

#include <memory>
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
  // `service` must stay alive until it stopped or this watch is destroyed;
  // `events` must outlive both.
  TaskFailureWatch(coord::CoordinationService* service,
                   std::vector<TaskSpec> tasks, std::vector<std::string> hosts,
                   int attempt, AttemptEvents* events);
  // Stops reporting; a watch still parked in the service is answered later
  // (at the next change or when the service stops) and does nothing.
  ~TaskFailureWatch();
  TaskFailureWatch(const TaskFailureWatch&) = delete;
  TaskFailureWatch& operator=(const TaskFailureWatch&) = delete;

 private:
  struct Shared;
  std::shared_ptr<Shared> shared_;
};

}  // namespace cohort::launch

#endif  // COHORT_LAUNCH_TASK_FAILURE_WATCH_H_
