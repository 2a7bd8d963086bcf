#include "cohort/training/data_parallel_gang.h"

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "cohort/barrier/barrier_task_context.h"
#include "cohort/base/env.h"
#include "cohort/base/logging.h"
#include "cohort/base/status.h"
#include "cohort/coord/coordination_client.h"
#include "cohort/coord/elastic_membership.h"
#include "cohort/coord/framed_coordination.h"
#include "cohort/rpc/transport.h"

namespace cohort::training {
namespace {

absl::StatusOr<std::string> RequiredVar(Env* env, const char* name) {
  std::optional<std::string> value = env->GetVar(name);
  if (!value.has_value() || value->empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat(name, " is not set: `cohort launch` sets it"));
  }
  return *value;
}

// `*out` from the duration in variable `name` ("60s"), left as it is when
// the variable is not set; InvalidArgument naming it when it is no duration.
absl::Status DurationVar(Env* env, const char* name, absl::Duration* out) {
  std::optional<std::string> text = env->GetVar(name);
  if (text.has_value() && !absl::ParseDuration(*text, out)) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, "=\"", *text, "\" is not a duration"));
  }
  return absl::OkStatus();
}

// The host of this task's address in the gang (COHORT_TASK_ADDRESSES at
// COHORT_PARTITION_ID, "10.77.0.3:2222" -> "10.77.0.3"), where its TCP
// endpoint must listen for members on other hosts to reach it; 127.0.0.1
// when the launcher gave none.
std::string OwnHost(Env* env) {
  int partition = -1;
  const std::vector<std::string> addresses =
      absl::StrSplit(env->GetVar(barrier::kEnvTaskAddresses).value_or(""), ',',
                     absl::SkipEmpty());
  if (!absl::SimpleAtoi(env->GetVar(barrier::kEnvPartitionId).value_or(""),
                        &partition) ||
      partition < 0 || partition >= static_cast<int>(addresses.size())) {
    return "127.0.0.1";
  }
  const std::string& address = addresses[partition];
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0) return "127.0.0.1";
  std::string host = address.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  return host;
}

absl::Status JoinElasticGang(Env* env, const std::string& range_text,
                             collective::GroupOptions group,
                             absl::Duration timeout, LaunchedGang& gang) {
  ElasticGangOptions o;
  COHORT_ASSIGN_OR_RETURN(
      o.range, coord::ParseElasticRange(range_text, coord::kEnvElastic));
  COHORT_ASSIGN_OR_RETURN(o.task, RequiredVar(env, barrier::kEnvTaskName));
  COHORT_RETURN_IF_ERROR(DurationVar(env, coord::kEnvElasticWait, &o.wait));
  int restart = 0;
  o.restarted =
      absl::SimpleAtoi(env->GetVar(barrier::kEnvTaskRestart).value_or("0"),
                       &restart) &&
      restart > 0;
  o.timeout = timeout;
  o.group = std::move(group);
  o.env = env;
  COHORT_ASSIGN_OR_RETURN(std::string address,
                          RequiredVar(env, coord::kEnvCoordinationAddress));
  rpc::TransportSecurity security;
  security.job_token = o.group.job_token;
  COHORT_ASSIGN_OR_RETURN(std::unique_ptr<coord::CoordinationClient> client,
                          coord::NewCoordinationClient(address, security));
  coord::CoordinationAgentOptions agent_options;
  COHORT_ASSIGN_OR_RETURN(agent_options.task, coord::TaskId::Parse(o.task));
  agent_options.env = env;
  // The member heartbeats, so that one alive but silent (hung, stopped,
  // cut off) is declared lost like one that exited: its launcher kills it
  // and the others re-form without it. Four beats per timeout leave room
  // for a member starved of CPU by the training itself.
  COHORT_RETURN_IF_ERROR(DurationVar(env, coord::kEnvHeartbeatTimeout,
                                     &agent_options.heartbeat_timeout));
  agent_options.heartbeat_interval = agent_options.heartbeat_timeout / 4;
  agent_options.register_timeout = o.wait;
  // A member back from a stall re-registers and learns from the membership
  // whether it was removed; other tasks' errors are not its (tasks restart
  // alone in an elastic job).
  agent_options.reconnect_after_heartbeat_timeout = true;
  agent_options.poll_for_errors = false;
  const std::string me = o.task;
  agent_options.error_callback = [me](const absl::Status& error) {
    COHORT_LOG(WARNING) << me << ": coordination error: " << error;
  };
  COHORT_ASSIGN_OR_RETURN(
      gang.agent, coord::CoordinationAgent::Create(std::move(agent_options),
                                                   std::move(client)));
  COHORT_RETURN_IF_ERROR(Annotate(
      gang.agent->Connect(),
      absl::StrCat(me, ": registering with the job's coordination service at ",
                   address)));
  COHORT_ASSIGN_OR_RETURN(gang.elastic,
                          ElasticGang::Join(std::move(o), gang.agent.get()));
  ElasticGang* e = gang.elastic.get();
  Collective& c = gang.collective;
  c.partition_id = e->rank();
  c.num_tasks = e->size();
  c.all_gather = [e](const std::string& mine) { return e->AllGather(mine); };
  c.all_reduce_mean = [e](float* data, size_t count) {
    return e->AllReduceMean(data, count);
  };
  c.broadcast = [e](void* data, size_t bytes, int root) {
    return e->Broadcast(data, bytes, root);
  };
  c.joins_running_job = e->restarted();
  c.membership_changed = [e] { return e->ChangeAgreed(); };
  c.reform = [e](const absl::Status& cause, Collective& self) {
    COHORT_RETURN_IF_ERROR(e->Reform(cause));
    self.partition_id = e->rank();
    self.num_tasks = e->size();
    return absl::OkStatus();
  };
  c.describe = [e] { return e->membership().ToString(); };
  c.job_finished = [e] { return e->job_finished(); };
  c.mark_finished = [e] { return e->MarkFinished(); };
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<LaunchedGang> JoinLaunchedGang(collective::Transport transport,
                                              absl::Duration timeout) {
  Env* env = Env::Default();
  collective::GroupOptions o;
  o.name = "gradients";
  o.task = env->GetVar(barrier::kEnvTaskName).value_or("");
  o.job_token = env->GetVar(rpc::kJobTokenEnvVar).value_or("");
  o.transport = transport;
  o.host = OwnHost(env);
  o.setup_timeout = timeout;
  o.env = env;
  LaunchedGang gang;
  if (std::optional<std::string> elastic = env->GetVar(coord::kEnvElastic);
      elastic.has_value() && !elastic->empty()) {
    COHORT_RETURN_IF_ERROR(
        JoinElasticGang(env, *elastic, std::move(o), timeout, gang));
    return gang;
  }
  COHORT_ASSIGN_OR_RETURN(barrier::BarrierTaskContext * task,
                          barrier::BarrierTaskContext::Get());
  o.rank = task->partition_id();
  o.size = task->num_tasks();
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
