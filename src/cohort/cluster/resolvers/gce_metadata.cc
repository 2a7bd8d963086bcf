#include "cohort/cluster/resolvers/gce_metadata.h"

#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "cohort/base/status.h"

namespace cohort {
namespace {

constexpr char kHint[] =
    "that this runs on a GCE/Cloud TPU VM, or set GCE_METADATA_HOST, or pass "
    "the project and zone explicitly";

}  // namespace

GceMetadataClient::GceMetadataClient(Env* env, Options options)
    : http_(std::move(options.http)) {
  if (!options.base_url.empty()) {
    base_url_ = options.base_url;
  } else if (auto host = env->GetVar("GCE_METADATA_HOST");
             host && !host->empty()) {
    base_url_ = absl::StrCat("http://", *host);
  } else if (auto ip = env->GetVar("GCE_METADATA_IP"); ip && !ip->empty()) {
    base_url_ = absl::StrCat("http://", *ip);
  } else {
    base_url_ = "http://metadata.google.internal";
  }
  while (!base_url_.empty() && base_url_.back() == '/') base_url_.pop_back();
}

absl::StatusOr<std::string> GceMetadataClient::Get(
    absl::string_view path) const {
  std::string url = absl::StrCat(base_url_, "/computeMetadata/v1/",
                                 absl::StripPrefix(path, "/"));
  absl::StatusOr<std::string> value =
      http_.GetText(url, {{"Metadata-Flavor", "Google"}}, kHint);
  if (!value.ok()) {
    return Annotate(value.status(), "GCE metadata server");
  }
  return value;
}

absl::StatusOr<std::string> GceMetadataClient::ProjectId() const {
  return Get("project/project-id");
}

absl::StatusOr<std::string> GceMetadataClient::Zone() const {
  COHORT_ASSIGN_OR_RETURN(std::string zone, Get("instance/zone"));
  size_t slash = zone.rfind('/');
  if (slash != std::string::npos) zone = zone.substr(slash + 1);
  return zone;
}

absl::StatusOr<std::string> GceMetadataClient::LocalIp() const {
  return Get("instance/network-interfaces/0/ip");
}

absl::StatusOr<std::string> GceMetadataClient::AccessToken() const {
  std::string path = "instance/service-accounts/default/token";
  COHORT_ASSIGN_OR_RETURN(std::string text, Get(path));
  COHORT_ASSIGN_OR_RETURN(Json json,
                          ParseJson(text, absl::StrCat("GCE metadata ", path)));
  if (!json.is_object() || !json.contains("access_token") ||
      !json["access_token"].is_string()) {
    return absl::InternalError(absl::StrCat(
        "GCE metadata server: ", base_url_, "/computeMetadata/v1/", path,
        " has no string \"access_token\": ", JsonPreview(json)));
  }
  return json["access_token"].get<std::string>();
}

}  // namespace cohort
