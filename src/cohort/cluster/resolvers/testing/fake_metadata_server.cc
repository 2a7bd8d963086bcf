#include "cohort/cluster/resolvers/testing/fake_metadata_server.h"

#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace cohort::testing {

FakeMetadataServer::FakeMetadataServer(std::string token)
    : token_(std::move(token)) {
  server().Get(R"(/computeMetadata/v1/(.*))", [this](
                                                  const httplib::Request& req,
                                                  httplib::Response& res) {
    const std::string path = req.matches[1];
    absl::MutexLock lock(&mu_);
    if (fail_all_.has_value()) {
      res.status = 500;
      res.set_content(*fail_all_, "text/plain");
      return;
    }
    if (req.get_header_value("Metadata-Flavor") != "Google") {
      ++rejected_;
      res.status = 403;
      res.set_content("Missing Metadata-Flavor:Google header.", "text/plain");
      return;
    }
    auto it = values_.find(path);
    if (it != values_.end()) {
      res.status = 200;
      res.set_content(it->second, "application/text");
      return;
    }
    if (path == "instance/service-accounts/default/token") {
      Reply(res, 200,
            Json{{"access_token", token_},
                 {"expires_in", 3599},
                 {"token_type", "Bearer"}});
      return;
    }
    res.status = 404;
    res.set_content(absl::StrCat("metadata path not found: ", path),
                    "text/plain");
  });
}

void FakeMetadataServer::Set(const std::string& path,
                             const std::string& value) {
  absl::MutexLock lock(&mu_);
  values_[path] = value;
}

void FakeMetadataServer::FailAll(std::optional<std::string> message) {
  absl::MutexLock lock(&mu_);
  fail_all_ = std::move(message);
}

int FakeMetadataServer::rejected_without_flavor() const {
  absl::MutexLock lock(&mu_);
  return rejected_;
}

}  // namespace cohort::testing
