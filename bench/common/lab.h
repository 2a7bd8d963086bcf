// Benchmarks across the multi-host lab (scripts/lab.sh, docs/lab.md): hosts
// made of network namespaces joined by links with a bandwidth cap. A suite's
// --lab mode brings the lab up, runs one process per host through
// `lab.sh exec`, reads host 0's output, and takes the lab down.
//
//   Lab lab;                                   // finds scripts/lab.sh
//   COHORT_RETURN_IF_ERROR(lab.Up(4, "5gbit"));
//   auto outputs = lab.RunOnHosts({{"prog", "--rank", "0"}, ...}, deadline);
//   lab.Down();                                // also on destruction
//
// Needs root (network namespaces); Up() says so, with lab.sh's reason.
//
// Thread safety: thread-compatible.
#ifndef COHORT_BENCH_COMMON_LAB_H_
#define COHORT_BENCH_COMMON_LAB_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace cohort::bench {

class Lab {
 public:
  // `script`: scripts/lab.sh's path, or empty to look in the source tree
  // this binary was built from, then above the binary.
  explicit Lab(std::string script = "");
  ~Lab();
  Lab(const Lab&) = delete;
  Lab& operator=(const Lab&) = delete;

  // `n` hosts h0..h(n-1) at 10.77.0.1..n, each host's egress capped at
  // `rate` (tc's syntax: "5gbit"). FailedPrecondition with lab.sh's reason
  // where the lab cannot be made (not root, no namespaces).
  absl::Status Up(int n, const std::string& rate);
  void Down();

  // Host i's address ("10.77.0.(i+1)").
  static std::string Address(int host);
  // The command prefix that runs a program in host i's network namespace
  // (lab.sh's "cohort-h<i>"): {"ip", "netns", "exec", "cohort-h1"}.
  static std::vector<std::string> ExecPrefix(int host);
  // Bits per second of a tc rate ("5gbit", "800mbit", "100kbit", "1000").
  static absl::StatusOr<double> RateBitsPerSecond(const std::string& rate);

  // Runs argv[i] on host i, all at once, each to its end within `deadline`;
  // returns each host's output (stdout and stderr). An error names the
  // host, its command and the tail of its output.
  absl::StatusOr<std::vector<std::string>> RunOnHosts(
      const std::vector<std::vector<std::string>>& argv,
      absl::Duration deadline);

 private:
  std::string script_;
  bool up_ = false;
};

}  // namespace cohort::bench

#endif  // COHORT_BENCH_COMMON_LAB_H_
