#include "cohort/cluster/resolvers/testing/fake_tpu_server.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

namespace cohort::testing {

FakeTpuServer::FakeTpuServer(std::optional<std::string> required_token,
                             std::optional<TlsServerCertificate> tls)
    : FakeHttpServer(std::move(tls)),
      required_token_(std::move(required_token)) {
  server().Get(R"(/v1/(projects/[^/]+/locations/[^/]+/nodes/[^/]+))",
               [this](const httplib::Request& req, httplib::Response& res) {
                 if (required_token_.has_value() &&
                     req.get_header_value("Authorization") !=
                         absl::StrCat("Bearer ", *required_token_)) {
                   ReplyError(res, 401,
                              "Request is missing required authentication "
                              "credential.");
                   return;
                 }
                 const std::string name = req.matches[1];
                 absl::MutexLock lock(&mu_);
                 auto it = nodes_.find(name);
                 if (it == nodes_.end()) {
                   ReplyError(
                       res, 404,
                       absl::StrCat("Resource '", name, "' was not found"));
                   return;
                 }
                 Reply(res, 200, it->second);
               });
}

void FakeTpuServer::SetNode(const std::string& full_name, Json node) {
  absl::MutexLock lock(&mu_);
  nodes_[full_name] = std::move(node);
}

std::string FakeTpuServer::api_url() const {
  return absl::StrCat(base_url(), "/v1");
}

}  // namespace cohort::testing
