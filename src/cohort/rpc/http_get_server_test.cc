#include "cohort/rpc/http_get_server.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace cohort::rpc {
namespace {

// A generous bound for what must happen "soon": the outcomes below never
// depend on it, only a broken server runs into it.
constexpr absl::Duration kBound = absl::Seconds(20);

std::unique_ptr<HttpGetServer> StartEcho(HttpGetServer::Options o) {
  auto s = HttpGetServer::Start(o, [](const HttpRequest& r) {
    HttpResponse res;
    std::string q;
    for (const auto& [k, v] : r.query) absl::StrAppend(&q, k, "=", v, ";");
    res.body = absl::StrCat(r.path, "|", q, "|",
                            r.headers.count("x-a") ? r.headers.at("x-a") : "");
    return res;
  });
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *std::move(s) : nullptr;
}

UniqueFd Connect(const HttpGetServer& s) {
  auto fd =
      ConnectTcp(absl::StrCat("127.0.0.1:", s.port()), absl::Now() + kBound);
  EXPECT_TRUE(fd.ok()) << fd.status();
  return fd.ok() ? *std::move(fd) : UniqueFd();
}

// Everything the server sends until it closes (at most kBound).
std::string ReadToClose(int fd) {
  std::string out;
  const absl::Time deadline = absl::Now() + kBound;
  while (true) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, PollTimeoutMs(deadline)) <= 0) {
      ADD_FAILURE() << "the server neither answered nor hung up";
      return out;
    }
    char buf[4096];
    ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) return out;
    out.append(buf, static_cast<size_t>(n));
  }
}

std::string Ask(const HttpGetServer& s, const std::string& request) {
  UniqueFd fd = Connect(s);
  EXPECT_EQ(send(fd.get(), request.data(), request.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(request.size()));
  return ReadToClose(fd.get());
}

TEST(HttpGetServerTest, AnswersGetWithDecodedPathQueryAndHeaders) {
  auto s = StartEcho({});
  std::string got =
      Ask(*s,
          "GET /api/v1/logs/worker%3A1?token=a%2Bb+c&x=1 HTTP/1.1\r\n"
          "Host: h\r\nX-A:  v \r\n\r\n");
  EXPECT_EQ(got,
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain; charset=utf-8\r\n"
            "Content-Length: 40\r\nConnection: close\r\n\r\n"
            "/api/v1/logs/worker:1|token=a+b c;x=1;|v");
}

TEST(HttpGetServerTest, RefusesOtherMethodsBadAndLongRequests) {
  HttpGetServer::Options o;
  o.max_request_bytes = 256;
  auto s = StartEcho(o);
  EXPECT_EQ(
      Ask(*s, "POST / HTTP/1.1\r\nContent-Length: 1\r\n\r\nx").substr(0, 31),
      "HTTP/1.1 405 Method Not Allowed");
  EXPECT_EQ(Ask(*s, "GET nope HTTP/1.1\r\n\r\n").substr(0, 24),
            "HTTP/1.1 400 Bad Request");
  EXPECT_EQ(Ask(*s, "GET /%zz HTTP/1.1\r\n\r\n").substr(0, 24),
            "HTTP/1.1 400 Bad Request");
  EXPECT_EQ(Ask(*s, "GET /%00 HTTP/1.1\r\n\r\n").substr(0, 24),
            "HTTP/1.1 400 Bad Request");
  EXPECT_EQ(Ask(*s, absl::StrCat("GET / HTTP/1.1\r\nX: ", std::string(300, 'a'),
                                 "\r\n\r\n"))
                .substr(0, 12),
            "HTTP/1.1 431");
}

TEST(HttpGetServerTest, ASlowClientIsDroppedAtTheRequestDeadline) {
  HttpGetServer::Options o;
  o.request_deadline = absl::Milliseconds(300);
  auto s = StartEcho(o);
  UniqueFd slow = Connect(*s);
  // Bytes keep coming, each well within any per-read timeout, but the
  // whole request never does: the server hangs up, having answered nothing.
  std::string got;
  for (int i = 0; i < 400; ++i) {
    if (send(slow.get(), "G", 1, MSG_NOSIGNAL) != 1) break;
    pollfd p{slow.get(), POLLIN, 0};
    if (poll(&p, 1, 50) > 0) {
      got = ReadToClose(slow.get());
      break;
    }
  }
  EXPECT_EQ(got, "");
  EXPECT_EQ(Ask(*s, "GET /ok HTTP/1.1\r\n\r\n").substr(0, 15),
            "HTTP/1.1 200 OK");
}

TEST(HttpGetServerTest, ConnectionsBeyondTheCapAreClosedAtOnce) {
  HttpGetServer::Options o;
  o.max_connections = 4;
  o.request_deadline = absl::Hours(1);  // the four idle ones stay
  auto s = StartEcho(o);
  std::vector<UniqueFd> idle;
  for (int i = 0; i < 4; ++i) idle.push_back(Connect(*s));
  // Accepted in order: the fifth finds four connections open.
  UniqueFd fifth = Connect(*s);
  EXPECT_EQ(ReadToClose(fifth.get()), "");
  // One of the four asks: it is answered.
  const std::string req = "GET /x HTTP/1.1\r\n\r\n";
  ASSERT_EQ(send(idle[0].get(), req.data(), req.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(req.size()));
  EXPECT_EQ(ReadToClose(idle[0].get()).substr(0, 15), "HTTP/1.1 200 OK");
}

TEST(HttpGetServerTest, DestructionEndsOpenConnections) {
  HttpGetServer::Options o;
  o.request_deadline = absl::Hours(1);
  auto s = StartEcho(o);
  UniqueFd idle = Connect(*s);
  // The connection is served (not just queued) before the server goes.
  const std::string partial = "GET /x HTTP/1.1\r\n";
  ASSERT_EQ(send(idle.get(), partial.data(), partial.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(partial.size()));
  s.reset();  // returns although the client never finishes its request
  EXPECT_EQ(ReadToClose(idle.get()), "");
}

TEST(HttpGetServerTest, PercentDecode) {
  std::string out;
  EXPECT_TRUE(PercentDecode("a%3Ab+c", true, &out));
  EXPECT_EQ(out, "a:b c");
  EXPECT_TRUE(PercentDecode("a+b", false, &out));
  EXPECT_EQ(out, "a+b");
  EXPECT_FALSE(PercentDecode("%4", false, &out));
  EXPECT_FALSE(PercentDecode("%g0", false, &out));
  EXPECT_FALSE(PercentDecode("%00", false, &out));
}

}  // namespace
}  // namespace cohort::rpc
