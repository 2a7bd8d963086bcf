#include "cohort/rpc/http_get_server.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "cohort/base/status.h"

namespace cohort::rpc {
namespace {

const char* Reason(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 303:
      return "See Other";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 431:
      return "Request Header Fields Too Large";
    case 503:
      return "Service Unavailable";
    default:
      return status < 400 ? "OK" : "Error";
  }
}

// Writes all of `data` by `deadline`; false when it cannot.
bool WriteAll(int fd, absl::string_view data, absl::Time deadline) {
  while (!data.empty()) {
    ssize_t n = send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n > 0) {
      data.remove_prefix(static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      return false;
    }
    pollfd p{fd, POLLOUT, 0};
    if (poll(&p, 1, PollTimeoutMs(deadline)) <= 0) return false;
  }
  return true;
}

std::string Render(const HttpResponse& r) {
  std::string out = absl::StrCat("HTTP/1.1 ", r.status, " ", Reason(r.status),
                                 "\r\nContent-Type: ", r.content_type,
                                 "\r\nContent-Length: ", r.body.size(),
                                 "\r\nConnection: close\r\n");
  for (const auto& [name, value] : r.headers) {
    absl::StrAppend(&out, name, ": ", value, "\r\n");
  }
  absl::StrAppend(&out, "\r\n", r.body);
  return out;
}

HttpResponse Plain(int status, std::string body) {
  HttpResponse r;
  r.status = status;
  r.body = std::move(body);
  return r;
}

// Parses the request head (request line and headers, without the blank
// line). False for a malformed head.
bool ParseHead(absl::string_view head, std::string* method,
               HttpRequest* request) {
  std::vector<absl::string_view> lines = absl::StrSplit(head, "\r\n");
  if (lines.empty()) return false;
  std::vector<absl::string_view> first = absl::StrSplit(lines[0], ' ');
  if (first.size() != 3 || !absl::StartsWith(first[2], "HTTP/1.")) return false;
  *method = std::string(first[0]);
  absl::string_view target = first[1];
  if (target.empty() || target[0] != '/') return false;
  absl::string_view path = target, query;
  if (size_t q = target.find('?'); q != absl::string_view::npos) {
    path = target.substr(0, q);
    query = target.substr(q + 1);
  }
  if (!PercentDecode(std::string(path), false, &request->path)) return false;
  for (absl::string_view pair : absl::StrSplit(query, '&', absl::SkipEmpty())) {
    std::pair<std::string, std::string> kv =
        absl::StrSplit(pair, absl::MaxSplits('=', 1));
    std::string name, value;
    if (!PercentDecode(kv.first, true, &name) ||
        !PercentDecode(kv.second, true, &value)) {
      return false;
    }
    request->query.emplace(std::move(name), std::move(value));
  }
  for (size_t i = 1; i < lines.size(); ++i) {
    size_t colon = lines[i].find(':');
    if (colon == absl::string_view::npos || colon == 0) return false;
    request->headers.emplace(
        absl::AsciiStrToLower(lines[i].substr(0, colon)),
        std::string(absl::StripAsciiWhitespace(lines[i].substr(colon + 1))));
  }
  return true;
}

}  // namespace

bool PercentDecode(const std::string& text, bool query, std::string* out) {
  out->clear();
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (c == '%') {
      if (i + 2 >= text.size()) return false;
      int v = 0;
      for (int k = 1; k <= 2; ++k) {
        char h = text[i + k];
        int d = absl::ascii_isdigit(h)   ? h - '0'
                : (h >= 'a' && h <= 'f') ? h - 'a' + 10
                : (h >= 'A' && h <= 'F') ? h - 'A' + 10
                                         : -1;
        if (d < 0) return false;
        v = v * 16 + d;
      }
      if (v == 0) return false;  // no NUL inside a name
      out->push_back(static_cast<char>(v));
      i += 2;
    } else if (query && c == '+') {
      out->push_back(' ');
    } else {
      out->push_back(c);
    }
  }
  return true;
}

absl::StatusOr<std::unique_ptr<HttpGetServer>> HttpGetServer::Start(
    Options options, Handler handler) {
  COHORT_ASSIGN_OR_RETURN(Listener listener,
                          ListenTcp(options.host, options.port));
  UniqueFd wake(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake.valid()) return SocketError("eventfd for", errno, "an HTTP server");
  const std::string address = listener.address;
  int port = 0;
  if (absl::StatusOr<HostPort> hp = ParseHostPort(address); hp.ok()) {
    port = hp->port;
  }
  std::unique_ptr<HttpGetServer> server(
      new HttpGetServer(std::move(options), std::move(handler),
                        std::move(listener), std::move(wake), port));
  server->accept_thread_ = std::thread([s = server.get()] { s->AcceptLoop(); });
  return server;
}

HttpGetServer::HttpGetServer(Options options, Handler handler,
                             Listener listener, UniqueFd wake, int port)
    : options_(std::move(options)),
      handler_(std::move(handler)),
      listener_(std::move(listener)),
      wake_(std::move(wake)),
      port_(port) {}

HttpGetServer::~HttpGetServer() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    // A connection's thread that is waiting to read or write wakes up.
    for (Connection& c : connections_) shutdown(c.fd.get(), SHUT_RDWR);
  }
  const uint64_t one = 1;
  (void)!write(wake_.get(), &one, sizeof(one));
  accept_thread_.join();
  absl::MutexLock lock(&mu_);
  for (Connection& c : connections_) {
    shutdown(c.fd.get(), SHUT_RDWR);
    c.thread.join();
  }
  connections_.clear();
}

void HttpGetServer::Reap() {
  for (auto it = connections_.begin(); it != connections_.end();) {
    if (it->done.load()) {
      it->thread.join();
      it = connections_.erase(it);
    } else {
      ++it;
    }
  }
}

void HttpGetServer::AcceptLoop() {
  while (true) {
    pollfd fds[2] = {{listener_.fd.get(), POLLIN, 0}, {wake_.get(), POLLIN, 0}};
    if (poll(fds, 2, -1) < 0 && errno != EINTR) return;
    if (fds[1].revents != 0) return;  // stopping
    while (true) {
      int fd = accept4(listener_.fd.get(), nullptr, nullptr,
                       SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) break;  // EAGAIN, or a transient error: poll again
      UniqueFd conn(fd);
      absl::MutexLock lock(&mu_);
      if (stopping_) return;
      Reap();
      if (static_cast<int>(connections_.size()) >= options_.max_connections) {
        continue;  // over the cap: closed unread
      }
      connections_.emplace_back();
      Connection* c = &connections_.back();
      c->fd = std::move(conn);
      c->thread = std::thread([this, c] {
        Serve(c);
        c->done.store(true);
      });
    }
  }
}

void HttpGetServer::Serve(Connection* c) {
  const int fd = c->fd.get();
  // However the connection ends, the client sees it end now; the fd itself
  // is closed when the accept loop reaps the connection.
  struct HangUp {
    int fd;
    ~HangUp() { shutdown(fd, SHUT_RDWR); }
  } hang_up{fd};
  const absl::Time deadline = absl::Now() + options_.request_deadline;
  std::string buf;
  size_t end = std::string::npos;
  while (end == std::string::npos) {
    if (buf.size() > options_.max_request_bytes) {
      WriteAll(fd, Render(Plain(431, "request too long\n")), deadline);
      return;
    }
    char chunk[2048];
    ssize_t n = recv(fd, chunk, sizeof(chunk), 0);
    if (n > 0) {
      buf.append(chunk, static_cast<size_t>(n));
      end = buf.find("\r\n\r\n");
      continue;
    }
    if (n == 0) return;  // closed before a whole request
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return;
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, PollTimeoutMs(deadline)) <= 0) return;  // too slow
  }
  if (end > options_.max_request_bytes) {
    WriteAll(fd, Render(Plain(431, "request too long\n")), deadline);
    return;
  }
  std::string method;
  HttpRequest request;
  HttpResponse response;
  if (!ParseHead(absl::string_view(buf).substr(0, end), &method, &request)) {
    response = Plain(400, "malformed request\n");
  } else if (method != "GET") {
    response = Plain(405, "only GET\n");
    response.headers.emplace_back("Allow", "GET");
  } else {
    response = handler_(request);
  }
  // The answer gets its own time: a slow handler (a status call) must not
  // leave it none.
  WriteAll(fd, Render(response), absl::Now() + options_.request_deadline);
}

}  // namespace cohort::rpc
