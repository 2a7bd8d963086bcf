#include "cohort/cluster/resolvers/gce_cluster_resolver.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "cohort/base/logging.h"
#include "cohort/base/status.h"
#include "cohort/cluster/resolver_registry.h"

namespace cohort {

GceClusterResolver::GceClusterResolver(Env* env, Options options)
    : ClusterResolverWithTaskAttributes(options.task_type, options.task_id,
                                        options.rpc_layer),
      options_(std::move(options)),
      metadata_(env, options_.metadata),
      http_(options_.http) {
  while (!options_.compute_api_url.empty() &&
         options_.compute_api_url.back() == '/') {
    options_.compute_api_url.pop_back();
  }
}

absl::StatusOr<std::unique_ptr<GceClusterResolver>> GceClusterResolver::Create(
    Env* env, Options options) {
  if (options.instance_group.empty()) {
    return absl::InvalidArgumentError(
        "GCE resolver: instance_group is empty; expected the name of a "
        "Compute Engine instance group");
  }
  return std::unique_ptr<GceClusterResolver>(
      new GceClusterResolver(env, std::move(options)));
}

absl::Status GceClusterResolver::set_task_type(std::optional<std::string>) {
  return absl::FailedPreconditionError(
      "You cannot reset the task_type of the GCEClusterResolver after it has "
      "been created.");
}

absl::StatusOr<std::string> GceClusterResolver::Token() {
  if (options_.access_token.has_value()) return *options_.access_token;
  absl::StatusOr<std::string> token = metadata_.AccessToken();
  if (!token.ok()) {
    return Annotate(token.status(),
                    "GCE resolver: getting an access token for the Compute "
                    "API (or pass one explicitly)");
  }
  return token;
}

absl::StatusOr<ClusterSpec> GceClusterResolver::cluster_spec() {
  std::string project, zone;
  if (options_.project.has_value()) {
    project = *options_.project;
  } else {
    COHORT_ASSIGN_OR_RETURN(project, metadata_.ProjectId());
  }
  if (options_.zone.has_value()) {
    zone = *options_.zone;
  } else {
    COHORT_ASSIGN_OR_RETURN(zone, metadata_.Zone());
  }
  COHORT_ASSIGN_OR_RETURN(std::string token, Token());
  HttpHeaders headers = {{"Authorization", absl::StrCat("Bearer ", token)},
                         {"Accept", "application/json"}};
  const std::string zone_url =
      absl::StrCat(options_.compute_api_url, "/projects/", UrlEncode(project),
                   "/zones/", UrlEncode(zone));
  const std::string hint = absl::StrCat(
      "project \"", project, "\", zone \"", zone, "\", instance group \"",
      options_.instance_group,
      "\" and that the credentials may read Compute Engine instances");

  std::vector<std::string> workers;
  std::optional<std::string> page_token;
  do {
    std::string url = absl::StrCat(zone_url, "/instanceGroups/",
                                   UrlEncode(options_.instance_group),
                                   "/listInstances?orderBy=name");
    if (page_token.has_value()) {
      absl::StrAppend(&url, "&pageToken=", UrlEncode(*page_token));
    }
    COHORT_ASSIGN_OR_RETURN(
        Json page,
        http_.PostJson(url, headers, Json{{"instanceState", "RUNNING"}}, hint));
    if (!page.is_object()) {
      return absl::InternalError(absl::StrCat(
          "POST ", url, ": expected an object, got ", JsonPreview(page)));
    }
    // An empty group has no "items" at all.
    const Json items = page.value("items", Json::array());
    if (!items.is_array()) {
      return absl::InternalError(absl::StrCat(
          "POST ", url, ": \"items\" is not a list: ", JsonPreview(items)));
    }
    for (const Json& item : items) {
      if (!item.is_object() || !item.contains("instance") ||
          !item["instance"].is_string()) {
        return absl::InternalError(absl::StrCat(
            "POST ", url,
            ": an item without an \"instance\" URL: ", JsonPreview(item)));
      }
      std::string instance_url = item["instance"].get<std::string>();
      std::string name = instance_url.substr(instance_url.rfind('/') + 1);
      std::string get_url =
          absl::StrCat(zone_url, "/instances/", UrlEncode(name));
      COHORT_ASSIGN_OR_RETURN(Json instance,
                              http_.GetJson(get_url, headers, hint));
      const Json* ip = nullptr;
      if (instance.is_object() && instance.contains("networkInterfaces") &&
          instance["networkInterfaces"].is_array() &&
          !instance["networkInterfaces"].empty() &&
          instance["networkInterfaces"][0].is_object() &&
          instance["networkInterfaces"][0].contains("networkIP") &&
          instance["networkInterfaces"][0]["networkIP"].is_string()) {
        ip = &instance["networkInterfaces"][0]["networkIP"];
      }
      if (ip == nullptr) {
        return absl::InternalError(
            absl::StrCat("GET ", get_url,
                         ": instance has no networkInterfaces[0].networkIP: ",
                         JsonPreview(instance)));
      }
      workers.push_back(
          absl::StrCat(ip->get<std::string>(), ":", options_.port));
    }
    page_token.reset();
    if (page.contains("nextPageToken") && page["nextPageToken"].is_string() &&
        !page["nextPageToken"].get<std::string>().empty()) {
      page_token = page["nextPageToken"].get<std::string>();
    }
  } while (page_token.has_value());

  std::sort(workers.begin(), workers.end());
  ClusterSpec spec;
  spec.SetJob(task_type_.value_or(""), workers);
  return spec;
}

void RegisterGceResolver(ResolverRegistry* registry) {
  ResolverRegistration reg;
  reg.name = "gce";
  reg.description =
      "Compute Engine instance group: COHORT_GCE_INSTANCE_GROUP, "
      "COHORT_GCE_PROJECT/ZONE (default: metadata server), COHORT_GCE_PORT, "
      "COHORT_GCE_ACCESS_TOKEN (default: metadata server)";
  reg.factory =
      [](Env* env) -> absl::StatusOr<std::unique_ptr<ClusterResolver>> {
    GceClusterResolver::Options options;
    std::optional<std::string> group = env->GetVar("COHORT_GCE_INSTANCE_GROUP");
    if (!group || group->empty()) {
      return absl::FailedPreconditionError(
          "GCE resolver: COHORT_GCE_INSTANCE_GROUP is not set; expected the "
          "name of the instance group whose RUNNING instances form the job");
    }
    options.instance_group = *group;
    if (auto v = env->GetVar("COHORT_GCE_PROJECT"); v && !v->empty()) {
      options.project = *v;
    }
    if (auto v = env->GetVar("COHORT_GCE_ZONE"); v && !v->empty()) {
      options.zone = *v;
    }
    if (auto v = env->GetVar("COHORT_GCE_TASK_TYPE")) options.task_type = *v;
    if (auto v = env->GetVar("COHORT_GCE_ACCESS_TOKEN"); v && !v->empty()) {
      options.access_token = *v;
    }
    if (auto v = env->GetVar("COHORT_GCE_COMPUTE_API_URL"); v && !v->empty()) {
      options.compute_api_url = *v;
    }
    for (auto [var, target] :
         {std::pair<const char*, int*>{"COHORT_GCE_PORT", &options.port}}) {
      if (auto v = env->GetVar(var); v && !v->empty()) {
        if (!absl::SimpleAtoi(*v, target) || *target <= 0 || *target > 65535) {
          return absl::InvalidArgumentError(absl::StrCat(
              var, "=\"", *v, "\" is not valid: expected a port 1-65535"));
        }
      }
    }
    if (auto v = env->GetVar("COHORT_GCE_TASK_ID"); v && !v->empty()) {
      int64_t id = 0;
      if (!absl::SimpleAtoi(*v, &id) || id < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("COHORT_GCE_TASK_ID=\"", *v,
                         "\" is not valid: expected a non-negative integer"));
      }
      options.task_id = id;
    }
    COHORT_ASSIGN_OR_RETURN(auto r, GceClusterResolver::Create(env, options));
    return std::unique_ptr<ClusterResolver>(std::move(r));
  };
  reg.priority = 50;
  absl::Status s = registry->Register(std::move(reg));
  COHORT_CHECK(s.ok()) << s;
}

}  // namespace cohort
