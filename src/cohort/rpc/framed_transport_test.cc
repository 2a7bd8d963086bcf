// FramedServer and FramedClient over real loopback sockets, including the
// hostile peers the server must survive: no token, a wrong token, oversized
// frames, silent connections, connection floods and clients that never read.
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "cohort/rpc/coding.h"
#include "cohort/rpc/framed_client.h"
#include "cohort/rpc/framed_server.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort::rpc {
namespace {

constexpr char kToken[] = "s3cret-job-token";
constexpr absl::Duration kWait = absl::Seconds(20);

// Echoes each request; "big:N" answers N bytes. Counts what it sees.
class EchoHandler : public FramedServer::Handler {
 public:
  void OnRequest(const std::shared_ptr<FramedConnection>& c,
                 std::string request) override {
    requests.fetch_add(1);
    if (request.rfind("big:", 0) == 0) {
      c->Reply(absl::StatusCode::kOk,
               std::string(std::stoul(request.substr(4)), 'b'));
    } else if (request == "fail") {
      c->Reply(absl::StatusCode::kFailedPrecondition, "asked to fail");
    } else {
      c->Reply(absl::StatusCode::kOk, request);
    }
  }
  void OnClose(const std::shared_ptr<FramedConnection>&) override {
    closes.fetch_add(1);
  }
  std::atomic<int> requests{0};
  std::atomic<int> closes{0};
};

std::unique_ptr<FramedServer> StartServer(EchoHandler* handler,
                                          FramedServerOptions options = {}) {
  if (options.job_token.empty() && !options.insecure) {
    options.job_token = kToken;
  }
  options.name = "test server";
  auto server = FramedServer::Start(options, handler);
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? std::move(server).value() : nullptr;
}

// A raw TCP client for hostile tests.
UniqueFd RawConnect(const std::string& address) {
  auto fd = ConnectTcp(address, absl::Now() + kWait);
  EXPECT_TRUE(fd.ok()) << fd.status();
  return fd.ok() ? std::move(fd).value() : UniqueFd();
}

void RawWrite(int fd, const std::string& bytes) {
  ASSERT_EQ(send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(bytes.size()));
}

// Reads until EOF (true) or the deadline (false), discarding data.
bool WaitForEof(int fd, absl::Duration within) {
  const absl::Time deadline = absl::Now() + within;
  char buf[65536];
  while (absl::Now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n == 0 || (n < 0 && errno == ECONNRESET)) return true;
  }
  return false;
}

// Reads one frame from a raw fd (blocking, test only).
std::string RawReadFrame(int fd) {
  FrameReader reader(kDefaultMaxFrame);
  std::string payload;
  char c;
  while (reader.Next(&payload) != FrameReader::Result::kFrame) {
    if (read(fd, &c, 1) != 1) return "<eof>";
    reader.Append(&c, 1);
  }
  return payload;
}

// Authenticates a raw connection like FramedClient does.
void RawHandshake(int fd, const std::string& token) {
  absl::StatusOr<std::string> nonce = ParseGreeting(RawReadFrame(fd));
  ASSERT_TRUE(nonce.ok()) << nonce.status();
  std::string hello;
  AppendFrame(&hello, HelloProof(token, *nonce));
  RawWrite(fd, hello);
  ASSERT_TRUE(ParseReply(RawReadFrame(fd)).ok());
}

template <typename Pred>
bool WaitUntil(Pred pred, absl::Duration within = kWait) {
  const absl::Time deadline = absl::Now() + within;
  while (!pred()) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(2));  // polling a condition, not timing
  }
  return true;
}

// A server that authenticates a client and then never reads again (a hung
// or stopped peer): a large request fills the socket buffers. An impostor
// (`prove` false) accepts any hello without proving it knows the token.
class NeverReadingServer {
 public:
  explicit NeverReadingServer(const std::string& token, bool prove = true)
      : prove_(prove) {
    auto listener = ListenTcp("127.0.0.1");
    EXPECT_TRUE(listener.ok()) << listener.status();
    address_ = listener->address;
    listen_fd_ = std::move(listener->fd);
    thread_ = std::thread([this, token] { Serve(token); });
  }
  ~NeverReadingServer() {
    done_.store(true);
    thread_.join();
  }
  const std::string& address() const { return address_; }

 private:
  void Serve(const std::string& token) {
    pollfd p{listen_fd_.get(), POLLIN, 0};
    while (!done_.load() && poll(&p, 1, 10) == 0) {
    }
    if (done_.load()) return;
    UniqueFd conn(accept(listen_fd_.get(), nullptr, nullptr));
    ASSERT_TRUE(conn.valid());
    const std::string nonce = RandomNonce();
    std::string out;
    AppendFrame(&out, GreetingPayload(nonce));
    ASSERT_EQ(write(conn.get(), out.data(), out.size()),
              static_cast<ssize_t>(out.size()));
    // The hello: a 4-byte length, the proof and the client's nonce.
    char hello[4 + kProofBytes + kNonceBytes];
    size_t got = 0;
    while (got < sizeof(hello) && !done_.load()) {
      pollfd r{conn.get(), POLLIN, 0};
      if (poll(&r, 1, 10) <= 0) continue;
      const ssize_t n = read(conn.get(), hello + got, sizeof(hello) - got);
      if (n <= 0) return;
      got += static_cast<size_t>(n);
    }
    const absl::string_view payload(hello + 4, kProofBytes + kNonceBytes);
    EXPECT_TRUE(VerifyHello(token, nonce, payload));
    out.clear();
    AppendReplyFrame(
        &out, absl::StatusCode::kOk,
        prove_ ? ServerProof(token, nonce, HelloClientNonce(payload)) : "");
    ASSERT_EQ(write(conn.get(), out.data(), out.size()),
              static_cast<ssize_t>(out.size()));
    // From here on: never read. Held open until the test ends.
    while (!done_.load()) absl::SleepFor(absl::Milliseconds(5));
  }

  const bool prove_;
  std::string address_;
  UniqueFd listen_fd_;
  std::atomic<bool> done_{false};
  std::thread thread_;
};

// Something else bound the port and answers like a server without knowing
// the token: the client refuses it before sending any request.
TEST(FramedTransportTest, AServerWithoutTheTokenIsRefusedByTheClient) {
  NeverReadingServer impostor("tok", /*prove=*/false);
  auto client = FramedClient::Connect(impostor.address(), "tok",
                                      absl::Now() + absl::Seconds(10));
  EXPECT_EQ(client.status().code(), absl::StatusCode::kUnauthenticated)
      << client.status();
  EXPECT_THAT(std::string(client.status().message()),
              ::testing::HasSubstr("did not prove it knows the job token"));
}

// A process on a dead server's port relays a client's handshake to another
// live server of the job (same token) and passes every byte both ways. The
// proofs bind the server each side means, so the live server refuses a
// hello meant for the dead one, and no request of the client reaches it.
TEST(FramedTransportTest, AHandshakeRelayedToAnotherServerIsRefused) {
  EchoHandler live_handler;
  FramedServerOptions options;
  options.identity = "server B";
  auto live = StartServer(&live_handler, options);
  ASSERT_NE(live, nullptr);
  absl::StatusOr<Listener> squatter = ListenTcp("127.0.0.1", 0);
  ASSERT_TRUE(squatter.ok()) << squatter.status();
  std::atomic<bool> stop{false};
  std::thread relay([&] {
    // One connection, relayed to the live server until either side closes
    // or the test ends.
    int victim = -1;
    while (!stop.load() && victim < 0) {
      pollfd p{squatter->fd.get(), POLLIN, 0};
      if (poll(&p, 1, 50) > 0) {
        victim = accept4(squatter->fd.get(), nullptr, nullptr, SOCK_CLOEXEC);
      }
    }
    if (victim < 0) return;
    UniqueFd in(victim);
    absl::StatusOr<UniqueFd> out =
        ConnectTcp(live->address(), absl::Now() + kWait);
    if (!out.ok()) return;
    bool open = true;
    while (open && !stop.load()) {
      pollfd p[2] = {{in.get(), POLLIN, 0}, {out->get(), POLLIN, 0}};
      if (poll(p, 2, 50) <= 0) continue;
      for (int i = 0; i < 2 && open; ++i) {
        if (!(p[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        char buf[4096];
        const ssize_t n = read(p[i].fd, buf, sizeof(buf));
        open = n > 0 && send(p[1 - i].fd, buf, n, MSG_NOSIGNAL) == n;
      }
    }
  });
  auto client =
      FramedClient::Connect(squatter->address, kToken, absl::Now() + kWait,
                            kDefaultMaxFrame, "server A");
  stop = true;
  relay.join();
  EXPECT_EQ(client.status().code(), absl::StatusCode::kUnauthenticated)
      << client.status();
  EXPECT_EQ(live_handler.requests.load(), 0);
  // The live server itself, named right, is reachable.
  auto direct =
      FramedClient::Connect(live->address(), kToken, absl::Now() + kWait,
                            kDefaultMaxFrame, "server B");
  ASSERT_TRUE(direct.ok()) << direct.status();
}

TEST(FramedTransportTest, SendingToAPeerThatStopsReadingHonoursDeadline) {
  NeverReadingServer server("tok");
  auto client = FramedClient::Connect(server.address(), "tok",
                                      absl::Now() + absl::Seconds(10));
  ASSERT_TRUE(client.ok()) << client.status();
  // Far more than loopback's socket buffers hold.
  const std::string big(size_t{48} << 20, 'x');
  const absl::Time start = absl::Now();
  auto r = (*client)->Call(big, start + absl::Milliseconds(300));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded)
      << r.status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  EXPECT_TRUE((*client)->broken());
}

TEST(FramedTransportTest, SendingToAPeerThatStopsReadingIsCancellable) {
  NeverReadingServer server("tok");
  auto client = FramedClient::Connect(server.address(), "tok",
                                      absl::Now() + absl::Seconds(10));
  ASSERT_TRUE(client.ok()) << client.status();
  int wake[2];
  ASSERT_EQ(pipe(wake), 0);
  ASSERT_EQ(write(wake[1], "x", 1), 1);  // cancelled before it starts
  const std::string big(size_t{48} << 20, 'x');
  auto r = (*client)->Call(big, absl::InfiniteFuture(), wake[0]);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kCancelled) << r.status();
  close(wake[0]);
  close(wake[1]);
}

TEST(PickFreePortTest, PicksBindablePortsBelowTheEphemeralRange) {
  int low = 32768, high = 60999;
  std::ifstream range("/proc/sys/net/ipv4/ip_local_port_range");
  range >> low >> high;
  if (low <= 10001) {
    GTEST_SKIP() << "the ephemeral range starts at " << low
                 << ": no room below it, PickFreePort uses bind(0)";
  }
  for (int i = 0; i < 20; ++i) {
    absl::StatusOr<int> port = PickFreePort("127.0.0.1");
    ASSERT_TRUE(port.ok()) << port.status();
    EXPECT_GE(*port, 10000);
    EXPECT_LT(*port, low);  // no outgoing connection can hold it
    EXPECT_TRUE(ListenTcp("127.0.0.1", *port).ok()) << *port;
  }
  EXPECT_EQ(PickFreePort("not-an-ip").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(PickFreePortTest, PortsPickedBeforeAnyServerBindsAreDistinct) {
  // As a test cluster picks its tasks' ports before starting any server:
  // none is bound in between, so only PickFreePort's memory of its recent
  // picks keeps them apart (500 random picks from ~22,000 ports would
  // collide almost surely).
  std::set<int> picked;
  for (int i = 0; i < 500; ++i) {
    absl::StatusOr<int> port = PickFreePort("127.0.0.1");
    ASSERT_TRUE(port.ok()) << port.status();
    EXPECT_TRUE(picked.insert(*port).second)
        << "port " << *port << " picked twice (pick " << i << ")";
  }
}

TEST(PollTimeoutTest, RoundsUpClampsAndWaitsForeverOnlyForInfinity) {
  EXPECT_EQ(PollTimeoutMs(absl::InfiniteFuture()), -1);
  EXPECT_EQ(PollTimeoutMs(absl::InfinitePast()), 0);
  EXPECT_EQ(PollTimeoutMs(absl::Now() - absl::Seconds(1)), 0);
  // A far deadline (INT64_MAX-ish milliseconds) does not overflow.
  EXPECT_EQ(PollTimeoutMs(absl::Now() + absl::Hours(24 * 365 * 1000)), 1 << 30);
  const int ms = PollTimeoutMs(absl::Now() + absl::Milliseconds(1500));
  EXPECT_GE(ms, 1);  // never 0 while the deadline is ahead
  EXPECT_LE(ms, 1501);
}

TEST(FramedTransportTest, CallsAreAnsweredInOrderWithServerErrors) {
  EchoHandler handler;
  auto server = StartServer(&handler);
  ASSERT_NE(server, nullptr);
  auto client =
      FramedClient::Connect(server->address(), kToken, absl::Now() + kWait);
  ASSERT_TRUE(client.ok()) << client.status();
  for (int i = 0; i < 100; ++i) {
    auto answer = (*client)->Call(std::to_string(i), absl::Now() + kWait);
    ASSERT_TRUE(answer.ok()) << answer.status();
    EXPECT_EQ(*answer, std::to_string(i));
  }
  auto failed = (*client)->Call("fail", absl::Now() + kWait);
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(failed.status().message(), "asked to fail");
  EXPECT_FALSE((*client)->broken()) << "a server error keeps the stream usable";
  auto big = (*client)->Call("big:3000000", absl::Now() + kWait);
  ASSERT_TRUE(big.ok()) << big.status();
  EXPECT_EQ(big->size(), 3000000u);
}

TEST(FramedTransportTest, WrongOrMissingTokenIsRefusedBeforeAnyRequest) {
  EchoHandler handler;
  auto server = StartServer(&handler);
  ASSERT_NE(server, nullptr);
  for (const std::string token : {"", "wrong", "s3cret-job-tokeN"}) {
    auto client =
        FramedClient::Connect(server->address(), token, absl::Now() + kWait);
    EXPECT_EQ(client.status().code(), absl::StatusCode::kUnauthenticated)
        << "token \"" << token << "\": " << client.status();
  }
  // A raw peer that skips the handshake and sends a request frame: its
  // bytes are taken as a (wrong) proof and it is dropped.
  UniqueFd raw = RawConnect(server->address());
  RawReadFrame(raw.get());
  std::string request;
  AppendFrame(&request, "intruder request");
  RawWrite(raw.get(), request);
  EXPECT_TRUE(WaitForEof(raw.get(), kWait));
  EXPECT_EQ(handler.requests.load(), 0);
  EXPECT_EQ(handler.closes.load(), 0) << "OnClose is for accepted peers only";
}

TEST(FramedTransportTest, OversizedFrameClosesOnlyThatConnection) {
  EchoHandler handler;
  auto server = StartServer(&handler, [] {
    FramedServerOptions o;
    o.max_frame_bytes = 1 << 20;
    return o;
  }());
  ASSERT_NE(server, nullptr);
  auto good =
      FramedClient::Connect(server->address(), kToken, absl::Now() + kWait);
  ASSERT_TRUE(good.ok()) << good.status();

  // Before authenticating: a 12-byte frame announcing 2 GiB.
  UniqueFd early = RawConnect(server->address());
  std::string hostile;
  PutFixed32(&hostile, 0x7fffffffu);
  hostile += std::string(8, '\0');
  RawWrite(early.get(), hostile);
  EXPECT_TRUE(WaitForEof(early.get(), kWait));

  // After authenticating: a frame one byte over the cap.
  UniqueFd late = RawConnect(server->address());
  RawHandshake(late.get(), kToken);
  std::string over;
  PutFixed32(&over, (1u << 20) + 1);
  RawWrite(late.get(), over);
  EXPECT_TRUE(WaitForEof(late.get(), kWait));

  auto answer = (*good)->Call("still here", absl::Now() + kWait);
  ASSERT_TRUE(answer.ok()) << answer.status();
  EXPECT_EQ(*answer, "still here");
  EXPECT_TRUE(WaitUntil([&] { return handler.closes.load() == 1; }));
}

TEST(FramedTransportTest, SilentConnectionIsClosedAfterTheHandshakeTimeout) {
  EchoHandler handler;
  FramedServerOptions options;
  options.handshake_timeout = absl::Milliseconds(200);
  auto server = StartServer(&handler, options);
  ASSERT_NE(server, nullptr);
  UniqueFd silent = RawConnect(server->address());
  EXPECT_TRUE(WaitForEof(silent.get(), kWait));
  EXPECT_TRUE(WaitUntil([&] { return server->num_connections() == 0; }));
}

TEST(FramedTransportTest, ConnectionStalledMidFrameIsClosedAnIdleOneStays) {
  EchoHandler handler;
  FramedServerOptions options;
  options.frame_idle_timeout = absl::Milliseconds(300);
  auto server = StartServer(&handler, options);
  ASSERT_NE(server, nullptr);
  // Connected first and idle between frames throughout.
  UniqueFd idle = RawConnect(server->address());
  RawHandshake(idle.get(), kToken);
  UniqueFd stalled = RawConnect(server->address());
  RawHandshake(stalled.get(), kToken);
  // Two bytes of a frame's length, then nothing.
  RawWrite(stalled.get(), std::string("\x05\x00", 2));
  EXPECT_TRUE(WaitForEof(stalled.get(), kWait));
  EXPECT_TRUE(WaitUntil([&] { return server->num_connections() == 1; }));
  // The idle connection, older than the stalled one, is still served.
  std::string echo;
  AppendFrame(&echo, "still here");
  RawWrite(idle.get(), echo);
  absl::StatusOr<std::string> answer = ParseReply(RawReadFrame(idle.get()));
  ASSERT_TRUE(answer.ok()) << answer.status();
  EXPECT_EQ(*answer, "still here");
}

// A frame sent a byte at a time, each byte just inside frame_idle_timeout,
// is still closed at its deadline: it never counts as stalled, but it must
// be finished within frame_idle_timeout plus its length at the minimum
// rate.
TEST(FramedTransportTest, TrickledFrameIsClosedAtItsDeadline) {
  EchoHandler handler;
  FramedServerOptions options;
  options.frame_idle_timeout = absl::Milliseconds(300);
  auto server = StartServer(&handler, options);
  ASSERT_NE(server, nullptr);
  UniqueFd trickle = RawConnect(server->address());
  RawHandshake(trickle.get(), kToken);
  std::string frame;
  AppendFrame(&frame, std::string(200, 'x'));
  // 204 bytes at one per 100 ms would take 20 s; the deadline is 300 ms
  // plus 204 bytes at 64 KiB/s, and the check runs within another 300 ms.
  bool closed = false;
  for (size_t i = 0; i < frame.size() && !closed; ++i) {
    closed = send(trickle.get(), frame.data() + i, 1, MSG_NOSIGNAL) != 1;
    pollfd p{trickle.get(), POLLIN, 0};
    if (!closed && poll(&p, 1, 100) > 0) {
      char b;
      closed = read(trickle.get(), &b, 1) <= 0;
    }
  }
  EXPECT_TRUE(closed) << "the whole frame was let through";
  EXPECT_TRUE(WaitUntil([&] { return server->num_connections() == 0; }));
  EXPECT_EQ(handler.requests.load(), 0);
}

TEST(FramedTransportTest, HandshakeFloodEvictsTheOldestAndCapsConnections) {
  EchoHandler handler;
  FramedServerOptions options;
  options.max_unauthenticated = 2;
  options.max_connections = 3;
  auto server = StartServer(&handler, options);
  ASSERT_NE(server, nullptr);
  UniqueFd first = RawConnect(server->address());
  ASSERT_TRUE(WaitUntil([&] { return server->num_connections() == 1; }));
  UniqueFd second = RawConnect(server->address());
  ASSERT_TRUE(WaitUntil([&] { return server->num_connections() == 2; }));
  UniqueFd third = RawConnect(server->address());
  // The third handshake pushed out the oldest one.
  EXPECT_TRUE(WaitForEof(first.get(), kWait));
  EXPECT_TRUE(WaitUntil([&] { return server->num_connections() == 2; }));

  // A legitimate client still gets in (evicting another idle handshake),
  // and the total stays within max_connections.
  auto client =
      FramedClient::Connect(server->address(), kToken, absl::Now() + kWait);
  ASSERT_TRUE(client.ok()) << client.status();
  UniqueFd fourth = RawConnect(server->address());
  UniqueFd fifth = RawConnect(server->address());
  EXPECT_TRUE(WaitUntil([&] { return server->num_connections() <= 3; }));
  auto answer = (*client)->Call("ping", absl::Now() + kWait);
  ASSERT_TRUE(answer.ok()) << answer.status();
  // The loop may serve the ping before it accepts the raw connections
  // (both are queued in the kernel): wait for it to settle at the cap.
  EXPECT_TRUE(WaitUntil([&] { return server->num_connections() == 3; }))
      << server->num_connections();
}

TEST(FramedTransportTest, ClientThatNeverReadsIsDroppedAndOthersAreServed) {
  EchoHandler handler;
  FramedServerOptions options;
  options.max_queued_reply_bytes = 4 << 20;
  auto server = StartServer(&handler, options);
  ASSERT_NE(server, nullptr);
  UniqueFd hog = RawConnect(server->address());
  RawHandshake(hog.get(), kToken);
  auto good =
      FramedClient::Connect(server->address(), kToken, absl::Now() + kWait);
  ASSERT_TRUE(good.ok()) << good.status();
  // 64 requests for 1 MiB each, never reading the replies.
  std::string requests;
  for (int i = 0; i < 64; ++i) AppendFrame(&requests, "big:1048576");
  RawWrite(hog.get(), requests);
  ASSERT_TRUE(WaitUntil([&] { return handler.closes.load() == 1; }))
      << "the server must drop a client whose replies pile up";
  auto answer = (*good)->Call("ping", absl::Now() + kWait);
  ASSERT_TRUE(answer.ok()) << answer.status();
  EXPECT_EQ(*answer, "ping");
}

TEST(FramedTransportTest, ClientRefusesAnOversizedReply) {
  EchoHandler handler;
  auto server = StartServer(&handler);
  ASSERT_NE(server, nullptr);
  auto client = FramedClient::Connect(server->address(), kToken,
                                      absl::Now() + kWait, /*max_frame=*/1024);
  ASSERT_TRUE(client.ok()) << client.status();
  auto answer = (*client)->Call("big:2048", absl::Now() + kWait);
  EXPECT_EQ(answer.status().code(), absl::StatusCode::kDataLoss)
      << answer.status();
  EXPECT_TRUE((*client)->broken());
}

TEST(FramedTransportTest, ShutdownWakesABlockedCall) {
  // A handler that never replies: the call can end only by Shutdown().
  class Silent : public EchoHandler {
    void OnRequest(const std::shared_ptr<FramedConnection>&,
                   std::string) override {
      requests.fetch_add(1);
    }
  } handler;
  auto server = StartServer(&handler);
  ASSERT_NE(server, nullptr);
  auto client =
      FramedClient::Connect(server->address(), kToken, absl::Now() + kWait);
  ASSERT_TRUE(client.ok()) << client.status();
  std::thread stopper([&] {
    // Shut down only once the request is parked in the server.
    WaitUntil([&] { return handler.requests.load() == 1; });
    (*client)->Shutdown();
  });
  auto answer = (*client)->Call("never answered", absl::Now() + kWait);
  stopper.join();
  EXPECT_FALSE(answer.ok());
  EXPECT_NE(answer.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_TRUE((*client)->broken());
  EXPECT_TRUE(WaitUntil([&] { return handler.closes.load() == 1; }));
}

TEST(FramedTransportTest, NoTokenBeyondLoopbackNeedsInsecure) {
  EchoHandler handler;
  FramedServerOptions options;
  options.host = "0.0.0.0";
  auto refused = FramedServer::Start(options, &handler);
  EXPECT_TRUE(absl::IsInvalidArgument(refused.status())) << refused.status();
  EXPECT_NE(refused.status().message().find("--insecure"), std::string::npos);
  options.insecure = true;
  auto allowed = FramedServer::Start(options, &handler);
  EXPECT_TRUE(allowed.ok()) << allowed.status();
  options.insecure = false;
  options.job_token = kToken;
  auto with_token = FramedServer::Start(options, &handler);
  EXPECT_TRUE(with_token.ok()) << with_token.status();
}

TEST(FramedTransportTest, ConnectToNothingIsUnavailableNamingTheAddress) {
  auto listener = ListenTcp("127.0.0.1");
  ASSERT_TRUE(listener.ok());
  const std::string address = listener->address;
  listener->fd.reset();  // nobody listens there now
  auto client = FramedClient::Connect(address, kToken, absl::Now() + kWait);
  EXPECT_EQ(client.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(client.status().message().find(address), std::string::npos);
}

// Answers payload requests: "payload:N" sends N patterned bytes zero-copy
// (recording a weak reference to the buffer), "huge" announces 2^40 bytes,
// "trunc" announces 1000 and sends 15 before closing, "fail" is an error.
class PayloadHandler : public FramedServer::Handler {
 public:
  void OnRequest(const std::shared_ptr<FramedConnection>& c,
                 std::string request) override {
    if (request.rfind("payload:", 0) == 0) {
      auto bytes =
          std::make_shared<std::string>(std::stoul(request.substr(8)), '\0');
      for (size_t i = 0; i < bytes->size(); ++i) (*bytes)[i] = char(i * 7);
      {
        absl::MutexLock lock(&mu);
        last_buffer = bytes;
      }
      FramedConnection::Payload payload;
      payload.data = bytes->data();
      payload.size = bytes->size();
      payload.keepalive = std::move(bytes);
      c->ReplyWithPayload("hdr", std::move(payload));
    } else if (request == "huge" || request == "trunc") {
      std::string body;
      PutFixed64(&body, request == "huge" ? uint64_t{1} << 40 : 1000);
      c->Reply(absl::StatusCode::kOk, body + "hdr");
      if (request == "trunc") {
        c->Reply(absl::StatusCode::kOk, "0123456789");  // 15 raw bytes
        c->Close("test: truncating a payload");
      }
    } else if (request == "fail") {
      c->Reply(absl::StatusCode::kNotFound, "no such tensor");
    } else {
      c->Reply(absl::StatusCode::kOk, request);
    }
  }
  void OnClose(const std::shared_ptr<FramedConnection>&) override {}
  absl::Mutex mu;
  std::weak_ptr<std::string> last_buffer ABSL_GUARDED_BY(mu);
};

// A sink that allocates what the header announced, counting its calls.
struct TestSink {
  std::string data;
  int calls = 0;
  FramedClient::PayloadSink Get() {
    return
        [this](absl::string_view header, uint64_t n) -> absl::StatusOr<char*> {
          ++calls;
          if (header != "hdr") return absl::DataLossError("bad header");
          data.resize(n);
          return data.data();
        };
  }
};

std::unique_ptr<FramedServer> StartPayloadServer(
    PayloadHandler* handler, FramedServerOptions options = {}) {
  options.job_token = kToken;
  options.name = "payload server";
  auto server = FramedServer::Start(options, handler);
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? std::move(server).value() : nullptr;
}

TEST(FramedPayloadTest, LargePayloadArrivesIntactPastTheQueueCapAndIsReleased) {
  PayloadHandler handler;
  FramedServerOptions options;
  // One payload larger than the queue cap still passes (empty queue).
  options.max_queued_reply_bytes = 1 << 20;
  auto server = StartPayloadServer(&handler, options);
  ASSERT_NE(server, nullptr);
  auto client =
      FramedClient::Connect(server->address(), kToken, absl::Now() + kWait);
  ASSERT_TRUE(client.ok()) << client.status();
  for (size_t size : {size_t{64} << 20, size_t{0}, size_t{3}}) {
    TestSink sink;
    auto header = (*client)->CallWithPayload(absl::StrCat("payload:", size),
                                             sink.Get(), absl::Now() + kWait);
    ASSERT_TRUE(header.ok()) << header.status();
    EXPECT_EQ(*header, "hdr");
    ASSERT_EQ(sink.data.size(), size);
    bool intact = true;
    for (size_t i = 0; i < size && intact; ++i) {
      intact = sink.data[i] == char(i * 7);
    }
    EXPECT_TRUE(intact) << "payload of " << size << " bytes corrupted";
    // The server drops its reference once the kernel has the bytes.
    EXPECT_TRUE(WaitUntil([&] {
      absl::MutexLock lock(&handler.mu);
      return handler.last_buffer.expired();
    }));
  }
  // The stream is still in step for ordinary calls.
  auto echo = (*client)->Call("plain", absl::Now() + kWait);
  ASSERT_TRUE(echo.ok()) << echo.status();
  EXPECT_EQ(*echo, "plain");
}

TEST(FramedPayloadTest, ServerErrorKeepsTheClientUsable) {
  PayloadHandler handler;
  auto server = StartPayloadServer(&handler);
  ASSERT_NE(server, nullptr);
  auto client =
      FramedClient::Connect(server->address(), kToken, absl::Now() + kWait);
  ASSERT_TRUE(client.ok()) << client.status();
  TestSink sink;
  auto r = (*client)->CallWithPayload("fail", sink.Get(), absl::Now() + kWait);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(r.status().message(), "no such tensor");
  EXPECT_EQ(sink.calls, 0);
  EXPECT_FALSE((*client)->broken());
}

TEST(FramedPayloadTest, HugeAnnouncedPayloadIsRefusedBeforeAllocating) {
  PayloadHandler handler;
  auto server = StartPayloadServer(&handler);
  ASSERT_NE(server, nullptr);
  auto client =
      FramedClient::Connect(server->address(), kToken, absl::Now() + kWait);
  ASSERT_TRUE(client.ok()) << client.status();
  TestSink sink;
  auto r = (*client)->CallWithPayload("huge", sink.Get(), absl::Now() + kWait);
  EXPECT_TRUE(absl::IsDataLoss(r.status())) << r.status();
  EXPECT_NE(r.status().message().find(server->address()), std::string::npos)
      << r.status();
  EXPECT_EQ(sink.calls, 0);
  EXPECT_TRUE((*client)->broken());
}

TEST(FramedPayloadTest, TruncatedPayloadIsUnavailable) {
  PayloadHandler handler;
  auto server = StartPayloadServer(&handler);
  ASSERT_NE(server, nullptr);
  auto client =
      FramedClient::Connect(server->address(), kToken, absl::Now() + kWait);
  ASSERT_TRUE(client.ok()) << client.status();
  TestSink sink;
  auto r = (*client)->CallWithPayload("trunc", sink.Get(), absl::Now() + kWait);
  EXPECT_TRUE(absl::IsUnavailable(r.status())) << r.status();
  EXPECT_NE(r.status().message().find("truncated"), std::string::npos)
      << r.status();
  EXPECT_TRUE((*client)->broken());
}

TEST(FramedPayloadTest, SinkRefusalBreaksTheClientAndTheServerSurvives) {
  PayloadHandler handler;
  auto server = StartPayloadServer(&handler);
  ASSERT_NE(server, nullptr);
  auto client =
      FramedClient::Connect(server->address(), kToken, absl::Now() + kWait);
  ASSERT_TRUE(client.ok()) << client.status();
  FramedClient::PayloadSink refuse = [](absl::string_view,
                                        uint64_t) -> absl::StatusOr<char*> {
    return absl::ResourceExhaustedError("too big for this test");
  };
  auto r =
      (*client)->CallWithPayload("payload:100", refuse, absl::Now() + kWait);
  EXPECT_TRUE(absl::IsResourceExhausted(r.status())) << r.status();
  EXPECT_TRUE((*client)->broken());
  // Not a payload reply at all (a plain echo of 3 bytes) is DataLoss.
  auto other =
      FramedClient::Connect(server->address(), kToken, absl::Now() + kWait);
  ASSERT_TRUE(other.ok()) << other.status();
  TestSink sink;
  auto plain =
      (*other)->CallWithPayload("abc", sink.Get(), absl::Now() + kWait);
  EXPECT_TRUE(absl::IsDataLoss(plain.status())) << plain.status();
  // A wrong token never reaches a payload call.
  auto wrong =
      FramedClient::Connect(server->address(), "wrong", absl::Now() + kWait);
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kUnauthenticated);
}

}  // namespace
}  // namespace cohort::rpc
