// One 64 MiB reply across a lab link, for lab_test.sh's `stall` test
// (behaviour 7 of docs/lab.md: a connection that stalls mid-frame when the
// link is cut is bounded by the sockets' keepalive and TCP_USER_TIMEOUT,
// named, and leaks nothing).
//
//   COHORT_JOB_TOKEN=... stall_probe serve HOST PORT
//       serves a 64 MiB payload reply to every request; prints "serving",
//       then for each connection that ends "closed: N open connection(s)"
//   COHORT_JOB_TOKEN=... stall_probe fetch HOST:PORT
//       asks once (deadline 120 s); prints "ok BYTES" or "error: MESSAGE",
//       and exits 0 or 1
#include <stdio.h>
#include <stdlib.h>

#include <memory>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/synchronization/notification.h"
#include "cohort/rpc/framed_client.h"
#include "cohort/rpc/framed_server.h"

namespace {

constexpr size_t kBytes = size_t{64} << 20;

class Serve : public cohort::rpc::FramedServer::Handler {
 public:
  explicit Serve(const cohort::rpc::FramedServer* const* server)
      : server_(server), data_(std::make_shared<std::string>(kBytes, 'x')) {}
  void OnRequest(const std::shared_ptr<cohort::rpc::FramedConnection>& c,
                 std::string request) override {
    c->ReplyWithPayload("", {data_->data(), data_->size(), data_});
  }
  void OnClose(
      const std::shared_ptr<cohort::rpc::FramedConnection>& c) override {
    // By now the server has closed its socket and no longer counts it.
    printf("closed %s: %d open connection(s)\n", c->peer().c_str(),
           (*server_)->num_connections());
    fflush(stdout);
  }

 private:
  const cohort::rpc::FramedServer* const* server_;
  std::shared_ptr<std::string> data_;
};

int RunServe(const std::string& host, int port, const std::string& token) {
  const cohort::rpc::FramedServer* server_ptr = nullptr;
  Serve handler(&server_ptr);
  cohort::rpc::FramedServerOptions o;
  o.name = "stall probe";
  o.host = host;
  o.port = port;
  o.job_token = token;
  o.max_queued_reply_bytes = kBytes + 1024;
  auto server = cohort::rpc::FramedServer::Start(o, &handler);
  if (!server.ok()) {
    fprintf(stderr, "error: %s\n", server.status().ToString().c_str());
    return 1;
  }
  server_ptr = server->get();
  printf("serving %s\n", (*server)->address().c_str());
  fflush(stdout);
  absl::Notification never;  // killed by the test when it is done
  never.WaitForNotificationWithTimeout(absl::Minutes(5));
  return 0;
}

int RunFetch(const std::string& address, const std::string& token) {
  const absl::Time deadline = absl::Now() + absl::Seconds(120);
  auto client = cohort::rpc::FramedClient::Connect(address, token, deadline);
  if (!client.ok()) {
    printf("error: %s\n", client.status().ToString().c_str());
    return 1;
  }
  (*client)->set_max_payload_bytes(kBytes);
  std::string into(kBytes, '\0');
  auto header = (*client)->CallWithPayload(
      "send",
      [&](absl::string_view, uint64_t bytes) -> absl::StatusOr<char*> {
        if (bytes != kBytes) return absl::DataLossError("wrong size");
        return into.data();
      },
      deadline);
  if (!header.ok()) {
    printf("error: %s\n", header.status().ToString().c_str());
    return 1;
  }
  printf("ok %zu\n", into.size());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const char* token = getenv("COHORT_JOB_TOKEN");
  if (token == nullptr || argc < 3) {
    fprintf(stderr,
            "usage: COHORT_JOB_TOKEN=... stall_probe serve HOST PORT | "
            "fetch HOST:PORT\n");
    return 2;
  }
  const std::string mode = argv[1];
  int port = 0;
  if (mode == "serve" && argc == 4 && absl::SimpleAtoi(argv[3], &port)) {
    return RunServe(argv[2], port, token);
  }
  if (mode == "fetch" && argc == 3) return RunFetch(argv[2], token);
  fprintf(stderr, "stall_probe: bad arguments\n");
  return 2;
}
