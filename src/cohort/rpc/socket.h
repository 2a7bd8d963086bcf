// Sockets for cohort's own transports: an owning fd type, one builder for
// errors from syscalls, and the few TCP operations the framed transport
// needs (listen, connect with a deadline, peer names). gloo's tcp/socket.cc
// and LevelDB's PosixError are the precedent.
//
// Thread safety: free functions are thread-safe; UniqueFd is
// thread-compatible.
#ifndef COHORT_RPC_SOCKET_H_
#define COHORT_RPC_SOCKET_H_

#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace cohort::rpc {

// Owns a file descriptor and closes it on destruction.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    reset(other.release());
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() { return std::exchange(fd_, -1); }
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

// The one builder for syscall failures: "<what> <peer>: <strerror>". The
// code is Unavailable for connection-level errors (refused, reset, broken
// pipe, unreachable, timed out) and Internal otherwise.
absl::Status SocketError(absl::string_view what, int err,
                         absl::string_view peer);

// "host:port" split into its parts. InvalidArgument naming `address` when it
// is not IPv4 "a.b.c.d:port" with a port in 0..65535.
struct HostPort {
  std::string host;
  int port = 0;
};
absl::StatusOr<HostPort> ParseHostPort(absl::string_view address);

// The poll()/epoll_wait() timeout that ends at `deadline`: milliseconds from
// now rounded up (so a wait never ends just before it), 0 when it has
// passed, at most 2^30; -1 (no timeout) for absl::InfiniteFuture().
int PollTimeoutMs(absl::Time deadline);

// True for 127.0.0.0/8, "localhost" and "::1".
bool IsLoopbackHost(absl::string_view host);

// A listening, non-blocking TCP socket on host:port (port 0: the OS picks
// one), with SO_REUSEADDR (a restart need not wait for TIME_WAIT; a port
// with a listener stays refused). InvalidArgument for a host that is not a
// dotted IPv4 address; the bind's error (SocketError) otherwise.
struct Listener {
  UniqueFd fd;
  std::string address;  // "host:port" with the bound port
};
absl::StatusOr<Listener> ListenTcp(const std::string& host, int port = 0);

// A TCP port on `host` that was free a moment ago, for configurations that
// must name ports before the servers start (a launcher's TF_CONFIG, tests'
// clusters). Picked at random below the kernel's ephemeral port range (so
// no outgoing connection can take it before the server binds it) and
// checked by binding it; from bind(0) when that range leaves no room.
// Never one this process's last 1024 picks returned, so the ports picked
// for several servers before any of them binds are distinct. Errors as
// ListenTcp's.
absl::StatusOr<int> PickFreePort(const std::string& host);

// Connects to "host:port" by `deadline`, with TCP_NODELAY and keepalive.
// The host is a dotted IPv4 address or a name, looked up with getaddrinfo
// (IPv4; the lookup itself is not bounded by `deadline`). The fd is
// blocking. Unavailable naming the address when the name does not resolve
// or the connection is refused or times out; InvalidArgument for a
// malformed address.
absl::StatusOr<UniqueFd> ConnectTcp(const std::string& address,
                                    absl::Time deadline);

// Sets TCP_NODELAY, TCP keepalive and TCP_USER_TIMEOUT: a silent peer
// (a partitioned or dead host) is dropped by the kernel after about
// `keepalive_idle` + 3 probes 1 s apart, whether this side waits to read
// (keepalive) or has sent bytes that are never acknowledged (user timeout:
// without it a write stalled mid-frame retransmits for ~15 minutes).
void TuneTcpSocket(int fd, absl::Duration keepalive_idle = absl::Seconds(10));

// "a.b.c.d:port" of the peer, or "unknown peer".
std::string PeerName(int fd);

}  // namespace cohort::rpc

#endif  // COHORT_RPC_SOCKET_H_
