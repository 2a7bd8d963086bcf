// What the benchmark suites share: JSON-line output, running a peer script
// of bench/peers (the repository's own) in the same run, and ratio lines.
//
//   MeasurementLog log;                  // every line the suite printed
//   log.Print(Json{{"suite","coord"},{"metric","rtt_add_p50"},...});
//   PeerRunner peer("tcpstore", "tcpstore_peer.py", flags.peer_script);
//   if (absl::Status s = peer.Check(); !s.ok()) ...  // script or torch missing
//   absl::Status s = peer.Run({"--reps", "1"}, absl::Minutes(20), rep,
//                             &peer_log);           // passes its lines through
//   PrintRatio("coord", log, peer_log, {...});
//
// Output shape (docs/architecture.md, "Benchmark output"): one JSON object per
// line on stdout, {"suite", "metric", "params", "value", "unit", "rep"}.
// A failed measurement is a line {"suite", "error", ...}; the suite then
// exits non-zero.
//
// A ratio line compares the median over repetitions of one cohort metric
// with the median of the peer's counterpart measured in the same run:
//   {"suite": "coord", "metric": "barrier_release_p50_ratio",
//    "params": {"clients": 8, "client_mode": "threads", "peer": "tcpstore",
//               "peer_metric": "barrier_release_p50", "peer_barrier": "wait"},
//    "value": 0.8, "unit": "x", "cohort": 250.0, "peer_value": 312.5,
//    "reps": 3, "better": "lower"}
// value = cohort / peer; "better" says which direction favours cohort. A
// ratio line carries "reps" (how many repetitions each median covers)
// instead of "rep".
//
// Thread safety: MeasurementLog is thread-safe; the rest is
// thread-compatible (the suites call it from one thread).
#ifndef COHORT_BENCH_COMMON_PEER_H_
#define COHORT_BENCH_COMMON_PEER_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "cohort/base/json.h"

namespace cohort::bench {

// `v` rounded to 3 decimals, as every suite prints values.
double Round3(double v);

// Percentile of `xs` (0..100): the nearest rank on n - 1, as the peer
// scripts (bench/peers) compute theirs; 0 for no values.
double Percentile(std::vector<double> xs, double p);

// Prints `line` as one compact JSON line on stdout (and flushes).
void PrintJsonLine(const Json& line);

// Prints {"suite": suite, "error": message} plus the fields of `extra`.
void PrintErrorLine(const std::string& suite, const std::string& message,
                    const Json& extra = Json::object());

// Prints {"suite": "env", "bench": bench, "when": when, "date": ...,
// "nproc": ..., "loadavg": [1 min, 5 min, 15 min], "settings": {...}}:
// what the machine was doing when a suite started and ended (figures under
// load are inflated), and the switches of the environment that change what
// is measured (COHORT_HUGE_PAGES, COHORT_TENSOR_SAME_HOST,
// OPENBLAS_NUM_THREADS), where set.
void PrintEnvLine(const std::string& bench, const std::string& when);

// The measurement lines of one side (cohort or a peer) of a run.
class MeasurementLog {
 public:
  // Prints `line` and keeps it when it is a measurement (has "metric" and a
  // numeric "value" and no "error").
  void Print(const Json& line) ABSL_LOCKS_EXCLUDED(mu_);
  // Keeps `line` without printing it.
  void Add(const Json& line) ABSL_LOCKS_EXCLUDED(mu_);
  std::vector<Json> lines() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  mutable absl::Mutex mu_;
  std::vector<Json> lines_ ABSL_GUARDED_BY(mu_);
};

// Median of the "value" of every line in `log` whose "metric" is `metric`
// and whose "params" contain every entry of `params`; also returns how many
// lines matched (0: no value, the median is 0).
double MedianOf(const MeasurementLog& log, const std::string& metric,
                const Json& params, int* count);

struct RatioSpec {
  std::string metric;       // cohort's metric, e.g. "barrier_p50"
  Json params;              // entries both sides must have, e.g. {"world": 2}
  std::string peer_metric;  // the peer's metric, e.g. "all_gather_p50"
  Json peer_params = Json::object();  // extra entries on the peer's side
  bool lower_is_better = true;
  std::string note;  // optional, copied into the line
  // Extra entries on cohort's side only (e.g. {"transport": "shm"}); they
  // are copied into the ratio line's params.
  Json ours_params = Json::object();
};

// Prints the ratio line of `spec` (format above). NotFound, printing
// nothing, when either side has no matching measurement.
absl::Status PrintRatio(const std::string& suite, const std::string& peer,
                        const MeasurementLog& ours,
                        const MeasurementLog& theirs, const RatioSpec& spec);

// The path of `relative` ("scripts/lab.sh") in the source tree this binary
// was built from, else two levels above the binary's directory (a build
// directory inside a tree that moved), else under the working directory:
// the first that is readable, or the first candidate when none is.
std::string FindRepoFile(const std::string& relative);

// A peer benchmark script of bench/peers, run with /usr/bin/python3
// (Debian's, where python3-torch is installed; scripts/setup.sh installs
// it).
class PeerRunner {
 public:
  // `suite`: the peer's suite name in its lines ("tcpstore", "gloo");
  // `script`: its file name in bench/peers; `path`: an explicit path (from
  // --peer-script) or empty to look for bench/peers/`script` in the source
  // tree this binary was built from, then one and two levels above the
  // binary's directory (a build directory inside the tree), then under the
  // working directory.
  PeerRunner(std::string suite, std::string script, std::string path);

  // OK when the script is readable and /usr/bin/python3 imports torch;
  // NotFound / FailedPrecondition saying what is missing and how to fix it.
  absl::Status Check();

  // Whether a suite runs this peer: false when not `wanted` (--no-peer);
  // false too when Check() fails, after printing its error line (under the
  // peer's suite name) and setting *rc to 1: the run goes on without the
  // peer and fails.
  bool Use(bool wanted, int* rc);

  // Runs the script with `args` (at most `timeout`, then SIGTERM, then
  // SIGKILL 10 s later), prints each JSON line of its stdout with "rep" set
  // to `rep`, and keeps the measurements in `log`. Error lines on its stdout
  // or stderr are printed on stdout. Errors, each naming the script and its
  // arguments, with the tail of its stderr:
  //  - DeadlineExceeded: it ran past `timeout`;
  //  - Internal: it exited non-zero (or died of a signal), printed an error
  //    line, or printed no measurement line.
  // Measurements printed before a failure stay in `log`; the suite's exit
  // status says the run failed.
  absl::Status Run(const std::vector<std::string>& args, absl::Duration timeout,
                   int rep, MeasurementLog* log);

  // Only measurement lines for which `keep` returns true are printed and
  // kept (default: all).
  void set_filter(std::function<bool(const Json&)> keep) {
    keep_ = std::move(keep);
  }

  const std::string& script_path() const { return path_; }

 private:
  std::function<bool(const Json&)> keep_;
  std::string suite_;
  std::string script_;
  std::string path_;
};

}  // namespace cohort::bench

#endif  // COHORT_BENCH_COMMON_PEER_H_
