#include "cohort/barrier/barrier_tcp_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "cohort/barrier.pb.h"
#include "cohort/barrier/barrier_sync_proto.h"
#include "cohort/base/logging.h"

namespace cohort::barrier {
namespace {

void PutU32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i)
    out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
uint32_t GetU32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i)
    v |= static_cast<uint32_t>(static_cast<uint8_t>(p[i])) << (8 * i);
  return v;
}
// Requests larger than this are refused (a bad client, not a barrier).
constexpr uint32_t kMaxFrame = 64u << 20;

// Writes all of `data`; on a full socket buffer waits up to a second.
bool WriteAll(int fd, const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n =
        send(fd, data.data() + done, data.size() - done, MSG_NOSIGNAL);
    if (n > 0) {
      done += static_cast<size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{fd, POLLOUT, 0};
      if (poll(&p, 1, 1000) <= 0) return false;
    } else {
      return false;
    }
  }
  return true;
}

}  // namespace

struct BarrierTcpServer::Connection {
  int fd = -1;
  std::string buffer;  // loop thread only
  absl::Mutex mu;
  bool closed ABSL_GUARDED_BY(mu) = false;
  uint64_t pending ABSL_GUARDED_BY(mu) = 0;  // 0: none

  void Reply(uint64_t request_id, const absl::StatusOr<SyncResult>& result) {
    std::string frame;
    std::string payload;
    if (result.ok()) {
      cohort::BarrierSyncResponse response;
      for (const std::string& m : *result) response.add_messages(m);
      response.SerializeToString(&payload);
      frame.push_back(0);
    } else {
      payload = std::string(result.status().message());
      frame.push_back(static_cast<char>(result.status().code()));
    }
    PutU32(frame, static_cast<uint32_t>(payload.size()));
    frame += payload;
    absl::MutexLock lock(&mu);
    if (pending == request_id) pending = 0;
    if (!closed) WriteAll(fd, frame);
  }
};

absl::StatusOr<std::unique_ptr<BarrierTcpServer>> BarrierTcpServer::Start(
    BarrierCoordinator* coordinator, const std::string& host) {
  std::unique_ptr<BarrierTcpServer> s(new BarrierTcpServer());
  s->coordinator_ = coordinator;
  s->listen_fd_ =
      socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  socklen_t len = sizeof(addr);
  if (s->listen_fd_ < 0 ||
      inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1 ||
      bind(s->listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) !=
          0 ||
      listen(s->listen_fd_, 1024) != 0 ||
      getsockname(s->listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len) !=
          0) {
    return absl::UnavailableError(absl::StrCat(
        "barrier TCP server cannot listen on ", host, ":0: ", strerror(errno)));
  }
  s->address_ = absl::StrCat(host, ":", ntohs(addr.sin_port));
  s->epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  s->stop_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  for (int fd : {s->listen_fd_, s->stop_fd_}) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    epoll_ctl(s->epoll_fd_, EPOLL_CTL_ADD, fd, &ev);
  }
  BarrierTcpServer* raw = s.get();
  s->loop_ = std::thread([raw] { raw->Loop(); });
  return s;
}

BarrierTcpServer::~BarrierTcpServer() {
  const uint64_t one = 1;
  ssize_t ignored = write(stop_fd_, &one, sizeof(one));
  (void)ignored;
  if (loop_.joinable()) loop_.join();
  while (!connections_.empty()) {
    std::shared_ptr<Connection> c = connections_.begin()->second;
    Close(c);
  }
  close(listen_fd_);
  close(epoll_fd_);
  close(stop_fd_);
}

void BarrierTcpServer::Close(const std::shared_ptr<Connection>& c) {
  uint64_t pending;
  {
    absl::MutexLock lock(&c->mu);
    c->closed = true;
    pending = c->pending;
    c->pending = 0;
    epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, c->fd, nullptr);
    close(c->fd);
  }
  connections_.erase(c->fd);
  // The task went away: its parked request leaves the sync.
  if (pending != 0) coordinator_->Cancel(pending);
}

void BarrierTcpServer::OnReadable(const std::shared_ptr<Connection>& c) {
  char buf[65536];
  while (true) {
    const ssize_t n = read(c->fd, buf, sizeof(buf));
    if (n > 0) {
      c->buffer.append(buf, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    Close(c);  // EOF or error
    return;
  }
  while (c->buffer.size() >= 4) {
    const uint32_t size = GetU32(c->buffer.data());
    if (size > kMaxFrame) {
      COHORT_LOG(WARNING) << "barrier TCP server: dropping a connection that "
                             "sent a "
                          << size << "-byte frame";
      Close(c);
      return;
    }
    if (c->buffer.size() < 4 + size) break;
    cohort::BarrierSyncRequest proto;
    const bool parsed =
        proto.ParseFromArray(c->buffer.data() + 4, static_cast<int>(size));
    c->buffer.erase(0, 4 + size);
    const uint64_t id = coordinator_->NewRequestId();
    std::shared_ptr<Connection> conn = c;
    if (!parsed) {
      conn->Reply(id, absl::InvalidArgumentError(
                          "barrier TCP server: malformed sync request"));
      continue;
    }
    absl::StatusOr<SyncRequest> request = SyncRequestFromProto(std::move(proto));
    if (!request.ok()) {
      conn->Reply(id, request.status());
      continue;
    }
    {
      absl::MutexLock lock(&conn->mu);
      conn->pending = id;
    }
    coordinator_->Sync(id, *std::move(request),
                       [conn, id](absl::StatusOr<SyncResult> result) {
                         conn->Reply(id, result);
                       });
  }
}

void BarrierTcpServer::Loop() {
  epoll_event events[64];
  while (true) {
    const int n = epoll_wait(epoll_fd_, events, 64, -1);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return;
    for (int i = 0; i < n; ++i) {
      const int fd = events[i].data.fd;
      if (fd == stop_fd_) return;
      if (fd == listen_fd_) {
        while (true) {
          const int cfd = accept4(listen_fd_, nullptr, nullptr,
                                  SOCK_NONBLOCK | SOCK_CLOEXEC);
          if (cfd < 0) break;
          int one = 1;
          setsockopt(cfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
          auto c = std::make_shared<Connection>();
          c->fd = cfd;
          connections_[cfd] = c;
          epoll_event ev{};
          ev.events = EPOLLIN | EPOLLRDHUP;
          ev.data.fd = cfd;
          epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, cfd, &ev);
        }
        continue;
      }
      auto it = connections_.find(fd);
      if (it == connections_.end()) continue;
      std::shared_ptr<Connection> c = it->second;
      OnReadable(c);
    }
  }
}

absl::StatusOr<int> TcpConnect(const std::string& address) {
  const size_t colon = address.rfind(':');
  int port = 0;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  if (colon == std::string::npos ||
      !absl::SimpleAtoi(address.substr(colon + 1), &port) ||
      inet_pton(AF_INET, address.substr(0, colon).c_str(), &addr.sin_addr) !=
          1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "barrier TCP address \"", address, "\" is not IPv4 host:port"));
  }
  addr.sin_port = htons(static_cast<uint16_t>(port));
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0 ||
      connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    const int err = errno;
    if (fd >= 0) close(fd);
    return absl::UnavailableError(absl::StrCat(
        "cannot connect to the barrier coordinator at ", address, ": ",
        strerror(err), " (is `cohort launch` still running?)"));
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

absl::StatusOr<std::vector<std::string>> TcpSync(int fd, int wake_fd,
                                                 const std::string& request,
                                                 absl::Time deadline) {
  std::string frame;
  PutU32(frame, static_cast<uint32_t>(request.size()));
  frame += request;
  if (!WriteAll(fd, frame)) {
    return absl::UnavailableError(absl::StrCat(
        "lost the connection to the barrier coordinator: ", strerror(errno)));
  }
  std::string in;
  char buf[65536];
  while (true) {
    if (in.size() >= 5) {
      const uint32_t size = GetU32(in.data() + 1);
      if (in.size() >= 5 + size) {
        const auto code =
            static_cast<absl::StatusCode>(static_cast<uint8_t>(in[0]));
        if (code != absl::StatusCode::kOk) {
          return absl::Status(code, in.substr(5, size));
        }
        cohort::BarrierSyncResponse response;
        if (!response.ParseFromArray(in.data() + 5, static_cast<int>(size))) {
          return absl::InternalError(
              "malformed answer from the barrier coordinator");
        }
        return std::vector<std::string>(response.messages().begin(),
                                        response.messages().end());
      }
    }
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      return absl::DeadlineExceededError(
          "no answer from the barrier coordinator before the deadline");
    }
    pollfd p[2] = {{fd, POLLIN, 0}, {wake_fd, POLLIN, 0}};
    const int64_t ms =
        std::min<int64_t>(absl::ToInt64Milliseconds(left) + 1, 1 << 30);
    const int r = poll(p, 2, static_cast<int>(ms));
    if (r < 0 && errno == EINTR) continue;
    if (r > 0 && (p[1].revents & POLLIN)) {
      return absl::CancelledError("cancelled");
    }
    if (r > 0 && (p[0].revents & (POLLIN | POLLHUP | POLLERR))) {
      const ssize_t n = read(fd, buf, sizeof(buf));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        return absl::UnavailableError(
            "the barrier coordinator closed the connection (did `cohort "
            "launch` stop?)");
      }
      in.append(buf, static_cast<size_t>(n));
    }
  }
}

}  // namespace cohort::barrier
