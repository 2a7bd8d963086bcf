#include "cohort/rpc/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <fstream>
#include <unordered_set>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/random/random.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "cohort/base/status.h"

namespace cohort::rpc {

void UniqueFd::reset(int fd) {
  if (fd_ >= 0) close(fd_);
  fd_ = fd;
}

absl::Status SocketError(absl::string_view what, int err,
                         absl::string_view peer) {
  const std::string message =
      absl::StrCat(what, peer.empty() ? "" : " ", peer, ": ", strerror(err));
  switch (err) {
    case ECONNREFUSED:
    case ECONNRESET:
    case ECONNABORTED:
    case EPIPE:
    case ETIMEDOUT:
    case EHOSTUNREACH:
    case ENETUNREACH:
    case EADDRINUSE:
    case EADDRNOTAVAIL:
      return absl::UnavailableError(message);
    default:
      return absl::InternalError(message);
  }
}

absl::StatusOr<HostPort> ParseHostPort(absl::string_view address) {
  const size_t colon = address.rfind(':');
  HostPort hp;
  in_addr ignored;
  if (colon == absl::string_view::npos ||
      !absl::SimpleAtoi(address.substr(colon + 1), &hp.port) || hp.port < 0 ||
      hp.port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("address \"", address, "\" is not IPv4 host:port"));
  }
  hp.host = std::string(address.substr(0, colon));
  if (inet_pton(AF_INET, hp.host.c_str(), &ignored) != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("address \"", address, "\" is not IPv4 host:port (host \"",
                     hp.host, "\" is not a dotted IPv4 address)"));
  }
  return hp;
}

int PollTimeoutMs(absl::Time deadline) {
  if (deadline == absl::InfiniteFuture()) return -1;
  // Clamped before the +1: a far deadline is near INT64_MAX milliseconds.
  const int64_t ms = absl::ToInt64Milliseconds(deadline - absl::Now());
  return static_cast<int>(std::clamp<int64_t>(ms, -1, (1 << 30) - 1) + 1);
}

bool IsLoopbackHost(absl::string_view host) {
  if (host == "localhost" || host == "::1" || host == "[::1]") return true;
  in_addr addr;
  const std::string h(host);
  return inet_pton(AF_INET, h.c_str(), &addr) == 1 &&
         (ntohl(addr.s_addr) >> 24) == 127;
}

absl::StatusOr<Listener> ListenTcp(const std::string& host, int port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot listen on \"", host, "\": not a dotted IPv4 address"));
  }
  UniqueFd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd.valid()) return SocketError("socket() for", errno, host);
  // A server restarting on its fixed port must not wait out the TIME_WAIT of
  // its predecessor's connections (a minute). On Linux this never lets a
  // second socket listen on a port that has a listener (that would take
  // SO_REUSEPORT, which stays off), as gRPC's servers do too.
  const int one = 1;
  if (setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0) {
    return SocketError("setsockopt(SO_REUSEADDR) for", errno, host);
  }
  socklen_t len = sizeof(addr);
  if (bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      listen(fd.get(), 1024) != 0 ||
      getsockname(fd.get(), reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    return SocketError("cannot listen on", errno,
                       absl::StrCat(host, ":", port));
  }
  return Listener{std::move(fd), absl::StrCat(host, ":", ntohs(addr.sin_port))};
}

namespace {

// The kernel's ephemeral port range (what it hands to connect() and to
// bind() on port 0); Linux's default when it cannot be read.
std::pair<int, int> EphemeralPortRange() {
  std::ifstream in("/proc/sys/net/ipv4/ip_local_port_range");
  int low = 0, high = 0;
  if (in >> low >> high && 0 < low && low <= high) return {low, high};
  return {32768, 60999};
}

// The ports PickFreePort handed out lately in this process. A picked port
// stays free until its server binds it, so the bind check alone cannot stop
// a second pick before that (a cluster's tasks are all picked before any
// server starts) from returning the same port: a test cluster's worker:0
// and worker:1 were given one port, and the second server then failed to
// listen (about once in 10^4 three-task clusters). FIFO-bounded so a
// long-lived picker (a launcher) never runs out of ports.
constexpr size_t kRememberedPicks = 1024;

class RecentPicks {
 public:
  // False when `port` was handed out lately; otherwise remembers it.
  bool Claim(int port) {
    absl::MutexLock lock(&mu_);
    if (!ports_.insert(port).second) return false;
    order_.push_back(port);
    if (order_.size() > kRememberedPicks) {
      ports_.erase(order_.front());
      order_.pop_front();
    }
    return true;
  }

 private:
  absl::Mutex mu_;
  std::unordered_set<int> ports_ ABSL_GUARDED_BY(mu_);
  std::deque<int> order_ ABSL_GUARDED_BY(mu_);
};

RecentPicks& Picks() {
  static RecentPicks* picks = new RecentPicks;
  return *picks;
}

}  // namespace

absl::StatusOr<int> PickFreePort(const std::string& host) {
  // Not a port from bind(0): that one is in the ephemeral range, where any
  // outgoing connection on the machine may take it as its local port
  // before our server binds it (seen in CI: a test cluster's port taken by
  // a parallel test's connection). Below the range only another picker can
  // take it. A bind that succeeds proves it free now; Claim, that this
  // process did not hand it out already to a server not yet started.
  constexpr int kLowestPicked = 10000;
  const int below = EphemeralPortRange().first - 1;
  if (below > kLowestPicked) {
    absl::BitGen random;
    for (int attempt = 0; attempt < 64; ++attempt) {
      const int port = absl::Uniform<int>(absl::IntervalClosed, random,
                                          kLowestPicked, below);
      absl::StatusOr<Listener> listener = ListenTcp(host, port);
      if (listener.ok()) {
        if (Picks().Claim(port)) return port;
        continue;
      }
      if (absl::IsInvalidArgument(listener.status())) return listener.status();
    }
  }
  absl::Status last;
  for (int attempt = 0; attempt < 64; ++attempt) {
    absl::StatusOr<Listener> listener = ListenTcp(host);
    if (!listener.ok()) return listener.status();
    absl::StatusOr<HostPort> bound = ParseHostPort(listener->address);
    if (!bound.ok()) return bound.status();
    if (Picks().Claim(bound->port)) return bound->port;
    last = absl::UnavailableError(
        absl::StrCat("PickFreePort: bind(0) on ", host,
                     " kept returning ports this process handed out lately "
                     "(last: ",
                     bound->port, ")"));
  }
  return last;
}

void TuneTcpSocket(int fd, absl::Duration keepalive_idle) {
  // Failures only lose an optimisation (latency) or an early detection that
  // the application-level deadlines still provide, so they are not errors.
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
  int idle = std::max<int>(1, absl::ToInt64Seconds(keepalive_idle));
  int interval = 1;
  int probes = 3;
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof(interval));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &probes, sizeof(probes));
  unsigned int user_timeout_ms =
      static_cast<unsigned int>((idle + interval * probes) * 1000);
  setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout_ms,
             sizeof(user_timeout_ms));
}

// `address`'s IPv4 socket address; a host name is looked up (getaddrinfo,
// first IPv4 answer): what cluster engines give is names ("node-2:8888").
absl::StatusOr<sockaddr_in> ResolveIpv4(const std::string& address) {
  const size_t colon = address.rfind(':');
  int port = -1;
  if (colon == std::string::npos || colon == 0 ||
      !absl::SimpleAtoi(address.substr(colon + 1), &port) || port < 0 ||
      port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("address \"", address, "\" is not host:port"));
  }
  const std::string host = address.substr(0, colon);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (inet_pton(AF_INET, host.c_str(), &addr.sin_addr) == 1) return addr;
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int err = getaddrinfo(host.c_str(), nullptr, &hints, &found);
  if (err != 0 || found == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("cannot resolve host \"", host, "\" of ", address, ": ",
                     gai_strerror(err), "; check DNS or /etc/hosts"));
  }
  addr.sin_addr = reinterpret_cast<sockaddr_in*>(found->ai_addr)->sin_addr;
  freeaddrinfo(found);
  return addr;
}

absl::StatusOr<UniqueFd> ConnectTcp(const std::string& address,
                                    absl::Time deadline) {
  COHORT_ASSIGN_OR_RETURN(sockaddr_in addr, ResolveIpv4(address));
  UniqueFd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd.valid()) return SocketError("socket() for", errno, address);
  // Non-blocking connect, so that the deadline bounds a SYN into a black hole.
  if (connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) !=
          0 &&
      errno != EINPROGRESS) {
    return SocketError("cannot connect to", errno, address);
  }
  while (true) {
    pollfd p{fd.get(), POLLOUT, 0};
    const int r = poll(&p, 1, PollTimeoutMs(deadline));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return SocketError("poll() while connecting to", errno, address);
    if (r == 0) {
      return absl::UnavailableError(
          absl::StrCat("cannot connect to ", address,
                       ": no answer by the "
                       "deadline (is the server running and reachable?)"));
    }
    int err = 0;
    socklen_t len = sizeof(err);
    getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) return SocketError("cannot connect to", err, address);
    break;
  }
  const int flags = fcntl(fd.get(), F_GETFL);
  fcntl(fd.get(), F_SETFL, flags & ~O_NONBLOCK);
  TuneTcpSocket(fd.get());
  return fd;
}

std::string PeerName(int fd) {
  sockaddr_in addr{};
  socklen_t len = sizeof(addr);
  char text[INET_ADDRSTRLEN];
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0 ||
      addr.sin_family != AF_INET ||
      inet_ntop(AF_INET, &addr.sin_addr, text, sizeof(text)) == nullptr) {
    return "unknown peer";
  }
  return absl::StrCat(text, ":", ntohs(addr.sin_port));
}

}  // namespace cohort::rpc
