#include "cohort/training/data_parallel_gang.h"

#include <string>
#include <utility>
#include <vector>

#include "cohort/barrier/barrier_task_context.h"
#include "cohort/base/env.h"
#include "cohort/base/status.h"
#include "cohort/rpc/transport.h"

namespace cohort::training {

absl::StatusOr<LaunchedGang> JoinLaunchedGang(collective::Transport transport,
                                              absl::Duration timeout) {
  COHORT_ASSIGN_OR_RETURN(barrier::BarrierTaskContext * task,
                          barrier::BarrierTaskContext::Get());
  Env* env = Env::Default();
  collective::GroupOptions o;
  o.name = "gradients";
  o.rank = task->partition_id();
  o.size = task->num_tasks();
  o.task = env->GetVar("COHORT_TASK_NAME").value_or("");
  o.job_token = env->GetVar(rpc::kJobTokenEnvVar).value_or("");
  o.transport = transport;
  o.setup_timeout = timeout;
  o.env = env;
  LaunchedGang gang;
  COHORT_ASSIGN_OR_RETURN(gang.group,
                          collective::CollectiveGroup::Create(
                              o, [task](const std::string& mine, absl::Time) {
                                return task->AllGather(mine);
                              }));
  gang.collective.partition_id = task->partition_id();
  gang.collective.num_tasks = task->num_tasks();
  gang.collective.all_gather = [task](const std::string& m) {
    return task->AllGather(m);
  };
  collective::CollectiveGroup* group = gang.group.get();
  gang.collective.all_reduce_mean = [group, env, timeout](float* data,
                                                          size_t count) {
    return group->AllReduce(data, count, collective::ReduceOp::kMean,
                            env->Now() + timeout);
  };
  return gang;
}

}  // namespace cohort::training
