#include "cohort/cluster/resolvers/sagemaker_cluster_resolver.h"

#include <algorithm>
#include <memory>

#include "absl/strings/str_cat.h"
#include "cohort/base/json.h"
#include "cohort/base/status.h"
#include "cohort/cluster/resolver_registry.h"

namespace cohort {

absl::StatusOr<TfConfig> SageMakerClusterResolver::LoadConfig() {
  std::optional<std::string> hosts_text = env_->GetVar("SM_HOSTS");
  std::optional<std::string> current = env_->GetVar("SM_CURRENT_HOST");
  if (!hosts_text.has_value() || !current.has_value()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "Not a SageMaker Environment: ",
        !hosts_text.has_value() ? "SM_HOSTS" : "SM_CURRENT_HOST",
        " is not set; a SageMaker training job sets both SM_HOSTS (a JSON "
        "list of host names) and SM_CURRENT_HOST"));
  }
  std::vector<std::string> hosts;
  if (!hosts_text->empty()) {
    COHORT_ASSIGN_OR_RETURN(Json json, ParseJson(*hosts_text, "SM_HOSTS"));
    if (!json.is_array()) {
      return absl::InvalidArgumentError(
          absl::StrCat("SM_HOSTS must be a JSON list of host names such as "
                       "[\"algo-1\", \"algo-2\"], got ",
                       JsonTypeName(json), " ", JsonPreview(json)));
    }
    for (const Json& host : json) {
      if (!host.is_string()) {
        return absl::InvalidArgumentError(
            absl::StrCat("SM_HOSTS must list host names as strings, got ",
                         JsonTypeName(host), " ", JsonPreview(host), " in ",
                         JsonPreview(json)));
      }
      hosts.push_back(host.get<std::string>());
    }
  }
  std::sort(hosts.begin(), hosts.end());
  TfConfig config;
  auto it = std::find(hosts.begin(), hosts.end(), *current);
  if (it == hosts.end()) return config;  // Not part of the job: empty.
  std::vector<std::string> addresses;
  for (const std::string& host : hosts) {
    addresses.push_back(absl::StrCat(host, ":", port_));
  }
  config.cluster.SetJob("worker", addresses);
  config.task_type = "worker";
  config.task_index = it - hosts.begin();
  return config;
}

void RegisterSageMakerResolver(ResolverRegistry* registry) {
  ResolverRegistration r;
  r.name = "sagemaker";
  r.description = "SM_HOSTS and SM_CURRENT_HOST (Amazon SageMaker)";
  r.priority = 30;
  r.factory = [](Env* env) -> absl::StatusOr<std::unique_ptr<ClusterResolver>> {
    return std::unique_ptr<ClusterResolver>(new SageMakerClusterResolver(env));
  };
  r.detector = [](Env* env) {
    return env->GetVar("SM_HOSTS").has_value() &&
           env->GetVar("SM_CURRENT_HOST").has_value();
  };
  absl::Status status = registry->Register(std::move(r));
  (void)status;  // Only fails on a second registration of the same name.
}

}  // namespace cohort
