// Helpers for multi-process tests: a child process with pipes, and a TCP
// proxy on 127.0.0.1 that can drop every connection for a while.
#ifndef COHORT_TESTS_COORD_TEST_PROCESS_H_
#define COHORT_TESTS_COORD_TEST_PROCESS_H_

#include <signal.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "cohort/base/subprocess.h"

namespace cohort::testing {

// A child process whose stdin and stdout are pipes to this process (a
// Subprocess: its own process group, killed if the test thread ends; stderr
// goes to the test's). Thread-compatible.
class TestProcess {
 public:
  // Starts argv[0] (a path, or searched in PATH) with argv. Aborts the test
  // binary on failure (a bug).
  explicit TestProcess(const std::vector<std::string>& argv);
  // Closes stdin, waits up to 5 s for exit, then kills it.
  ~TestProcess();

  pid_t pid() const { return pid_; }
  // Returns the first line (from now on) that contains `needle`, or "" if
  // none came before `timeout` or the child closed stdout. Every line read
  // is kept in lines().
  std::string WaitForLine(const std::string& needle,
                          absl::Duration timeout = absl::Seconds(20));
  // Like WaitForLine, but also finds a line read before now: for events
  // whose order in the child's output is not fixed.
  std::string WaitForLineInAnyOrder(const std::string& needle,
                                    absl::Duration timeout = absl::Seconds(20));
  const std::vector<std::string>& lines() const { return lines_; }
  bool SawLineContaining(const std::string& needle) const;
  void CloseStdin();
  void Kill9();
  // Sends SIGTERM.
  void Terminate();
  // Waits for exit; returns the wait status (WIFEXITED...) or -1 on timeout.
  int Wait(absl::Duration timeout = absl::Seconds(10));

 private:
  std::unique_ptr<Subprocess> process_;
  pid_t pid_ = -1;
  int stdout_fd_ = -1;  // process_'s, or -1 once at EOF
  bool exited_ = false;
  std::string buffer_;
  std::vector<std::string> lines_;
  size_t consumed_ = 0;
};

// Forwards 127.0.0.1:port() to a target port. Pause() closes every open
// connection and refuses new ones until Resume(). Blackhole() is a silent
// partition: from then on every byte is dropped in both directions and new
// connections are accepted but never forwarded, while no connection is
// closed or reset (no FIN, no RST) -- what a pulled cable or a dropping
// firewall looks like. Thread-safe.
class TcpProxy {
 public:
  explicit TcpProxy(int target_port);
  ~TcpProxy();
  int port() const { return port_; }
  void Pause();
  void Resume();
  void Blackhole();

 private:
  void AcceptLoop();
  void Pump(int from, int to);

  const int target_port_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  absl::Mutex mu_;
  bool paused_ ABSL_GUARDED_BY(mu_) = false;
  bool blackholed_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<int> open_fds_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> threads_ ABSL_GUARDED_BY(mu_);
  std::thread acceptor_;
};

}  // namespace cohort::testing

#endif  // COHORT_TESTS_COORD_TEST_PROCESS_H_
