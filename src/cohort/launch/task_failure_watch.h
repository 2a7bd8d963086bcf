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
//
// EtcdLauncherLossWatch does the same for the launchers of a job whose
// control plane is etcd and whose launchers' space is recoverable (an
// elastic job): a launcher whose lease expired took its task with it (a
// program dies with its launcher, PR_SET_PDEATHSIG; one cut off from etcd
// stops it), and no launcher is left to restart it. Each other launcher follows
// the launchers' status in etcd (a watch, not a poll), records the loss under
// "launchers/lost/<k>" (the end barrier and the clean-up count it) and reports
// the task as orphaned (AttemptEvents::TaskOrphaned); one that registers again
// later was replaced, and its task is reported adopted (TaskAdopted). The
// record is written after a listing that showed the launcher gone, so it may
// come after a replacement registered: readers count a launcher lost only while
// it is not registered (ClusterLauncher's LostLaunchers). A launcher only
// cut off from etcd (not dead) kills its program once its own heartbeats
// have failed as long; a replacement waits that out (ClaimReplacement).
#ifndef COHORT_LAUNCH_TASK_FAILURE_WATCH_H_
#define COHORT_LAUNCH_TASK_FAILURE_WATCH_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "cohort/coord/coordination_service.h"
#include "cohort/coord/etcd_coordination_client.h"
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

// Where launchers record launcher k lost (EtcdLostLauncherKey(k): the
// directory and k), relative to the job's etcd prefix.
inline constexpr char kEtcdLostLaunchersDir[] = "launchers/lost/";
std::string EtcdLostLauncherKey(int k);

class EtcdLauncherLossWatch {
 public:
  // `me`: this launcher, never reported. `tasks` and `hosts` as
  // TaskFailureWatch's, engine task k's launcher being "launcher:k"; all of
  // them registered (they passed the attempt's start barrier). `env` (the
  // reports' clock) and `events` must outlive the watch. `lost_after` names
  // the lease's TTL in reports. `finished(k)`: engine task k's task already
  // finished (exited 0): its launcher's loss is recorded, but its task is no
  // orphan.
  EtcdLauncherLossWatch(std::shared_ptr<coord::EtcdClient> etcd, int me,
                        std::vector<TaskSpec> tasks,
                        std::vector<std::string> hosts, int attempt,
                        absl::Duration lost_after,
                        std::function<bool(int k)> finished, Env* env,
                        AttemptEvents* events);
  // Stops and joins the watch (it cancels its etcd watch).
  ~EtcdLauncherLossWatch();
  EtcdLauncherLossWatch(const EtcdLauncherLossWatch&) = delete;
  EtcdLauncherLossWatch& operator=(const EtcdLauncherLossWatch&) = delete;

 private:
  void Run();
  // k for "launcher:k" of this job other than this launcher; else -1.
  int LauncherIndex(absl::string_view name) const;

  const std::shared_ptr<coord::EtcdClient> etcd_;
  const int me_;
  const std::vector<TaskSpec> tasks_;
  const std::vector<std::string> hosts_;
  const int attempt_;
  const absl::Duration lost_after_;
  const std::function<bool(int k)> finished_;
  Env* const env_;
  AttemptEvents* const events_;
  coord::EtcdTaskLosses losses_;
  absl::Notification stop_;
  coord::CallCancellation cancel_;
  std::thread thread_;
};

}  // namespace cohort::launch

#endif  // COHORT_LAUNCH_TASK_FAILURE_WATCH_H_
