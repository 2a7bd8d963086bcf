#include "bench/runtime/iperf3_peer.h"

#include <arpa/inet.h>
#include <sys/types.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bench/runtime/child_process.h"
#include "cohort/base/status.h"
#include "cohort/rpc/socket.h"

namespace cohort::bench {
namespace {

constexpr char kIperf3[] = "iperf3";
constexpr char kHost[] = "127.0.0.1";
// How long the one-shot server may take to listen (it is a fork and a
// bind; seconds only on a machine that is thrashing).
constexpr absl::Duration kListenTimeout = absl::Seconds(10);
// iperf3 takes `seconds` plus its set-up and the final exchange of results.
constexpr absl::Duration kClientSlack = absl::Seconds(30);

double Round3(double v) { return std::round(v * 1000.0) / 1000.0; }

// True when `address`:`port` has a listening TCP socket in the network
// namespace of process `pid`. /proc/PID/net/tcp rather than a probe
// connect: iperf3 -s -1 serves exactly one connection, and a probe would be
// it; and the server's own view, which in the lab is another host's.
bool IsListening(pid_t pid, const std::string& address, int port) {
  in_addr want{};
  if (inet_pton(AF_INET, address.c_str(), &want) != 1) return false;
  std::ifstream in(absl::StrCat("/proc/", pid, "/net/tcp"));
  std::string line;
  std::getline(in, line);  // Header.
  while (std::getline(in, line)) {
    unsigned address = 0, local_port = 0, state = 0;
    // "  0: 0100007F:1517 00000000:0000 0A ...": addresses are hex in
    // network byte order read as a host-order (little-endian) integer.
    if (std::sscanf(line.c_str(), " %*d: %8X:%4X %*8X:%*4X %2X", &address,
                    &local_port, &state) != 3) {
      continue;
    }
    constexpr unsigned kListen = 0x0A;
    if (address == want.s_addr && static_cast<int>(local_port) == port &&
        state == kListen) {
      return true;
    }
  }
  return false;
}

absl::Status AwaitListening(ChildProcess& server, const std::string& host,
                            int port) {
  const absl::Time deadline = absl::Now() + kListenTimeout;
  while (!IsListening(server.pid(), host, port)) {
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "iperf3 server (pid ", server.pid(), ") did not listen on ", host,
          ":", port, " within ", absl::FormatDuration(kListenTimeout),
          "; its output ends: ", server.Tail()));
    }
    // A server that exited (port taken since PickFreePort) never listens.
    if (server.AwaitExit(absl::Milliseconds(10))) {
      const launch::ExitInfo how = server.Stop(absl::ZeroDuration());
      return absl::UnavailableError(absl::StrCat(
          "iperf3 server on ", host, ":", port, " ", how.Describe(),
          " before listening; its output ends: ", server.Tail()));
    }
  }
  return absl::OkStatus();
}

absl::Status NotInstalled(const absl::Status& spawn) {
  if (!absl::IsNotFound(spawn)) return spawn;
  return absl::NotFoundError(absl::StrCat(
      spawn.message(),
      ". The runtime suite's peer needs iperf3 (apt-get install iperf3, or "
      "scripts/setup.sh); pass --no-peer to run without it"));
}

}  // namespace

absl::StatusOr<double> ParseIperf3ReceivedBitsPerSecond(
    absl::string_view text) {
  const size_t brace = text.find('{');
  if (brace == absl::string_view::npos) {
    return absl::InvalidArgumentError(
        "iperf3 printed no JSON report (was it run with -J?)");
  }
  // iperf3 -J prints one JSON object; anything after it (a warning on
  // stderr, which shares the pipe) is not part of it.
  const size_t end = text.rfind('}');
  COHORT_ASSIGN_OR_RETURN(Json report,
                          ParseJson(text.substr(brace, end - brace + 1),
                                    "the iperf3 client's JSON report"));
  if (report.contains("error") && report["error"].is_string()) {
    return absl::FailedPreconditionError(
        absl::StrCat("iperf3: ", report["error"].get<std::string>()));
  }
  const Json* bps = nullptr;
  if (report.contains("end") && report["end"].contains("sum_received")) {
    bps = &report["end"]["sum_received"]["bits_per_second"];
  }
  if (bps == nullptr || !bps->is_number() || bps->get<double>() <= 0) {
    return absl::InvalidArgumentError(
        "the iperf3 report has no positive end.sum_received.bits_per_second");
  }
  return bps->get<double>();
}

absl::StatusOr<std::vector<Json>> MeasureIperf3(int seconds, int rep,
                                                const Iperf3Hosts& hosts) {
  COHORT_ASSIGN_OR_RETURN(int port, rpc::PickFreePort(kHost));
  const std::string port_text = std::to_string(port);
  std::vector<std::string> server_argv = hosts.server_prefix;
  for (const std::string& a :
       {std::string(kIperf3), std::string("-s"), std::string("-1"),
        std::string("-B"), hosts.server, std::string("-p"), port_text}) {
    server_argv.push_back(a);
  }
  absl::StatusOr<std::unique_ptr<ChildProcess>> server =
      ChildProcess::Start("iperf3 server", server_argv);
  if (!server.ok()) return NotInstalled(server.status());
  COHORT_RETURN_IF_ERROR(AwaitListening(**server, hosts.server, port));

  COHORT_ASSIGN_OR_RETURN(
      auto client,
      ChildProcess::Start(
          "iperf3 client",
          {kIperf3, "-c", hosts.server, "-B", hosts.client, "-p", port_text,
           "-t", std::to_string(seconds), "-P", "1", "-J"}));
  COHORT_ASSIGN_OR_RETURN(
      launch::ExitInfo how,
      client->WaitForExit(absl::Seconds(seconds) + kClientSlack));
  absl::StatusOr<double> bps =
      ParseIperf3ReceivedBitsPerSecond(client->output());
  // The one-shot server exits after its client; a short grace is plenty.
  (*server)->Stop(absl::Seconds(2));
  if (!bps.ok() || !how.ok()) {
    return absl::InternalError(absl::StrCat(
        "iperf3 client to ", hosts.server, ":", port, " ", how.Describe(), ": ",
        bps.ok() ? "a report was printed anyway" : bps.status().message()));
  }
  const Json params = {
      {"streams", 1}, {"seconds", seconds}, {"host", hosts.server}};
  return std::vector<Json>{
      {{"suite", "iperf3"},
       {"metric", "tcp_bw_recv"},
       {"params", params},
       {"value", Round3(*bps / 1e9)},
       {"unit", "Gbit/s"},
       {"rep", rep}},
      {{"suite", "iperf3"},
       {"metric", "tcp_bw_recv_bytes"},
       {"params", params},
       {"value", Round3(*bps / 8e9)},
       {"unit", "GB/s"},
       {"rep", rep}},
  };
}

}  // namespace cohort::bench
