#include "tests/coord/test_process.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <iostream>

namespace cohort::testing {

TestProcess::TestProcess(const std::vector<std::string>& argv) {
  Subprocess::SpawnOptions options;
  options.stderr_to = Subprocess::Stderr::kInherit;  // in the test's log
  options.input_pipe = true;
  auto spawned = Subprocess::Spawn(argv, EnvironmentWith({}), options);
  if (!spawned.ok()) {
    std::cerr << spawned.status() << "\n";
    std::abort();
  }
  process_ = *std::move(spawned);
  pid_ = process_->pid();
  stdout_fd_ = process_->output_fd();
}

TestProcess::~TestProcess() {
  CloseStdin();
  if (Wait(absl::Seconds(5)) == -1) {
    Kill9();
    Wait(absl::Seconds(5));
  }
}

void TestProcess::CloseStdin() { process_->CloseInput(); }

void TestProcess::Kill9() {
  if (!exited_) process_->SignalGroup(SIGKILL);
}

void TestProcess::Terminate() {
  if (!exited_) kill(pid_, SIGTERM);
}

int TestProcess::Wait(absl::Duration timeout) {
  std::optional<ExitInfo> exit = process_->WaitFor(timeout);
  if (!exit.has_value()) return -1;
  exited_ = true;
  // The wait status the callers decode with WIFEXITED and friends.
  return exit->signaled ? exit->value : (exit->value & 0xff) << 8;
}

bool TestProcess::SawLineContaining(const std::string& needle) const {
  for (const auto& line : lines_) {
    if (line.find(needle) != std::string::npos) return true;
  }
  return false;
}

std::string TestProcess::WaitForLineInAnyOrder(const std::string& needle,
                                               absl::Duration timeout) {
  for (size_t i = 0; i < consumed_; ++i) {
    if (lines_[i].find(needle) != std::string::npos) return lines_[i];
  }
  return WaitForLine(needle, timeout);
}

std::string TestProcess::WaitForLine(const std::string& needle,
                                     absl::Duration timeout) {
  const absl::Time end = absl::Now() + timeout;
  while (true) {
    while (consumed_ < lines_.size()) {
      const std::string& line = lines_[consumed_++];
      if (line.find(needle) != std::string::npos) return line;
    }
    if (stdout_fd_ < 0) return "";
    const absl::Duration left = end - absl::Now();
    if (left <= absl::ZeroDuration()) return "";
    pollfd pfd{stdout_fd_, POLLIN, 0};
    int r =
        poll(&pfd, 1, static_cast<int>(absl::ToInt64Milliseconds(left)) + 1);
    if (r <= 0) continue;
    char buf[4096];
    ssize_t n = read(stdout_fd_, buf, sizeof(buf));
    if (n <= 0) {
      stdout_fd_ = -1;  // at EOF; the Subprocess closes the pipe
      continue;
    }
    buffer_.append(buf, n);
    size_t nl;
    while ((nl = buffer_.find('\n')) != std::string::npos) {
      lines_.push_back(buffer_.substr(0, nl));
      buffer_.erase(0, nl + 1);
    }
  }
}

TcpProxy::TcpProxy(int target_port) : target_port_(target_port) {
  listen_fd_ = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  if (bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      listen(listen_fd_, 64) != 0) {
    std::abort();
  }
  socklen_t len = sizeof(addr);
  getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  port_ = ntohs(addr.sin_port);
  acceptor_ = std::thread([this] { AcceptLoop(); });
}

TcpProxy::~TcpProxy() {
  stop_ = true;
  shutdown(listen_fd_, SHUT_RDWR);
  close(listen_fd_);
  acceptor_.join();
  std::vector<std::thread> threads;
  {
    absl::MutexLock lock(&mu_);
    for (int fd : open_fds_) shutdown(fd, SHUT_RDWR);
    threads.swap(threads_);
  }
  for (auto& t : threads) t.join();
}

void TcpProxy::Pause() {
  absl::MutexLock lock(&mu_);
  paused_ = true;
  for (int fd : open_fds_) shutdown(fd, SHUT_RDWR);
}

void TcpProxy::Blackhole() {
  absl::MutexLock lock(&mu_);
  blackholed_ = true;
}

void TcpProxy::Resume() {
  absl::MutexLock lock(&mu_);
  paused_ = false;
}

void TcpProxy::AcceptLoop() {
  while (!stop_) {
    int client = accept(listen_fd_, nullptr, nullptr);
    if (client < 0) {
      if (stop_) return;
      continue;
    }
    absl::MutexLock lock(&mu_);
    if (paused_) {
      close(client);
      continue;
    }
    if (blackholed_) {
      open_fds_.push_back(client);  // held open, never answered
      continue;
    }
    int upstream = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(target_port_);
    if (connect(upstream, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) !=
        0) {
      close(client);
      close(upstream);
      continue;
    }
    open_fds_.push_back(client);
    open_fds_.push_back(upstream);
    threads_.emplace_back([this, client, upstream] { Pump(client, upstream); });
    threads_.emplace_back([this, client, upstream] { Pump(upstream, client); });
  }
}

void TcpProxy::Pump(int from, int to) {
  char buf[16384];
  while (true) {
    ssize_t n = read(from, buf, sizeof(buf));
    if (n <= 0) break;
    {
      absl::MutexLock lock(&mu_);
      if (blackholed_) continue;  // dropped on the floor, silently
    }
    ssize_t off = 0;
    while (off < n) {
      // MSG_NOSIGNAL: a peer that reset must end this pump, not the test
      // binary (SIGPIPE).
      ssize_t w = send(to, buf + off, n - off, MSG_NOSIGNAL);
      if (w <= 0) break;
      off += w;
    }
    if (off < n) break;
  }
  shutdown(from, SHUT_RDWR);
  shutdown(to, SHUT_RDWR);
}

}  // namespace cohort::testing
