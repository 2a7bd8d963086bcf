// LocalEtcd: a 3-member etcd cluster for one test (scripts/etcd_local.sh on
// six free loopback ports, in its own directory), removed when the object
// goes. Tests that need one skip, saying why, when etcd is not installed
// (scripts/setup.sh installs it; CI has it).
//
//   LocalEtcd etcd;
//   COHORT_START_ETCD_OR_SKIP(etcd);      // in a test or a fixture's SetUp
//   EtcdTarget target = *ParseEtcdUrl(etcd.Url("/job-a"));
//   etcd.Kill(etcd.Leader());
//
// Needs COHORT_SOURCE_DIR (the test's compile definitions).
#ifndef COHORT_COORD_ETCD_TESTING_H_
#define COHORT_COORD_ETCD_TESTING_H_

#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "cohort/base/env.h"
#include "cohort/base/subprocess.h"
#include "cohort/rpc/socket.h"
#include "gtest/gtest.h"

// Starts `etcd` (LocalEtcd; the rest are Start's arguments) or returns from
// the enclosing test or SetUp: skipped, saying why, when etcd is not
// installed; failed (Start reported why) when it did not start.
#define COHORT_START_ETCD_OR_SKIP(etcd, ...)                            \
  do {                                                                  \
    if (!(etcd).Start(__VA_ARGS__)) {                                   \
      if ((etcd).skip_reason().empty()) FAIL() << "etcd did not start"; \
      GTEST_SKIP() << (etcd).skip_reason();                             \
    }                                                                   \
  } while (0)

namespace cohort::coord {

class LocalEtcd {
 public:
  LocalEtcd() = default;
  ~LocalEtcd() {
    if (!dir_.empty()) Script({"stop"}).IgnoreError();
  }
  LocalEtcd(const LocalEtcd&) = delete;
  LocalEtcd& operator=(const LocalEtcd&) = delete;

  // Starts the cluster. False: etcd is not installed (skip_reason() says
  // so) or it did not start (skip_reason() empty; the failure is reported).
  // A start that fails is tried once more on other ports (one of the six
  // may have been taken since it was picked).
  bool Start(bool tls = false) {
    for (int attempt = 0;; ++attempt) {
      absl::Status s = TryStart(tls);
      if (s.ok()) return true;
      if (!skip_reason_.empty()) return false;
      if (attempt == 1) {
        ADD_FAILURE() << s;
        return false;
      }
      Script({"stop"}).IgnoreError();
    }
  }
  const std::string& skip_reason() const { return skip_reason_; }
  const std::string& dir() const { return dir_; }
  // "etcd://127.0.0.1:A,127.0.0.1:B,127.0.0.1:C/PREFIX".
  std::string Url(const std::string& prefix = "") const {
    return absl::StrCat("etcd://", endpoints_, prefix);
  }

  // Files of a --tls cluster.
  std::string Tls(const std::string& name) const {
    return absl::StrCat(dir_, "/tls/", name);
  }
  // The member that leads now ("e0".."e2").
  std::string Leader() {
    absl::StatusOr<std::string> out = Script({"leader"});
    EXPECT_TRUE(out.ok()) << out.status();
    return out.ok() ? std::string(absl::StripAsciiWhitespace(*out)) : "";
  }
  void Kill(const std::string& member) {
    absl::StatusOr<std::string> out = Script({"kill", member});
    EXPECT_TRUE(out.ok()) << out.status();
  }
  // Kills the leader and one other member: one of three is left, no
  // majority (no election can follow).
  void KillMajority() {
    const std::string leader = Leader();
    ASSERT_EQ(leader.size(), 2u);
    Kill(leader);
    Kill(absl::StrCat("e", (leader[1] - '0' + 1) % 3));
  }
  // etcdctl against the cluster (plain clusters), e.g. {"get", "", "--prefix"}.
  absl::StatusOr<std::string> Ctl(std::vector<std::string> args) {
    std::vector<std::string> argv = {
        "env", "ETCDCTL_API=3", "etcdctl", "--endpoints",
        absl::StrCat("http://127.0.0.1:", ports_[0], ",http://127.0.0.1:",
                     ports_[1], ",http://127.0.0.1:", ports_[2])};
    argv.insert(argv.end(), args.begin(), args.end());
    ProgramRun run = RunProgram(argv, RunProgramOptions());
    if (!run.status.ok()) return run.status;
    return run.output;
  }

 private:
  absl::Status TryStart(bool tls) {
    if (access("/usr/bin/etcd", X_OK) != 0 ||
        access("/usr/bin/etcdctl", X_OK) != 0) {
      skip_reason_ =
          "etcd is not installed (scripts/setup.sh or `apt-get install "
          "etcd-server etcd-client` installs it)";
      return absl::NotFoundError(skip_reason_);
    }
    char dir[] = "/tmp/cohort-etcd-test-XXXXXX";
    if (mkdtemp(dir) == nullptr) return absl::InternalError("mkdtemp failed");
    dir_ = dir;
    std::vector<int> ports;
    while (ports.size() < 6) {
      absl::StatusOr<int> port = rpc::PickFreePort("127.0.0.1");
      if (!port.ok()) return port.status();
      if (std::find(ports.begin(), ports.end(), *port) == ports.end()) {
        ports.push_back(*port);
      }
    }
    ports_ = ports;
    std::vector<std::string> args = {"start"};
    if (tls) args.push_back("--tls");
    absl::StatusOr<std::string> out = Script(args);
    if (!out.ok()) return out.status();
    endpoints_ = absl::StrCat("127.0.0.1:", ports[0], ",127.0.0.1:", ports[1],
                              ",127.0.0.1:", ports[2]);
    return absl::OkStatus();
  }

  absl::StatusOr<std::string> Script(std::vector<std::string> args) {
    std::vector<std::string> argv = {
        "bash", absl::StrCat(COHORT_SOURCE_DIR, "/scripts/etcd_local.sh")};
    argv.insert(argv.end(), args.begin(), args.end());
    argv.push_back("--dir");
    argv.push_back(dir_);
    argv.push_back("--ports");
    argv.push_back(absl::StrJoin(ports_, ","));
    ProgramRun run = RunProgram(argv, RunProgramOptions());
    if (!run.status.ok()) return run.status;
    return run.output;
  }

  std::string dir_;
  std::vector<int> ports_;
  std::string endpoints_;
  std::string skip_reason_;
};

}  // namespace cohort::coord

#endif  // COHORT_COORD_ETCD_TESTING_H_
