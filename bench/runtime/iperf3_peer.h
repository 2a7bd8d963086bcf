// The runtime suite's peer: one iperf3 TCP stream on loopback, measured in
// the same run as cohort's tensor transfers (the physical limit the issue's
// target is stated against: >= 0.9x a single stream at 64 MiB).
//
// The measurement is the usual single-stream loopback iperf3 figure: a
// one-shot server `iperf3 -s -1 -B 127.0.0.1 -p P`, a client `iperf3 -c
// 127.0.0.1 -B 127.0.0.1 -p P -t SECONDS -P 1 -J`, and the receiver's rate
// (end.sum_received.bits_per_second). No fixed port: P is chosen free by
// the OS, and the client starts once the server's socket is listening
// (read from /proc/net/tcp, so no probe connection uses up the one-shot
// server). Both processes are ours, signalled by their
// process group only.
//
// Lines (suite "iperf3"; tcp_bw_recv_bytes is what the ratio divides by):
//   {"suite": "iperf3", "metric": "tcp_bw_recv", "params": {"streams": 1,
//    "seconds": S, "host": "127.0.0.1"}, "value": <Gbit/s>, "unit":
//    "Gbit/s", "rep": r}
//   ... "metric": "tcp_bw_recv_bytes" ... "value": <GB/s>, "unit": "GB/s"
//
// Thread safety: thread-compatible (call from one thread).
#ifndef COHORT_BENCH_RUNTIME_IPERF3_PEER_H_
#define COHORT_BENCH_RUNTIME_IPERF3_PEER_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "cohort/base/json.h"

namespace cohort::bench {

// The receiver's bits per second from the JSON report of `iperf3 -c ...
// -J` (`text` may carry other output before the report's first '{').
// InvalidArgument when it is not such a report; FailedPrecondition carrying
// iperf3's own "error" field when the report is an error.
absl::StatusOr<double> ParseIperf3ReceivedBitsPerSecond(absl::string_view text);

// Runs one iperf3 measurement of `seconds` seconds and returns its two
// lines (format above, "rep" = `rep`); prints nothing. Blocks about
// `seconds` + 1 s; gives up (killing both processes) after `seconds` + 30 s.
// Errors:
//  - NotFound: iperf3 is not installed (the message says how to install
//    it, or to pass --no-peer);
//  - DeadlineExceeded: the server never listened, or the client hung;
//  - Internal / FailedPrecondition: the client failed; the message carries
//    iperf3's error and the tail of its output.
// Where the two ends run: the server binds and the client dials `server`,
// the client binds `client`; `server_prefix` goes before the server's
// command (`ip netns exec cohort-h1` in the multi-host lab).
struct Iperf3Hosts {
  std::string server = "127.0.0.1";
  std::string client = "127.0.0.1";
  std::vector<std::string> server_prefix;
};
absl::StatusOr<std::vector<Json>> MeasureIperf3(int seconds, int rep,
                                                const Iperf3Hosts& hosts = {});

}  // namespace cohort::bench

#endif  // COHORT_BENCH_RUNTIME_IPERF3_PEER_H_
