// FramedServer with several services on one listener (framed_server.h,
// "Several services, one port"): the identity a client proves in its
// handshake picks the handler.
#include <atomic>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "cohort/rpc/framed_client.h"
#include "cohort/rpc/framed_server.h"
#include "gtest/gtest.h"

namespace cohort::rpc {
namespace {

constexpr char kToken[] = "routes-token";
constexpr absl::Duration kWait = absl::Seconds(20);

// Answers every request with its own name and the request.
class NamedHandler : public FramedServer::Handler {
 public:
  explicit NamedHandler(std::string name) : name_(std::move(name)) {}
  void OnRequest(const std::shared_ptr<FramedConnection>& c,
                 std::string request) override {
    c->Reply(absl::StatusCode::kOk, absl::StrCat(name_, ":", request));
  }
  void OnClose(const std::shared_ptr<FramedConnection>&) override {
    closes.fetch_add(1);
  }
  std::atomic<int> closes{0};

 private:
  const std::string name_;
};

std::unique_ptr<FramedServer> Start(const std::string& token,
                                    NamedHandler* main, NamedHandler* other) {
  FramedServerOptions options;
  options.job_token = token;
  options.insecure = token.empty();
  options.identity = "main service";
  auto server = FramedServer::Start(options, main, {{"other service", other}});
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? std::move(server).value() : nullptr;
}

absl::StatusOr<std::string> Ask(const FramedServer& server,
                                const std::string& token,
                                const std::string& identity) {
  auto client = FramedClient::Connect(
      server.address(), token, absl::Now() + kWait, kDefaultMaxFrame, identity);
  if (!client.ok()) return client.status();
  return (*client)->Call("ping", absl::Now() + kWait);
}

TEST(FramedRoutesTest, TheProvenIdentityPicksTheHandler) {
  NamedHandler main("main"), other("other");
  auto server = Start(kToken, &main, &other);
  ASSERT_NE(server, nullptr);
  EXPECT_EQ(*Ask(*server, kToken, "main service"), "main:ping");
  EXPECT_EQ(*Ask(*server, kToken, "other service"), "other:ping");
  // An identity the server does not serve, or a wrong token for one it
  // does, is refused in the handshake: no handler sees the peer.
  EXPECT_TRUE(absl::IsUnauthenticated(
      Ask(*server, kToken, "a third service").status()));
  EXPECT_TRUE(absl::IsUnauthenticated(
      Ask(*server, "wrong-token", "other service").status()));
  server.reset();
  // Each handler was told of its own connections' end, and only those.
  EXPECT_EQ(main.closes.load(), 1);
  EXPECT_EQ(other.closes.load(), 1);
}

TEST(FramedRoutesTest, WithoutATokenTheProofStillRoutes) {
  NamedHandler main("main"), other("other");
  auto server = Start("", &main, &other);
  ASSERT_NE(server, nullptr);
  EXPECT_EQ(*Ask(*server, "", "other service"), "other:ping");
  EXPECT_EQ(*Ask(*server, "", "main service"), "main:ping");
  // Without a token the server lets everyone in, and a hello for an
  // unknown identity goes to its own service; that service's proof names
  // it, so a client that meant another server refuses it and sends nothing.
  absl::StatusOr<std::string> stranger = Ask(*server, "", "a third service");
  EXPECT_TRUE(absl::IsUnauthenticated(stranger.status())) << stranger.status();
}

TEST(FramedRoutesTest, RoutesMustBeDistinctAndHaveHandlers) {
  NamedHandler main("main"), other("other");
  FramedServerOptions options;
  options.job_token = kToken;
  options.identity = "main service";
  EXPECT_TRUE(absl::IsInvalidArgument(
      FramedServer::Start(options, &main, {{"main service", &other}})
          .status()));
  EXPECT_TRUE(absl::IsInvalidArgument(
      FramedServer::Start(options, &main, {{"x", &other}, {"x", &other}})
          .status()));
  EXPECT_TRUE(absl::IsInvalidArgument(
      FramedServer::Start(options, &main, {{"x", nullptr}}).status()));
}

}  // namespace
}  // namespace cohort::rpc
