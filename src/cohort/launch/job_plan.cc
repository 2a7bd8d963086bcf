#include "cohort/launch/job_plan.h"

#include <algorithm>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "cohort/barrier/barrier_task_context.h"
#include "cohort/coord/coordination_client.h"
#include "cohort/rpc/transport.h"

namespace cohort::launch {
namespace {

// Gang members get partition ids: the chief first, then the workers.
void NumberGang(std::vector<TaskSpec>& tasks) {
  int partition = 0;
  for (TaskSpec& t : tasks) {
    if (t.job == "chief") t.partition_id = partition++;
  }
  for (TaskSpec& t : tasks) {
    if (t.job == "worker") t.partition_id = partition++;
  }
}

}  // namespace

absl::StatusOr<std::vector<TaskSpec>> PlanTasks(const JobShape& shape) {
  if (shape.num_workers < 0 || shape.num_ps < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("task counts must not be negative (workers ",
                     shape.num_workers, ", ps ", shape.num_ps, ")"));
  }
  std::vector<TaskSpec> tasks;
  if (shape.chief) tasks.push_back({"chief", 0});
  for (int i = 0; i < shape.num_workers; ++i) tasks.push_back({"worker", i});
  for (int i = 0; i < shape.num_ps; ++i) tasks.push_back({"ps", i});
  if (shape.evaluator) tasks.push_back({"evaluator", 0});
  NumberGang(tasks);
  if (!shape.chief && shape.num_workers == 0) {
    return absl::InvalidArgumentError(
        "the job has no chief and no workers; give -n N (N >= 1), --workers "
        "W or --chief");
  }
  return tasks;
}

absl::StatusOr<std::map<std::string, int>> ParseJobCounts(
    absl::string_view text) {
  static const std::set<std::string> kJobs = {"chief", "evaluator", "ps",
                                              "worker"};
  std::map<std::string, int> jobs;
  for (absl::string_view entry : absl::StrSplit(text, ',')) {
    std::pair<absl::string_view, absl::string_view> kv =
        absl::StrSplit(entry, absl::MaxSplits('=', 1));
    const std::string job(absl::StripAsciiWhitespace(kv.first));
    int count = 0;
    if (!kJobs.count(job)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--jobs entry \"", entry,
          "\": the job must be one of chief, "
          "worker, ps, evaluator, as in --jobs chief=1,worker=2,ps=1"));
    }
    if (!absl::SimpleAtoi(kv.second, &count) || count <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--jobs entry \"", entry,
                       "\": the count must be a positive integer"));
    }
    if ((job == "chief" || job == "evaluator") && count > 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--jobs entry \"", entry, "\": a job has at most one ", job));
    }
    if (!jobs.emplace(job, count).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("--jobs names ", job, " twice in \"", text, "\""));
    }
  }
  return jobs;
}

absl::StatusOr<std::vector<TaskSpec>> PlanEngineTasks(
    const std::map<std::string, int>& jobs, int num_engine_tasks) {
  std::vector<TaskSpec> tasks;
  for (const auto& [job, count] : jobs) {  // sorted by name
    for (int i = 0; i < count; ++i) tasks.push_back({job, i});
  }
  if (static_cast<int>(tasks.size()) != num_engine_tasks) {
    return absl::InvalidArgumentError(
        absl::StrCat("--jobs asks for ", tasks.size(),
                     " task(s) but the cluster engine "
                     "runs ",
                     num_engine_tasks,
                     "; make the counts add up to the engine's "
                     "task count (e.g. srun -n ",
                     tasks.size(), ")"));
  }
  NumberGang(tasks);
  if (!jobs.count("chief") && !jobs.count("worker")) {
    return absl::InvalidArgumentError(
        "--jobs has no chief and no workers; the barrier gang would be empty");
  }
  return tasks;
}

Json MakeTfConfig(const std::vector<TaskSpec>& tasks,
                  const std::vector<std::string>& addresses,
                  const TaskSpec& task) {
  Json cluster = Json::object();
  for (size_t i = 0; i < tasks.size(); ++i) {
    if (tasks[i].job == "evaluator") continue;
    cluster[tasks[i].job].push_back(addresses[i]);
  }
  return Json{{"cluster", cluster},
              {"task", {{"type", task.job}, {"index", task.index}}}};
}

std::vector<std::string> TaskEnvironment(const TaskEnvironmentInputs& in) {
  using namespace barrier;  // the kEnv* names of BarrierTaskContext
  const TaskSpec& spec = in.tasks[in.task];
  std::vector<std::string> vars = in.extra_env;
  vars.push_back(absl::StrCat(
      "TF_CONFIG=", JsonDump(MakeTfConfig(in.tasks, in.addresses, spec))));
  vars.push_back(absl::StrCat(kEnvTaskName, "=", spec.Name()));
  // Tasks prove the token to every server of the job; the environment
  // (unlike argv) is not visible to other users in `ps`.
  vars.push_back(absl::StrCat(rpc::kJobTokenEnvVar, "=", in.job_token));
  vars.push_back(absl::StrCat(kEnvAttemptNumber, "=", in.attempt));
  vars.push_back(absl::StrCat(kEnvStageId, "=", kStageId));
  if (!in.coordination_address.empty()) {
    vars.push_back(absl::StrCat(coord::kEnvCoordinationAddress, "=",
                                in.coordination_address));
    if (in.heartbeat_timeout > absl::ZeroDuration()) {
      vars.push_back(absl::StrCat(coord::kEnvHeartbeatTimeout, "=",
                                  absl::FormatDuration(in.heartbeat_timeout)));
    }
  }
  if (spec.partition_id < 0) {
    for (const char* name : {kEnvBarrierAddress, kEnvBarrierTcpAddress,
                             kEnvPartitionId, kEnvNumTasks, kEnvTaskAttemptId,
                             kEnvTaskAddresses, kEnvTimeout, kEnvEpochFile}) {
      vars.push_back(name);  // not a gang member: remove inherited values
    }
    return vars;
  }
  std::vector<std::string> gang_addresses;
  for (size_t i = 0; i < in.tasks.size(); ++i) {
    if (in.tasks[i].partition_id >= 0) {
      gang_addresses.push_back(in.addresses[i]);
    }
  }
  const int gang_size = static_cast<int>(gang_addresses.size());
  vars.push_back(absl::StrCat(kEnvBarrierAddress, "=", in.barrier_address));
  vars.push_back(
      absl::StrCat(kEnvBarrierTcpAddress, "=", in.barrier_tcp_address));
  vars.push_back(absl::StrCat(kEnvPartitionId, "=", spec.partition_id));
  vars.push_back(absl::StrCat(kEnvNumTasks, "=", gang_size));
  vars.push_back(
      absl::StrCat(kEnvTaskAttemptId, "=",
                   int64_t{in.attempt} * gang_size + spec.partition_id));
  vars.push_back(
      absl::StrCat(kEnvTaskAddresses, "=", absl::StrJoin(gang_addresses, ",")));
  vars.push_back(absl::StrCat(kEnvTimeout, "=",
                              absl::ToDoubleSeconds(in.barrier_timeout)));
  vars.push_back(absl::StrCat(kEnvEpochFile, "=", in.epoch_file));
  return vars;
}

}  // namespace cohort::launch
