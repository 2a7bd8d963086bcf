#include "cohort/rpc/framed_server.h"

#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "cohort/base/logging.h"
#include "cohort/base/status.h"

namespace cohort::rpc {
namespace {

constexpr uint64_t kListenerTag = 0;
constexpr uint64_t kWakeTag = 1;
constexpr uint32_t kReadEvents = EPOLLIN | EPOLLRDHUP;
// Replies the loop thread queues for one connection before writing them.
constexpr size_t kMaxDeferredBytes = 64 << 10;

}  // namespace

// --- FramedConnection -----------------------------------------------------

FramedConnection::FramedConnection(FramedServer* server, int fd, uint64_t id,
                                   std::string peer, size_t max_handshake_frame)
    : server_(server),
      fd_(fd),
      id_(id),
      peer_(std::move(peer)),
      reader_(max_handshake_frame) {}

void FramedConnection::Reply(absl::StatusCode code, absl::string_view body) {
  std::string frame;
  frame.reserve(body.size() + 5);
  AppendReplyFrame(&frame, code, body);
  Send(std::move(frame), Payload());
}

void FramedConnection::ReplyTagged(uint32_t tag, absl::StatusCode code,
                                   absl::string_view body) {
  std::string frame;
  frame.reserve(body.size() + 9);
  AppendTaggedReplyFrame(&frame, tag, code, body);
  Send(std::move(frame), Payload());
}

void FramedConnection::ReplyWithPayload(absl::string_view header,
                                        Payload payload) {
  std::string frame;
  AppendPayloadReplyFrame(&frame, header, payload.size);
  Send(std::move(frame), std::move(payload));
}

void FramedConnection::Close(std::string reason) {
  {
    absl::MutexLock lock(&mu_);
    if (closed_ || broken_) return;
    MarkBrokenLocked(std::move(reason));
  }
  server_->ReportBroken(id_);
}

void FramedConnection::Send(std::string frames, Payload payload) {
  bool report = false;
  // A refused payload's reference is dropped outside the lock: it may be
  // the last one, and freeing a large buffer takes a while.
  std::shared_ptr<const void> release;
  {
    absl::MutexLock lock(&mu_);
    if (closed_ || broken_) return;
    const size_t adding = frames.size() + payload.size;
    // An empty queue always takes the reply: the cap bounds what piles up
    // behind a reader that does not read, not the size of one answer (a
    // payload is bounded by the handler's own limit).
    if (out_bytes_ > 0 &&
        out_bytes_ + adding > server_->options_.max_queued_reply_bytes) {
      MarkBrokenLocked(absl::StrCat("the client does not read its replies (",
                                    out_bytes_ + adding, " bytes queued, cap ",
                                    server_->options_.max_queued_reply_bytes,
                                    ")"));
      report = true;
      release = std::move(payload.keepalive);
    } else {
      Segment frame_segment;
      frame_segment.owned = std::move(frames);
      frame_segment.size = frame_segment.owned.size();
      out_.push_back(std::move(frame_segment));
      if (payload.size > 0) {
        Segment payload_segment;
        payload_segment.data = payload.data;
        payload_segment.size = payload.size;
        payload_segment.keepalive = std::move(payload.keepalive);
        out_.push_back(std::move(payload_segment));
      }
      out_bytes_ += adding;
      // The loop thread defers its replies (written together once the
      // event is handled) up to kMaxDeferredBytes per connection, so a
      // flood of pipelined requests cannot pile up unwritten replies.
      if (!server_->InLoopThread() || out_bytes_ >= kMaxDeferredBytes) {
        report = !FlushLocked();
      } else if (!dirty_) {
        dirty_ = true;
        server_->dirty_.push_back(id_);
      }
    }
  }
  // Outside the lock: the loop may be closing this very connection.
  if (report) server_->ReportBroken(id_);
}

void FramedConnection::MarkBrokenLocked(std::string reason) {
  broken_ = true;
  broken_reason_ = std::move(reason);
}

bool FramedConnection::FlushLocked() {
  constexpr int kMaxIov = 16;
  while (!out_.empty()) {
    // One sendmsg for the queued frames and payloads together: a payload
    // reply's small frame and its large body leave in one syscall, and the
    // body is read by the kernel straight from its owner's memory.
    iovec iov[kMaxIov];
    int count = 0;
    size_t skip = out_offset_;
    for (auto it = out_.begin(); it != out_.end() && count < kMaxIov; ++it) {
      const char* base = it->data != nullptr ? it->data : it->owned.data();
      iov[count].iov_base = const_cast<char*>(base + skip);
      iov[count].iov_len = it->size - skip;
      skip = 0;
      ++count;
    }
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = static_cast<size_t>(count);
    const ssize_t n = sendmsg(fd_, &msg, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    if (n <= 0) {
      MarkBrokenLocked(
          SocketError("cannot write a reply to", errno, peer_).ToString());
      return false;
    }
    ConsumeLocked(static_cast<size_t>(n));
  }
  const bool pending = !out_.empty();
  if (pending != want_write_) {
    // A reader too slow for the socket buffer: let the loop finish the write
    // when the socket drains, instead of blocking this (replying) thread.
    want_write_ = pending;
    epoll_event ev{};
    ev.events = kReadEvents | (pending ? EPOLLOUT : 0);
    ev.data.u64 = id_;
    epoll_ctl(server_->epoll_fd_.get(), EPOLL_CTL_MOD, fd_, &ev);
  }
  return true;
}

void FramedConnection::ConsumeLocked(size_t written) {
  out_bytes_ -= written;
  while (written > 0) {
    Segment& front = out_.front();
    const size_t left = front.size - out_offset_;
    if (written < left) {
      out_offset_ += written;
      return;
    }
    written -= left;
    out_offset_ = 0;
    // A payload's buffer is released as soon as the kernel holds its bytes.
    out_.pop_front();
  }
}

// --- FramedServer ---------------------------------------------------------

FramedServer::FramedServer(FramedServerOptions options, Handler* handler,
                           std::vector<Route> routes)
    : options_(std::move(options)), services_([&] {
        std::vector<Route> services;
        services.push_back(Route{options_.identity, handler});
        for (Route& r : routes) services.push_back(std::move(r));
        return services;
      }()) {}

absl::StatusOr<std::unique_ptr<FramedServer>> FramedServer::Start(
    FramedServerOptions options, Handler* handler, std::vector<Route> routes) {
  // Identities must tell the services apart: the hello is all that chooses.
  std::set<std::string> identities = {options.identity};
  for (const Route& r : routes) {
    if (r.handler == nullptr || !identities.insert(r.identity).second) {
      return absl::InvalidArgumentError(absl::StrCat(
          options.name, ": the route for identity \"", r.identity, "\" ",
          r.handler == nullptr ? "has no handler"
                               : "repeats an identity this server serves"));
    }
  }
  if (options.job_token.empty() && !options.insecure &&
      !IsLoopbackHost(options.host)) {
    return absl::InvalidArgumentError(absl::StrCat(
        options.name, ": refusing to listen on ", options.host,
        " (beyond loopback) without a job token; set one (COHORT_JOB_TOKEN "
        "or --token-file) or pass --insecure"));
  }
  if (options.max_connections <= 0 || options.max_unauthenticated <= 0 ||
      options.max_frame_bytes < kMaxHandshakeFrame ||
      options.handshake_timeout <= absl::ZeroDuration() ||
      options.frame_idle_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat(options.name,
                     ": connection caps, frame cap, handshake and frame "
                     "idle timeouts must be positive"));
  }
  std::unique_ptr<FramedServer> s(
      new FramedServer(std::move(options), handler, std::move(routes)));
  {
    absl::StatusOr<Listener> listener =
        ListenTcp(s->options_.host, s->options_.port);
    if (!listener.ok()) {
      return Annotate(listener.status(), s->options_.name);
    }
    s->listen_fd_ = std::move(listener->fd);
    s->address_ = listener->address;
  }
  s->epoll_fd_.reset(epoll_create1(EPOLL_CLOEXEC));
  s->wake_fd_.reset(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  s->spare_fd_.reset(open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (!s->epoll_fd_.valid() || !s->wake_fd_.valid()) {
    return SocketError("epoll/eventfd for", errno, s->options_.name);
  }
  for (auto [fd, tag] : {std::pair{s->listen_fd_.get(), kListenerTag},
                         std::pair{s->wake_fd_.get(), kWakeTag}}) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = tag;
    if (epoll_ctl(s->epoll_fd_.get(), EPOLL_CTL_ADD, fd, &ev) != 0) {
      return SocketError("epoll_ctl for", errno, s->options_.name);
    }
  }
  FramedServer* raw = s.get();
  s->loop_ = std::thread([raw] { raw->Loop(); });
  return s;
}

FramedServer::~FramedServer() {
  stopping_.store(true);
  Wake();
  if (loop_.joinable()) loop_.join();
  while (!connections_.empty()) {
    std::shared_ptr<FramedConnection> c = connections_.begin()->second;
    CloseConnection(c, "");
  }
}

void FramedServer::Wake() {
  const uint64_t one = 1;
  // A full counter (never in practice) still leaves the fd readable.
  ssize_t ignored = write(wake_fd_.get(), &one, sizeof(one));
  (void)ignored;
}

void FramedServer::ReportBroken(uint64_t id) {
  {
    absl::MutexLock lock(&broken_mu_);
    broken_.push_back(id);
  }
  Wake();
}

void FramedServer::FlushDirty() {
  std::vector<uint64_t> dirty;
  dirty.swap(dirty_);
  for (uint64_t id : dirty) {
    auto it = connections_.find(id);
    if (it == connections_.end()) continue;
    std::shared_ptr<FramedConnection> c = it->second;
    bool ok;
    {
      absl::MutexLock lock(&c->mu_);
      c->dirty_ = false;
      ok = c->FlushLocked();
    }
    if (!ok) ReportBroken(id);
  }
}

void FramedServer::Loop() {
  loop_thread_.store(std::this_thread::get_id());
  epoll_event events[64];
  absl::Time next_deadline = absl::InfiniteFuture();
  while (!stopping_.load()) {
    const int n =
        epoll_wait(epoll_fd_.get(), events, 64, PollTimeoutMs(next_deadline));
    if (n < 0 && errno != EINTR) {
      COHORT_LOG(ERROR) << options_.name
                        << ": epoll_wait failed: " << strerror(errno)
                        << "; the server stops serving";
      return;
    }
    for (int i = 0; i < n; ++i) {
      const uint64_t tag = events[i].data.u64;
      if (tag == kListenerTag) {
        Accept();
      } else if (tag == kWakeTag) {
        uint64_t count;
        ssize_t ignored = read(wake_fd_.get(), &count, sizeof(count));
        (void)ignored;
      } else if (auto it = connections_.find(tag); it != connections_.end()) {
        std::shared_ptr<FramedConnection> c = it->second;
        OnEvent(c, events[i].events);
      }
    }
    FlushDirty();
    std::vector<uint64_t> broken;
    {
      absl::MutexLock lock(&broken_mu_);
      broken.swap(broken_);
    }
    for (uint64_t id : broken) {
      auto it = connections_.find(id);
      if (it == connections_.end()) continue;
      std::shared_ptr<FramedConnection> c = it->second;
      std::string why;
      {
        absl::MutexLock lock(&c->mu_);
        why = c->broken_reason_;
      }
      CloseConnection(c, why);
    }
    const absl::Time now = absl::Now();
    next_deadline =
        std::min(CloseExpiredHandshakes(now), CloseStalledFrames(now));
    // Replies queued while closing connections (OnClose) leave too.
    FlushDirty();
  }
  loop_thread_.store(std::thread::id());
}

void FramedServer::Accept() {
  while (true) {
    int fd = accept4(listen_fd_.get(), nullptr, nullptr,
                     SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0 && errno == EINTR) continue;
    if (fd < 0 && (errno == EMFILE || errno == ENFILE) && spare_fd_.valid()) {
      // Out of fds: the pending connection would keep the listener readable
      // and spin this loop. Free the spare, take it, drop it, re-arm.
      spare_fd_.reset();
      UniqueFd shed(accept4(listen_fd_.get(), nullptr, nullptr, SOCK_CLOEXEC));
      const bool dropped = shed.valid();
      if (dropped) {
        COHORT_LOG(WARNING)
            << options_.name << ": out of file descriptors; "
            << "dropped a connection from " << PeerName(shed.get());
      }
      shed.reset();
      spare_fd_.reset(open("/dev/null", O_RDONLY | O_CLOEXEC));
      // accept4 reports EMFILE even with nothing pending: nothing was
      // waiting, so go back to the loop instead of spinning here.
      if (!dropped) return;
      continue;
    }
    if (fd < 0) return;  // EAGAIN: nothing more to accept
    UniqueFd owned(fd);
    const std::string peer = PeerName(fd);
    if (static_cast<int>(connections_.size()) >= options_.max_connections) {
      COHORT_LOG(WARNING) << options_.name << ": refusing a connection from "
                          << peer << ": " << connections_.size()
                          << " connections open (cap "
                          << options_.max_connections << ")";
      continue;
    }
    while (unauthenticated_ >= options_.max_unauthenticated &&
           !handshaking_.empty()) {
      const uint64_t oldest = handshaking_.front();
      handshaking_.pop_front();
      auto it = connections_.find(oldest);
      if (it == connections_.end() || it->second->authenticated_) continue;
      std::shared_ptr<FramedConnection> victim = it->second;
      CloseConnection(victim, absl::StrCat("still unauthenticated when ",
                                           options_.max_unauthenticated,
                                           " handshakes were pending (cap)"));
    }
    TuneTcpSocket(fd);
    const uint64_t id = next_id_++;
    auto c = std::shared_ptr<FramedConnection>(new FramedConnection(
        this, owned.release(), id, peer, kMaxHandshakeFrame));
    c->handshake_deadline_ = absl::Now() + options_.handshake_timeout;
    c->nonce_ = RandomNonce();
    epoll_event ev{};
    ev.events = kReadEvents;
    ev.data.u64 = id;
    if (epoll_ctl(epoll_fd_.get(), EPOLL_CTL_ADD, fd, &ev) != 0) {
      COHORT_LOG(WARNING) << options_.name << ": cannot watch the connection "
                          << "from " << peer << ": " << strerror(errno);
      close(fd);
      continue;
    }
    connections_[id] = c;
    handshaking_.push_back(id);
    ++unauthenticated_;
    num_connections_.store(static_cast<int>(connections_.size()));
    std::string greeting;
    AppendFrame(&greeting, GreetingPayload(c->nonce_));
    c->Send(std::move(greeting), FramedConnection::Payload());
  }
}

void FramedServer::OnEvent(const std::shared_ptr<FramedConnection>& c,
                           uint32_t events) {
  if (events & EPOLLOUT) {
    bool ok;
    {
      absl::MutexLock lock(&c->mu_);
      ok = c->FlushLocked();
    }
    if (!ok) ReportBroken(c->id());
  }
  if (!(events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR))) return;
  std::string ended;  // set when the peer closed or the socket failed
  const bool open = ReadFrames(*c, &ended);
  // Frames that arrived before an EOF are still served.
  std::string payload;
  while (true) {
    uint64_t announced = 0;
    const FrameReader::Result r = c->reader_.Next(&payload, &announced);
    if (r == FrameReader::Result::kNeedMore) break;
    if (r == FrameReader::Result::kTooLarge) {
      CloseConnection(
          c, absl::StrCat("sent a frame of ", announced, " bytes (cap ",
                          c->authenticated_ ? options_.max_frame_bytes
                                            : kMaxHandshakeFrame,
                          c->authenticated_ ? ")" : " before authenticating)"));
      return;
    }
    ++c->frames_read_;
    std::string why;
    if (!HandleFrame(c, std::move(payload), &why)) {
      CloseConnection(c, why);
      return;
    }
  }
  if (!open) {
    CloseConnection(c, ended);
    return;
  }
  // Part of a frame is buffered: it must progress within frame_idle_timeout
  // and be finished by its own deadline (FrameDeadline).
  if (c->reader_.buffered() > 0 && c->partial_frame_ != c->frames_read_) {
    c->partial_frame_ = c->frames_read_;
    c->partial_since_ = c->last_read_;
  }
  if (c->authenticated_ && !c->midframe_queued_ && c->reader_.buffered() > 0) {
    c->midframe_queued_ = true;
    midframe_.emplace_back(c->id(), c->last_read_);
  }
}

bool FramedServer::ReadFrames(FramedConnection& c, std::string* ended) {
  constexpr size_t kReadBytes = 65536;
  // Read at most a frame's worth beyond the cap per event: the reader then
  // either hands out frames or reports kTooLarge, so a peer can never make
  // this side buffer more than one capped frame. Large frames are read
  // straight into their own string (FrameReader::ReadSpace).
  const size_t cap =
      (c.authenticated_ ? options_.max_frame_bytes : kMaxHandshakeFrame) + 8;
  while (c.reader_.buffered() < cap) {
    const absl::Span<char> space = c.reader_.ReadSpace(kReadBytes);
    const ssize_t n = read(c.fd_, space.data(), space.size());
    c.reader_.Commit(n > 0 ? static_cast<size_t>(n) : 0);
    if (n > 0) {
      c.last_read_ = absl::Now();
      if (static_cast<size_t>(n) < space.size()) return true;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
    // EOF is a client's normal goodbye: nothing to log. A reset is logged.
    ended->clear();
    if (n < 0 && errno != ECONNRESET) {
      *ended = SocketError("read from", errno, c.peer()).ToString();
    }
    return false;
  }
  return true;
}

bool FramedServer::HandleFrame(const std::shared_ptr<FramedConnection>& c,
                               std::string payload, std::string* why) {
  if (c->authenticated_) {
    services_[c->service_].handler->OnRequest(c, std::move(payload));
    return true;
  }
  const Route* service = MatchHello(*c, payload);
  if (service == nullptr) {
    std::string reply;
    AppendReplyFrame(&reply, absl::StatusCode::kUnauthenticated,
                     absl::StrCat(options_.name,
                                  ": wrong or missing job token, or the "
                                  "client meant another server; check "
                                  "COHORT_JOB_TOKEN / --token-file of the "
                                  "client and the address it dialled"));
    c->Send(std::move(reply), FramedConnection::Payload());
    *why = "failed authentication (wrong or missing job token)";
    return false;
  }
  c->authenticated_ = true;
  c->service_ = static_cast<size_t>(service - services_.data());
  --unauthenticated_;
  c->reader_.set_max_frame(options_.max_frame_bytes);
  // A client that checks the server gets the server's proof.
  const absl::string_view client_nonce = HelloClientNonce(payload);
  std::string ok;
  AppendReplyFrame(&ok, absl::StatusCode::kOk,
                   client_nonce.empty()
                       ? std::string()
                       : ServerProof(options_.job_token, c->nonce_,
                                     client_nonce, service->identity));
  c->Send(std::move(ok), FramedConnection::Payload());
  return true;
}

void FramedServer::CloseConnection(const std::shared_ptr<FramedConnection>& c,
                                   const std::string& why) {
  if (connections_.erase(c->id()) == 0) return;
  num_connections_.store(static_cast<int>(connections_.size()));
  if (!c->authenticated_) --unauthenticated_;
  if (!why.empty()) {
    COHORT_LOG(WARNING) << options_.name << ": closing the connection from "
                        << c->peer() << ": " << why;
  }
  // Unsent output goes with the connection; payload buffers are released
  // after the lock (the handler may still hold the connection for a while).
  std::deque<FramedConnection::Segment> unsent;
  {
    absl::MutexLock lock(&c->mu_);
    // What the loop queued last (e.g. the refusal of a wrong token) is
    // still offered to the socket, without waiting.
    if (c->dirty_ && !c->broken_) c->FlushLocked();
    c->dirty_ = false;
    c->closed_ = true;
    epoll_ctl(epoll_fd_.get(), EPOLL_CTL_DEL, c->fd_, nullptr);
    close(c->fd_);
    unsent.swap(c->out_);
    c->out_offset_ = 0;
    c->out_bytes_ = 0;
  }
  unsent.clear();
  if (c->authenticated_) services_[c->service_].handler->OnClose(c);
}

const FramedServer::Route* FramedServer::MatchHello(
    const FramedConnection& c, absl::string_view hello) const {
  if (!options_.job_token.empty()) {
    // Each check is a constant-time comparison of one HMAC; a server has a
    // handful of services.
    for (const Route& r : services_) {
      if (VerifyHello(options_.job_token, c.nonce_, hello, r.identity)) {
        return &r;
      }
    }
    return nullptr;
  }
  // No token: everyone is let in, and the proof (made with the empty key)
  // still says which service the client meant.
  if (hello.size() >= kProofBytes) {
    for (size_t i = 1; i < services_.size(); ++i) {
      if (hello.substr(0, kProofBytes) ==
          HelloProof("", c.nonce_, services_[i].identity)) {
        return &services_[i];
      }
    }
  }
  return &services_[0];
}

absl::Time FramedServer::CloseStalledFrames(absl::Time now) {
  while (!midframe_.empty()) {
    const auto [id, since] = midframe_.front();
    auto it = connections_.find(id);
    if (it == connections_.end()) {
      midframe_.pop_front();
      continue;
    }
    std::shared_ptr<FramedConnection> c = it->second;
    if (c->reader_.buffered() == 0) {  // the frame was finished
      c->midframe_queued_ = false;
      midframe_.pop_front();
      continue;
    }
    if (c->last_read_ > since && now >= FrameDeadline(*c)) {
      midframe_.pop_front();
      c->midframe_queued_ = false;
      CloseConnection(
          c,
          absl::StrCat("took more than ",
                       absl::FormatDuration(now - c->partial_since_),
                       " to send a frame of ", c->reader_.partial_frame_size(),
                       " bytes (", c->reader_.buffered(), " arrived)"));
      continue;
    }
    if (c->last_read_ > since) {  // progress: look again from its last read
      midframe_.pop_front();
      midframe_.emplace_back(id, c->last_read_);
      if (midframe_.front().first == id) {
        return c->last_read_ + options_.frame_idle_timeout;
      }
      continue;
    }
    if (since + options_.frame_idle_timeout > now) {
      return since + options_.frame_idle_timeout;
    }
    midframe_.pop_front();
    c->midframe_queued_ = false;
    CloseConnection(
        c, absl::StrCat("sent ", c->reader_.buffered(),
                        " bytes of a frame and then nothing for ",
                        absl::FormatDuration(options_.frame_idle_timeout)));
  }
  return absl::InfiniteFuture();
}

absl::Time FramedServer::FrameDeadline(const FramedConnection& c) const {
  const double seconds = static_cast<double>(c.reader_.partial_frame_size()) /
                         static_cast<double>(std::max<size_t>(
                             1, options_.min_frame_bytes_per_second));
  return c.partial_since_ + options_.frame_idle_timeout +
         absl::Seconds(seconds);
}

absl::Time FramedServer::CloseExpiredHandshakes(absl::Time now) {
  while (!handshaking_.empty()) {
    auto it = connections_.find(handshaking_.front());
    if (it == connections_.end() || it->second->authenticated_) {
      handshaking_.pop_front();
      continue;
    }
    std::shared_ptr<FramedConnection> c = it->second;
    if (c->handshake_deadline_ > now) return c->handshake_deadline_;
    handshaking_.pop_front();
    CloseConnection(
        c, absl::StrCat("did not authenticate within ",
                        absl::FormatDuration(options_.handshake_timeout)));
  }
  return absl::InfiniteFuture();
}

}  // namespace cohort::rpc
