#include "cohort/cluster/resolvers/testing/fake_http_server.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace cohort::testing {

FakeHttpServer::FakeHttpServer() {
  // Recorded before routing, so a request is in the log before its answer
  // reaches the client.
  server_.set_pre_routing_handler(
      [this](const httplib::Request& req, httplib::Response&) {
        std::vector<std::string> params;
        for (const auto& [k, v] : req.params)
          params.push_back(absl::StrCat(k, "=", v));
        std::string line = absl::StrCat(req.method, " ", req.path);
        if (!params.empty())
          absl::StrAppend(&line, "?", absl::StrJoin(params, "&"));
        absl::MutexLock lock(&mu_);
        requests_.push_back(std::move(line));
        return httplib::Server::HandlerResponse::Unhandled;
      });
  server_.set_read_timeout(5, 0);
  server_.set_write_timeout(5, 0);
}

FakeHttpServer::~FakeHttpServer() { Stop(); }

absl::Status FakeHttpServer::Start() {
  port_ = server_.bind_to_any_port("127.0.0.1");
  if (port_ < 0) {
    return absl::InternalError("fake HTTP server: cannot bind 127.0.0.1:0");
  }
  thread_ = std::thread([this] { server_.listen_after_bind(); });
  // httplib's stop() is a no-op until the accept loop runs, so wait for it
  // (bounded) to make an immediate Stop() safe.
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (!server_.is_running()) {
    if (absl::Now() > deadline) {
      return absl::InternalError(
          "fake HTTP server: the accept loop did not start within 10s");
    }
    absl::SleepFor(absl::Milliseconds(1));
  }
  return absl::OkStatus();
}

void FakeHttpServer::Stop() {
  if (thread_.joinable()) {
    server_.stop();
    thread_.join();
  }
}

std::string FakeHttpServer::base_url() const {
  return absl::StrCat("http://127.0.0.1:", port_);
}

std::vector<std::string> FakeHttpServer::requests() const {
  absl::MutexLock lock(&mu_);
  return requests_;
}

int FakeHttpServer::request_count() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(requests_.size());
}

void FakeHttpServer::Reply(httplib::Response& res, int status,
                           const Json& json) {
  res.status = status;
  res.set_content(json.dump(), "application/json");
}

void FakeHttpServer::ReplyError(httplib::Response& res, int status,
                                const std::string& message) {
  Reply(res, status,
        Json{{"error",
              {{"code", status},
               {"message", message},
               {"status", status == 404 ? "NOT_FOUND" : "ERROR"}}}});
}

}  // namespace cohort::testing
