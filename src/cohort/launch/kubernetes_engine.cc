// --engine kubernetes: one launcher per pod of a Kubernetes Indexed Job
// (deploy/kubernetes/, docs/kubernetes.md). JOB_COMPLETION_INDEX is this
// task; the peers are the Job's pods as the Kubernetes resolver lists them
// (in this pod's namespace, by completion index, at their pod IPs), retried
// while pods are still starting. The task count is --num-tasks (the Job's
// completions): the API cannot tell a missing last pod from a smaller Job.
//
// Variables: COHORT_KUBERNETES_JOBS (the selectors; default
// batch.kubernetes.io/job-name=<this pod's Job>, from HOSTNAME
// "<job>-<index>"), COHORT_KUBERNETES_NAMESPACE (default: the service
// account's namespace), COHORT_KUBERNETES_PORT (the rendezvous port, 8470),
// and the API server from the service account (KUBERNETES_SERVICE_HOST) or,
// outside a pod, the kubeconfig.
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "cohort/base/status.h"
#include "cohort/cluster/resolvers/kubernetes_cluster_resolver.h"
#include "cohort/launch/engine.h"

namespace cohort::launch {
namespace {

constexpr absl::Duration kRetryInterval = absl::Seconds(1);

absl::StatusOr<KubernetesClusterResolver::Options> EngineOptions(Env* env,
                                                                 int index) {
  KubernetesClusterResolver::Options o;
  o.order = KubernetesClusterResolver::PodOrder::kByCompletionIndex;
  o.address = KubernetesClusterResolver::AddressSource::kPodIp;
  o.rpc_layer = std::nullopt;
  std::optional<std::string> host = env->GetVar("KUBERNETES_SERVICE_HOST");
  o.executable_location =
      host && !host->empty()
          ? KubernetesClusterResolver::ExecutableLocation::kWithinCluster
          : KubernetesClusterResolver::ExecutableLocation::kOffCluster;
  std::optional<std::string> jobs = env->GetVar("COHORT_KUBERNETES_JOBS");
  if (!jobs || jobs->empty()) {
    // An Indexed Job's pod is named <job>-<index>-<suffix> and its hostname
    // is <job>-<index>.
    const std::string hostname = env->GetVar("HOSTNAME").value_or("");
    const std::string suffix = absl::StrCat("-", index);
    if (!absl::EndsWith(hostname, suffix) || hostname.size() == suffix.size()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "--engine kubernetes: cannot tell this pod's Job from HOSTNAME=\"",
          hostname, "\" (expected <job>-", index,
          "); set COHORT_KUBERNETES_JOBS='{\"worker\": "
          "[\"batch.kubernetes.io/job-name=JOB\"]}'"));
    }
    o.job_to_label_mapping = {
        {"worker",
         {absl::StrCat("batch.kubernetes.io/job-name=",
                       hostname.substr(0, hostname.size() - suffix.size()))}}};
  }
  COHORT_RETURN_IF_ERROR(KubernetesOptionsFromEnv(env, &o));
  if (!o.pod_namespace.has_value()) {
    COHORT_ASSIGN_OR_RETURN(o.pod_namespace, ReadServiceAccountNamespace(env));
  }
  return o;
}

}  // namespace

absl::StatusOr<EngineTask> ResolveKubernetesTask(Env* env,
                                                 const EngineFlags& flags) {
  std::optional<std::string> index_text = env->GetVar("JOB_COMPLETION_INDEX");
  int index = -1;
  if (!index_text.has_value()) {
    return absl::FailedPreconditionError(
        "--engine kubernetes: JOB_COMPLETION_INDEX is not set; run the "
        "launcher in a pod of an Indexed Job (completionMode: Indexed, "
        "deploy/kubernetes/job.yaml)");
  }
  if (!absl::SimpleAtoi(*index_text, &index) || index < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--engine kubernetes: JOB_COMPLETION_INDEX=\"",
                     *index_text, "\" is not a task index"));
  }
  if (flags.num_tasks <= 0) {
    return absl::InvalidArgumentError(
        "--engine kubernetes needs --num-tasks N (the Job's completions)");
  }
  if (index >= flags.num_tasks) {
    return absl::InvalidArgumentError(
        absl::StrCat("--engine kubernetes: JOB_COMPLETION_INDEX=", index,
                     " but --num-tasks is ", flags.num_tasks,
                     "; make --num-tasks the Job's completions"));
  }
  COHORT_ASSIGN_OR_RETURN(KubernetesClusterResolver::Options options,
                          EngineOptions(env, index));
  const std::string where = absl::StrCat(
      "pods of ", options.job_to_label_mapping.begin()->second.front(),
      " in namespace ", *options.pod_namespace);
  COHORT_ASSIGN_OR_RETURN(std::unique_ptr<KubernetesClusterResolver> resolver,
                          KubernetesClusterResolver::Create(env, options));

  // Pods start one by one: list them until all `num_tasks` run.
  const absl::Time deadline = env->Now() + flags.timeout;
  absl::Status last;
  std::vector<std::string> addresses;
  while (true) {
    absl::StatusOr<ClusterSpec> spec = resolver->cluster_spec();
    if (spec.ok()) {
      addresses.clear();
      for (const std::string& job : spec->jobs()) {
        COHORT_ASSIGN_OR_RETURN(auto tasks, spec->job_tasks(job));
        for (const auto& a : tasks) addresses.push_back(a.value_or(""));
      }
      if (static_cast<int>(addresses.size()) == flags.num_tasks) break;
      if (static_cast<int>(addresses.size()) > flags.num_tasks) {
        return absl::InvalidArgumentError(
            absl::StrCat("--engine kubernetes: ", addresses.size(), " running ",
                         where, " but --num-tasks is ", flags.num_tasks,
                         "; make --num-tasks the Job's completions"));
      }
      last = absl::FailedPreconditionError(absl::StrCat(
          addresses.size(), " of ", flags.num_tasks, " pods are running"));
    } else if (absl::IsFailedPrecondition(spec.status()) ||
               absl::IsUnavailable(spec.status())) {
      last = spec.status();
    } else {
      return Annotate(spec.status(),
                      absl::StrCat("--engine kubernetes listing ", where));
    }
    if (env->Now() + kRetryInterval > deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "--engine kubernetes: the ", where, " were not all running within ",
          absl::FormatDuration(flags.timeout),
          " (--rendezvous-timeout); last: ", last.message()));
    }
    env->SleepFor(kRetryInterval);
  }

  EngineTask task;
  task.engine = "kubernetes";
  task.index = index;
  task.count = flags.num_tasks;
  for (const std::string& a : addresses) {
    COHORT_ASSIGN_OR_RETURN(auto hp, SplitHostPort(a, "a pod's address"));
    task.hosts.push_back(hp.first);
  }
  COHORT_ASSIGN_OR_RETURN(auto first,
                          SplitHostPort(addresses.front(), "a pod's address"));
  COHORT_ASSIGN_OR_RETURN(
      task.rendezvous,
      ApplyRendezvousFlag(first.first, first.second, flags.rendezvous));
  task.source = absl::StrCat("JOB_COMPLETION_INDEX=", index, " of ", task.count,
                             ", ", where);
  return task;
}

}  // namespace cohort::launch
