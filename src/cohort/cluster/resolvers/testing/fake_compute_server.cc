#include "cohort/cluster/resolvers/testing/fake_compute_server.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace cohort::testing {

FakeComputeServer::FakeComputeServer(std::optional<std::string> required_token,
                                     std::optional<TlsServerCertificate> tls)
    : FakeHttpServer(std::move(tls)),
      required_token_(std::move(required_token)) {
  auto authorized = [this](const httplib::Request& req,
                           httplib::Response& res) {
    if (required_token_.has_value() &&
        req.get_header_value("Authorization") !=
            absl::StrCat("Bearer ", *required_token_)) {
      ReplyError(res, 401,
                 "Request is missing required authentication "
                 "credential.");
      return false;
    }
    return true;
  };
  server().Post(
      R"(/compute/v1/projects/([^/]+)/zones/([^/]+)/instanceGroups/([^/]+)/listInstances)",
      [this, authorized](const httplib::Request& req, httplib::Response& res) {
        if (!authorized(req, res)) return;
        const std::string project = req.matches[1], zone = req.matches[2],
                          group = req.matches[3];
        Json body = Json::parse(req.body, nullptr, /*allow_exceptions=*/false);
        if (!body.is_object() || body.value("instanceState", "") != "RUNNING") {
          ReplyError(res, 400,
                     absl::StrCat("expected body {\"instanceState\": "
                                  "\"RUNNING\"}, got ",
                                  req.body));
          return;
        }
        int page = 0;
        if (req.has_param("pageToken") &&
            !absl::SimpleAtoi(req.get_param_value("pageToken"), &page)) {
          ReplyError(res, 400, "Invalid value for field 'pageToken'");
          return;
        }
        absl::MutexLock lock(&mu_);
        auto it = groups_.find(group);
        if (it == groups_.end()) {
          ReplyError(
              res, 404,
              absl::StrCat("The resource 'projects/", project, "/zones/", zone,
                           "/instanceGroups/", group, "' was not found"));
          return;
        }
        const auto& pages = it->second;
        Json out = {
            {"kind", "compute#instanceGroupsListInstances"},
            {"id", absl::StrCat("projects/", project, "/zones/", zone,
                                "/instanceGroups/", group, "/listInstances")}};
        if (page < 0 || page > static_cast<int>(pages.size())) {
          ReplyError(res, 400, "Invalid value for field 'pageToken'");
          return;
        }
        if (page < static_cast<int>(pages.size()) && !pages[page].empty()) {
          Json items = Json::array();
          for (const std::string& url : pages[page]) {
            items.push_back({{"instance", url}, {"status", "RUNNING"}});
          }
          out["items"] = std::move(items);
        }
        if (page + 1 < static_cast<int>(pages.size())) {
          out["nextPageToken"] = absl::StrCat(page + 1);
        }
        Reply(res, 200, out);
      });
  server().Get(
      R"(/compute/v1/projects/([^/]+)/zones/([^/]+)/instances/([^/]+))",
      [this, authorized](const httplib::Request& req, httplib::Response& res) {
        if (!authorized(req, res)) return;
        const std::string name = req.matches[3];
        absl::MutexLock lock(&mu_);
        auto it = instances_.find(name);
        if (it == instances_.end()) {
          ReplyError(res, 404,
                     absl::StrCat("The resource 'projects/",
                                  std::string(req.matches[1]), "/zones/",
                                  std::string(req.matches[2]), "/instances/",
                                  name, "' was not found"));
          return;
        }
        Json instance = it->second;
        if (instance.is_object() && !instance.contains("name")) {
          instance["name"] = name;
        }
        Reply(res, 200, instance);
      });
}

void FakeComputeServer::SetInstanceGroup(
    const std::string& group, std::vector<std::vector<std::string>> pages) {
  absl::MutexLock lock(&mu_);
  groups_[group] = std::move(pages);
}

void FakeComputeServer::SetInstance(const std::string& name, Json instance) {
  absl::MutexLock lock(&mu_);
  instances_[name] = std::move(instance);
}

std::string FakeComputeServer::api_url() const {
  return absl::StrCat(base_url(), "/compute/v1");
}

}  // namespace cohort::testing
