#include "cohort/cluster/resolvers/slurm_cluster_resolver.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "cohort/base/logging.h"
#include "cohort/base/status.h"
#include "cohort/cluster/resolver_registry.h"
#include "cohort/cluster/resolvers/slurm_hostlist.h"

namespace cohort {
namespace {

absl::StatusOr<std::string> GetSlurmVar(Env* env, absl::string_view name) {
  std::optional<std::string> value = env->GetVar(name);
  if (!value.has_value()) {
    return absl::FailedPreconditionError(absl::StrCat(
        name, " not found in environment. Not running inside a SLURM step?"));
  }
  return *value;
}

absl::StatusOr<int> ParseNonNegative(absl::string_view name,
                                     absl::string_view value) {
  int v = 0;
  if (!absl::SimpleAtoi(value, &v) || v < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, "=\"", value,
                     "\" is not valid: expected a non-negative integer"));
  }
  return v;
}

absl::Status Annotated(absl::Status status, absl::string_view var) {
  return Annotate(status, var);
}

}  // namespace

int CountGpusForSlurm(Env* env) {
  if (std::optional<std::string> visible =
          env->GetVar("CUDA_VISIBLE_DEVICES")) {
    // As TensorFlow: the number of comma-separated entries; "" counts as 1.
    return static_cast<int>(
        std::vector<absl::string_view>(absl::StrSplit(*visible, ',')).size());
  }
  absl::StatusOr<std::string> out =
      env->RunCommand({"nvidia-smi", "--list-gpus"});
  if (!out.ok()) {
    COHORT_LOG(INFO) << "Slurm resolver: no CUDA_VISIBLE_DEVICES and "
                        "`nvidia-smi --list-gpus` failed ("
                     << out.status().message() << "); assuming 0 GPUs per node";
    return 0;
  }
  int count = 0;
  for (absl::string_view line : absl::StrSplit(*out, '\n')) {
    if (absl::StartsWith(line, "GPU ")) ++count;
  }
  return count;
}

absl::StatusOr<std::unique_ptr<SlurmClusterResolver>>
SlurmClusterResolver::Create(Env* env, Options options) {
  std::unique_ptr<SlurmClusterResolver> r(new SlurmClusterResolver());
  r->env_ = env;
  r->port_base_ = options.port_base;
  r->auto_set_gpu_ = options.auto_set_gpu;
  r->rpc_layer_ = options.rpc_layer;

  COHORT_ASSIGN_OR_RETURN(std::string procid, GetSlurmVar(env, "SLURM_PROCID"));
  COHORT_ASSIGN_OR_RETURN(r->rank_, ParseNonNegative("SLURM_PROCID", procid));

  if (options.jobs.has_value()) {
    for (const auto& [job, count] : *options.jobs) {
      if (count < 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "Slurm resolver: job \"", job, "\" has a negative task count ",
            count, "; expected a count >= 0"));
      }
    }
    r->jobs_ = *options.jobs;
  } else {
    COHORT_ASSIGN_OR_RETURN(std::string n,
                            GetSlurmVar(env, "SLURM_STEP_NUM_TASKS"));
    COHORT_ASSIGN_OR_RETURN(int num_tasks,
                            ParseNonNegative("SLURM_STEP_NUM_TASKS", n));
    r->jobs_ = {{"worker", num_tasks}};
  }

  // User specification overrides the Slurm one.
  if (options.tasks_per_node_map.has_value()) {
    r->task_configuration_ = *options.tasks_per_node_map;
  } else {
    COHORT_ASSIGN_OR_RETURN(std::string nodelist,
                            GetSlurmVar(env, "SLURM_STEP_NODELIST"));
    absl::StatusOr<std::vector<std::string>> hosts = ExpandHostlist(nodelist);
    if (!hosts.ok()) {
      return Annotated(hosts.status(), "SLURM_STEP_NODELIST");
    }
    if (options.tasks_per_node.has_value()) {
      for (const std::string& host : *hosts) {
        r->task_configuration_[host] = *options.tasks_per_node;
      }
    } else {
      COHORT_ASSIGN_OR_RETURN(std::string tpn,
                              GetSlurmVar(env, "SLURM_STEP_TASKS_PER_NODE"));
      absl::StatusOr<std::vector<int>> counts = ExpandTasksPerNode(tpn);
      if (!counts.ok()) {
        return Annotated(counts.status(), "SLURM_STEP_TASKS_PER_NODE");
      }
      // Zip: extra entries on either side are dropped (as TensorFlow does).
      size_t n = std::min(hosts->size(), counts->size());
      for (size_t i = 0; i < n; ++i) {
        r->task_configuration_[(*hosts)[i]] = (*counts)[i];
      }
    }
  }
  if (r->task_configuration_.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "Slurm resolver: no nodes to place tasks on (SLURM_STEP_NODELIST=\"",
        env->GetVar("SLURM_STEP_NODELIST").value_or("<unset>"),
        "\"); check the step's node list and tasks_per_node"));
  }
  int max_tasks_per_node = 0;
  int64_t num_tasks = 0;
  for (const auto& [host, count] : r->task_configuration_) {
    if (count < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("Slurm resolver: node \"", host,
                       "\" has a negative task count ", count));
    }
    max_tasks_per_node = std::max(max_tasks_per_node, count);
    num_tasks += count;
  }

  if (num_tasks > kMaxExpandedEntries) {
    return absl::InvalidArgumentError(
        absl::StrCat("Slurm resolver: the tasks per node add up to ", num_tasks,
                     " tasks, more than the supported ", kMaxExpandedEntries,
                     "; check SLURM_STEP_TASKS_PER_NODE and tasks_per_node"));
  }

  r->gpus_per_node_ = options.gpus_per_node.has_value()
                          ? *options.gpus_per_node
                          : CountGpusForSlurm(env);
  if (options.gpus_per_task.has_value()) {
    r->gpus_per_task_ = *options.gpus_per_task;
  } else {
    r->gpus_per_task_ =
        max_tasks_per_node > 0 ? r->gpus_per_node_ / max_tasks_per_node : 0;
  }
  if (r->gpus_per_node_ < 0 || r->gpus_per_task_ < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Slurm resolver: gpus_per_node (", r->gpus_per_node_,
        ") and gpus_per_task (", r->gpus_per_task_, ") must be >= 0"));
  }

  if (static_cast<int64_t>(max_tasks_per_node) * r->gpus_per_task_ >
      r->gpus_per_node_) {
    return absl::FailedPreconditionError(
        absl::StrCat("Requested more GPUs per node than available. (",
                     max_tasks_per_node, " tasks per node x ",
                     r->gpus_per_task_, " GPUs per task > ", r->gpus_per_node_,
                     " GPUs per node; check gpus_per_task, "
                     "CUDA_VISIBLE_DEVICES and SLURM_STEP_TASKS_PER_NODE)"));
  }
  int64_t requested = 0;
  for (const auto& [job, count] : r->jobs_) requested += count;
  if (requested != num_tasks) {
    return absl::FailedPreconditionError(absl::StrCat(
        "Requested ", requested, " tasks but only ", num_tasks,
        " were assigned. (check the job sizes against SLURM_STEP_NUM_TASKS "
        "and the tasks per node)"));
  }
  return r;
}

absl::StatusOr<ClusterSpec> SlurmClusterResolver::cluster_spec() {
  std::vector<std::string> task_list;
  std::vector<std::string> gpu_allocation;
  // std::map iterates hosts in ascending text order, as TensorFlow's sorted().
  for (const auto& [host, num_tasks] : task_configuration_) {
    int slots = num_tasks;
    if (gpus_per_task_ > 0) {
      // Python zips the tasks with range(0, gpus_per_node, gpus_per_task):
      // at most ceil(gpus_per_node / gpus_per_task) GPU slots per node.
      int gpu_slots = (gpus_per_node_ + gpus_per_task_ - 1) / gpus_per_task_;
      slots = std::min(slots, gpu_slots);
    }
    for (int k = 0; k < slots; ++k) {
      task_list.push_back(absl::StrCat(host, ":", port_base_ + k));
      std::vector<std::string> ids;
      for (int g = k * gpus_per_task_; g < (k + 1) * gpus_per_task_; ++g) {
        ids.push_back(absl::StrCat(g));
      }
      gpu_allocation.push_back(absl::StrJoin(ids, ","));
    }
  }

  ClusterSpec spec;
  size_t start = 0;
  for (const auto& [job, count] : jobs_) {  // sorted by job name
    size_t end = std::min(task_list.size(), start + static_cast<size_t>(count));
    std::vector<std::string> addresses(task_list.begin() + start,
                                       task_list.begin() + end);
    spec.SetJob(job, addresses);
    if (static_cast<size_t>(rank_) >= start &&
        static_cast<size_t>(rank_) < start + static_cast<size_t>(count)) {
      task_type_ = job;
      task_id_ = rank_ - static_cast<int64_t>(start);
    }
    start += count;
  }
  if (static_cast<size_t>(rank_) >= task_list.size()) {
    return absl::FailedPreconditionError(
        absl::StrCat("Slurm resolver: SLURM_PROCID=", rank_, " is outside the ",
                     task_list.size(),
                     " tasks of the step; check SLURM_PROCID, the job "
                     "sizes and the tasks per node"));
  }
  if (auto_set_gpu_ && gpus_per_task_ > 0) {
    // Tasks without GPUs (gpus_per_task 0) leave CUDA_VISIBLE_DEVICES alone.
    env_->SetVar("CUDA_VISIBLE_DEVICES", gpu_allocation[rank_]);
  }
  return spec;
}

absl::StatusOr<AcceleratorCounts> SlurmClusterResolver::num_accelerators(
    std::optional<std::string>, std::optional<int64_t>) {
  return AcceleratorCounts{{"GPU", gpus_per_task_}};
}

void RegisterSlurmResolver(ResolverRegistry* registry) {
  ResolverRegistration reg;
  reg.name = "slurm";
  reg.description =
      "Slurm job step: SLURM_PROCID, SLURM_STEP_NUM_TASKS, "
      "SLURM_STEP_NODELIST, SLURM_STEP_TASKS_PER_NODE, CUDA_VISIBLE_DEVICES";
  reg.factory =
      [](Env* env) -> absl::StatusOr<std::unique_ptr<ClusterResolver>> {
    COHORT_ASSIGN_OR_RETURN(auto r, SlurmClusterResolver::Create(
                                        env, SlurmClusterResolver::Options()));
    return std::unique_ptr<ClusterResolver>(std::move(r));
  };
  reg.detector = [](Env* env) {
    return env->GetVar("SLURM_PROCID").has_value();
  };
  reg.priority = 20;
  absl::Status s = registry->Register(std::move(reg));
  COHORT_CHECK(s.ok()) << s;
}

}  // namespace cohort
