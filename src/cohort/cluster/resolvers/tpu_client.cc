#include "cohort/cluster/resolvers/tpu_client.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "cohort/base/logging.h"
#include "cohort/base/status.h"

namespace cohort {
namespace {

constexpr absl::Duration kOomEventCoolTime = absl::Seconds(90);

std::string JsonToText(const Json& v) {
  if (v.is_string()) return v.get<std::string>();
  return v.dump();
}

}  // namespace

std::vector<TpuNetworkEndpoint> EnvironmentVarToNetworkEndpoints(
    absl::string_view endpoints) {
  std::vector<TpuNetworkEndpoint> out;
  for (absl::string_view endpoint : absl::StrSplit(endpoints, ',')) {
    // As Python's endpoint.split('grpc://')[1]: the text after the prefix.
    endpoint = absl::StripPrefix(endpoint, "grpc://");
    std::vector<absl::string_view> parts = absl::StrSplit(endpoint, ':');
    TpuNetworkEndpoint e;
    e.ip_address = std::string(parts[0]);
    e.port = parts.size() > 1 ? std::string(parts[1]) : kDefaultTpuEndpointPort;
    e.raw = Json{{"ipAddress", e.ip_address}, {"port", e.port}};
    out.push_back(std::move(e));
  }
  return out;
}

CloudTpuClient::CloudTpuClient(Env* env, Options options)
    : env_(env),
      options_(std::move(options)),
      metadata_(env, options_.metadata),
      http_(options_.http) {}

absl::StatusOr<std::unique_ptr<CloudTpuClient>> CloudTpuClient::Create(
    Env* env, Options options) {
  std::optional<std::string> tpu = options.tpu;
  std::optional<std::string> project = options.project;
  std::optional<std::string> zone = options.zone;
  if (options.tpu_list.has_value()) {
    if (options.tpu_list->empty()) {
      return absl::InvalidArgumentError("At least one TPU must be specified.");
    }
    if (options.tpu_list->size() != 1) {
      return absl::UnimplementedError(
          absl::StrCat("Using multiple TPUs in a single session is not yet "
                       "implemented (got ",
                       options.tpu_list->size(), " TPU names)"));
    }
    tpu = (*options.tpu_list)[0];
  }
  if (!tpu.has_value() || tpu->empty()) {
    tpu.reset();
    for (const char* var : {"KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS", "TPU_NAME"}) {
      std::optional<std::string> v = env->GetVar(var);
      if (v.has_value() && !v->empty()) {
        tpu = *v;
        break;
      }
    }
  }
  if (!tpu.has_value()) {
    std::optional<std::string> config = env->GetVar("TPU_CONFIG");
    if (!config.has_value() || config->empty()) {
      return absl::InvalidArgumentError(
          "Please provide a TPU Name to connect to. (none was given, and "
          "KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS, TPU_NAME and TPU_CONFIG are "
          "unset)");
    }
    COHORT_ASSIGN_OR_RETURN(Json json, ParseJson(*config, "TPU_CONFIG"));
    if (!json.is_object()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "TPU_CONFIG must be a JSON object with tpu_node_name, project and "
          "zone; got ",
          JsonPreview(json)));
    }
    COHORT_ASSIGN_OR_RETURN(std::optional<std::string> node,
                            JsonOptionalString(json, "tpu_node_name",
                                               "TPU_CONFIG", "tpu_node_name"));
    if (!node.has_value() || node->empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "TPU_CONFIG has no \"tpu_node_name\": ", JsonPreview(json),
          "; Please provide a TPU Name to connect to."));
    }
    tpu = *node;
    COHORT_ASSIGN_OR_RETURN(
        std::optional<std::string> p,
        JsonOptionalString(json, "project", "TPU_CONFIG", "project"));
    COHORT_ASSIGN_OR_RETURN(
        std::optional<std::string> z,
        JsonOptionalString(json, "zone", "TPU_CONFIG", "zone"));
    if (!project.has_value() || project->empty()) project = p;
    if (!zone.has_value() || zone->empty()) zone = z;
  }

  std::unique_ptr<CloudTpuClient> c(
      new CloudTpuClient(env, std::move(options)));
  c->tpu_ = *tpu;
  c->use_api_ = !absl::StartsWith(c->tpu_, "grpc://");
  if (c->use_api_) {
    if (project.has_value() && !project->empty()) {
      c->project_ = project;
    } else {
      COHORT_ASSIGN_OR_RETURN(c->project_, c->metadata_.ProjectId());
    }
    if (zone.has_value() && !zone->empty()) {
      c->zone_ = zone;
    } else {
      COHORT_ASSIGN_OR_RETURN(c->zone_, c->metadata_.Zone());
    }
    if (c->options_.tpu_api_url.has_value()) {
      c->api_url_ = *c->options_.tpu_api_url;
    } else if (auto v = env->GetVar("TPU_API_URL"); v && !v->empty()) {
      c->api_url_ = *v;
    } else {
      c->api_url_ = kDefaultCloudTpuApiUrl;
    }
    while (!c->api_url_.empty() && c->api_url_.back() == '/') {
      c->api_url_.pop_back();
    }
  }
  return c;
}

std::string CloudTpuClient::full_name() const {
  return absl::StrCat("projects/", project_.value_or(""), "/locations/",
                      zone_.value_or(""), "/nodes/", tpu_);
}

absl::StatusOr<Json> CloudTpuClient::FetchNode() const {
  if (!use_api_) {
    return absl::FailedPreconditionError(
        absl::StrCat("TPU \"", tpu_,
                     "\" is a list of grpc:// endpoints; there is no Cloud "
                     "TPU API node to read"));
  }
  auto fail = [&](const absl::Status& cause) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Could not lookup TPU metadata from name '", tpu_,
        "'. Please doublecheck the tpu argument in the TPUClusterResolver "
        "constructor (and the project \"",
        project_.value_or(""), "\" and zone \"", zone_.value_or(""),
        "\"). Exception: ", cause.ToString()));
  };
  std::string token;
  if (options_.access_token.has_value()) {
    token = *options_.access_token;
  } else {
    absl::StatusOr<std::string> t = metadata_.AccessToken();
    if (!t.ok()) return fail(t.status());
    token = *t;
  }
  std::string url = absl::StrCat(api_url_, "/", full_name());
  absl::StatusOr<Json> node = http_.GetJson(
      url,
      {{"Authorization", absl::StrCat("Bearer ", token)},
       {"Accept", "application/json"}},
      "the TPU name, project and zone, and that the credentials may read "
      "Cloud TPU nodes");
  if (!node.ok()) return fail(node.status());
  if (!node->is_object()) {
    return fail(absl::InternalError(absl::StrCat(
        "GET ", url, ": expected a node object, got ", JsonPreview(*node))));
  }
  return node;
}

absl::StatusOr<std::optional<std::string>> CloudTpuClient::GetProperty(
    absl::string_view key) const {
  if (!use_api_) return std::optional<std::string>();
  COHORT_ASSIGN_OR_RETURN(Json node, FetchNode());
  std::string k(key);
  if (!node.contains(k) || node[k].is_null()) {
    return std::optional<std::string>();
  }
  return std::optional<std::string>(JsonToText(node[k]));
}

absl::StatusOr<std::vector<TpuNetworkEndpoint>>
CloudTpuClient::NetworkEndpoints() const {
  if (!use_api_) return EnvironmentVarToNetworkEndpoints(tpu_);
  COHORT_ASSIGN_OR_RETURN(Json node, FetchNode());
  const Json state = node.value("state", Json());
  if (state != Json("READY")) {
    return absl::FailedPreconditionError(absl::StrCat(
        "TPU \"", tpu_, "\" is not yet ready; state: \"",
        state.is_null() ? "None" : JsonToText(state),
        "\" (wait until the node is READY; check it with `gcloud compute tpus "
        "describe`)"));
  }
  std::vector<TpuNetworkEndpoint> out;
  if (node.contains("networkEndpoints")) {
    const Json& eps = node["networkEndpoints"];
    if (!eps.is_array()) {
      return absl::InternalError(absl::StrCat(
          "TPU \"", tpu_,
          "\": networkEndpoints is not a list: ", JsonPreview(eps)));
    }
    for (const Json& ep : eps) {
      if (!ep.is_object() || !ep.contains("ipAddress")) {
        return absl::InternalError(absl::StrCat(
            "TPU \"", tpu_,
            "\": a network endpoint without ipAddress: ", JsonPreview(ep)));
      }
      TpuNetworkEndpoint e;
      e.ip_address = JsonToText(ep["ipAddress"]);
      e.port = JsonToText(ep.value("port", Json(kDefaultTpuEndpointPort)));
      e.raw = ep;
      out.push_back(std::move(e));
    }
    return out;
  }
  if (!node.contains("ipAddress") || !node.contains("port")) {
    return absl::InternalError(
        absl::StrCat("TPU \"", tpu_,
                     "\": the node has neither networkEndpoints nor "
                     "ipAddress and port: ",
                     JsonPreview(node)));
  }
  TpuNetworkEndpoint e;
  e.ip_address = JsonToText(node["ipAddress"]);
  e.port = JsonToText(node["port"]);
  e.raw = Json{{"ipAddress", node["ipAddress"]}, {"port", node["port"]}};
  out.push_back(std::move(e));
  return out;
}

absl::StatusOr<bool> CloudTpuClient::Recoverable() const {
  if (!use_api_) return true;
  COHORT_ASSIGN_OR_RETURN(Json node, FetchNode());
  const Json state = node.value("state", Json());
  if (state == Json("TERMINATED") || state == Json("PREEMPTED")) return false;
  const Json symptoms = node.value("symptoms", Json::array());
  if (!symptoms.is_array()) return true;
  auto recent = [&](const char* type) {
    for (auto it = symptoms.rbegin(); it != symptoms.rend(); ++it) {
      if (!it->is_object() || it->value("symptomType", Json()) != Json(type)) {
        continue;
      }
      std::string created = JsonToText(it->value("createTime", Json("")));
      created = created.substr(0, created.find('.'));
      created = std::string(absl::StripSuffix(created, "Z"));
      absl::Time t;
      std::string err;
      if (!absl::ParseTime("%Y-%m-%dT%H:%M:%S", created, absl::UTCTimeZone(),
                           &t, &err)) {
        continue;
      }
      if (env_->Now() - t < kOomEventCoolTime) {
        COHORT_LOG(WARNING) << "TPU \"" << tpu_ << "\" had a " << type
                            << " symptom at " << created;
        return true;
      }
    }
    return false;
  };
  if (options_.runtime_oom_exit && recent("OUT_OF_MEMORY")) return false;
  if (options_.hbm_oom_exit && recent("HBM_OUT_OF_MEMORY")) return false;
  return true;
}

absl::StatusOr<std::string> CloudTpuClient::LocalIp() const {
  return metadata_.LocalIp();
}

}  // namespace cohort
