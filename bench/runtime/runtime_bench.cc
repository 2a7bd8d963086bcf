#include "bench/runtime/runtime_bench.h"

#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <iostream>
#include <limits>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/random/random.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "bench/common/flags.h"
#include "bench/common/gang.h"
#include "bench/common/lab.h"
#include "bench/common/peer.h"
#include "bench/runtime/iperf3_peer.h"
#include "bench/runtime/server_cluster.h"
#include "cohort/base/json.h"
#include "cohort/base/status.h"
#include "cohort/base/subprocess.h"
#include "cohort/graph/builder.h"
#include "cohort/graph/kernels/array_ops.h"
#include "cohort/graph/kernels/elementwise_ops.h"
#include "cohort/graph/kernels/math_ops.h"
#include "cohort/graph/kernels/reduction_ops.h"
#include "cohort/graph/kernels/shape_ops.h"
#include "cohort/graph/kernels/state_ops.h"
#include "cohort/graph/local_session.h"
#include "cohort/runtime/grpc_session.h"

namespace cohort::bench {
namespace {

using Clock = std::chrono::steady_clock;

constexpr char kSuite[] = "runtime";
constexpr char kPs[] = "/job:ps/replica:0/task:0";
constexpr char kWorker0[] = "/job:worker/replica:0/task:0";
// Bounds every step, so that a wedged runtime fails the measurement
// (DeadlineExceeded naming what it waited for) instead of hanging the suite.
constexpr absl::Duration kStepTimeout = absl::Seconds(120);
constexpr absl::Duration kLoadSamplePeriod = absl::Seconds(5);
constexpr int kTransferWarmupSteps = 2;

struct Flags {
  int reps = 3;
  bool transfer = true;
  bool remote = true;
  bool overhead = true;
  std::vector<int64_t> sizes = {int64_t{1} << 20, int64_t{16} << 20,
                                int64_t{64} << 20};
  double transfer_seconds = 3.0;
  int transfer_min_steps = 5;
  int runs = 5000;
  int warmup = 500;
  int iperf_seconds = 5;
  int server_threads = 0;
  bool no_peer = false;
  // The multi-host lab (docs/lab.md): ps:0 on h1, worker:0 and the client
  // on h0, links capped at `rate`. `lab` brings the lab up and runs the
  // suite again inside h0 with `lab_inner`.
  bool lab = false;
  bool lab_inner = false;
  std::string rate = "5gbit";
};

// State of one run of the suite.
struct Bench {
  Flags flags;
  std::string exe;    // This binary, re-executed as `cohort server`.
  std::string token;  // The job token every server and client presents.
  MeasurementLog ours;
  // iperf3's lines, one copy per tensor size with "bytes" added to its
  // params: a ratio line matches the peer's params against cohort's
  // (bench/common), and the TCP figure stands against every size.
  MeasurementLog peer_per_size;
  int rc = 0;
};

double LoadAverage1m() {
  double load[1];
  return getloadavg(load, 1) == 1 ? Round3(load[0]) : -1;
}

// The lab's link rate while the suite runs inside the lab ("" otherwise):
// every line's params carry it, so that lab figures never mix with
// loopback ones. Set once, before any measurement.
std::string& LabRate() {
  static std::string rate;
  return rate;
}

// A measurement line of this suite, stamped with the load average.
Json Line(const std::string& metric, Json params, double value,
          const std::string& unit, int rep) {
  if (!LabRate().empty()) params["lab"] = LabRate();
  return Json{{"suite", kSuite},
              {"metric", metric},
              {"params", params},
              {"value", Round3(value)},
              {"unit", unit},
              {"rep", rep},
              {"loadavg_1m", LoadAverage1m()}};
}

// A failed measurement: an error line on stdout (and the message on
// stderr); the suite's exit status becomes 1.
void Fail(Bench& b, const std::string& what, const Json& extra = {}) {
  PrintErrorLine(kSuite, what, extra.is_object() ? extra : Json::object());
  std::cerr << "cohort bench runtime: " << what << "\n";
  b.rc = 1;
}

double Percentile(std::vector<double> v, int pct) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, v.size() * pct / 100)];
}

double Median(std::vector<double> v) { return Percentile(std::move(v), 50); }

double MicrosSince(Clock::time_point start) {
  return std::chrono::duration<double, std::micro>(Clock::now() - start)
      .count();
}

// CPU time (user + system) used by this process and the servers of a
// cluster while it runs: the cost of a step, which on a shared machine
// says more than the wall time alone (that also counts waiting for a core).
class CpuMeter {
 public:
  explicit CpuMeter(const ServerCluster& cluster)
      : cluster_(cluster), start_(Now()) {}

  // CPU microseconds per step since construction, over `steps` steps; -1
  // when a process could not be read (then the step failed anyway).
  double MicrosPerStep(size_t steps) const {
    const double now = Now();
    if (now < 0 || start_ < 0 || steps == 0) return -1;
    return Round3((now - start_) * 1e6 / static_cast<double>(steps));
  }

 private:
  double Now() const {
    absl::StatusOr<double> self = ProcessCpuSeconds(getpid());
    absl::StatusOr<double> servers = cluster_.CpuSeconds();
    return self.ok() && servers.ok() ? *self + *servers : -1;
  }

  const ServerCluster& cluster_;
  const double start_;
};

// --- Flags ------------------------------------------------------------------

// "64M", "16m", "512K", "1048576" -> bytes (K/M/G are binary).
bool ParseSize(absl::string_view text, int64_t* bytes) {
  int64_t scale = 1;
  if (!text.empty()) {
    switch (absl::ascii_toupper(text.back())) {
      case 'K':
        scale = int64_t{1} << 10;
        break;
      case 'M':
        scale = int64_t{1} << 20;
        break;
      case 'G':
        scale = int64_t{1} << 30;
        break;
    }
    if (scale != 1) text.remove_suffix(1);
  }
  int64_t n = 0;
  if (!absl::SimpleAtoi(text, &n) || n < 1) return false;
  *bytes = n * scale;
  // Whole float32 elements only.
  return *bytes % 4 == 0;
}

bool ParseFlags(const std::vector<std::string>& args, Flags* f,
                std::string& error) {
  FlagReader flags(args,
                   "flags: --reps N --only transfer,remote,overhead "
                   "--sizes 1M,16M,64M --transfer-seconds S "
                   "--transfer-min-steps N --runs N --warmup N "
                   "--iperf-seconds N --server-threads N --no-peer --quick "
                   "--lab --rate 5gbit");
  // --quick first, so that explicit flags override what it sets.
  if (flags.Has("--quick")) {
    f->reps = 1;
    f->sizes = {int64_t{1} << 20, int64_t{16} << 20};
    f->transfer_seconds = 0.5;
    f->runs = 500;
    f->warmup = 50;
    f->iperf_seconds = 1;
  }
  bool quick = false;
  std::set<std::string> only;
  while (flags.Next()) {
    if (flags.Is("--reps")) {
      flags.PositiveInt(f->reps);
    } else if (flags.Is("--only")) {
      if (flags.SubsetOf({"transfer", "remote", "overhead"}, only)) {
        f->transfer = only.count("transfer") > 0;
        f->remote = only.count("remote") > 0;
        f->overhead = only.count("overhead") > 0;
      }
    } else if (flags.Is("--sizes")) {
      flags.List<int64_t>(
          "must be sizes such as 64K,1M,16M (whole float32 elements) "
          "separated by commas",
          [](absl::string_view s, int64_t& bytes) {
            return ParseSize(s, &bytes);
          },
          f->sizes);
    } else if (flags.Is("--transfer-seconds")) {
      flags.PositiveNumber(f->transfer_seconds);
    } else if (flags.Is("--transfer-min-steps")) {
      flags.PositiveInt(f->transfer_min_steps);
    } else if (flags.Is("--runs")) {
      flags.PositiveInt(f->runs);
    } else if (flags.Is("--warmup")) {
      flags.NonNegativeInt(f->warmup);
    } else if (flags.Is("--iperf-seconds")) {
      flags.PositiveInt(f->iperf_seconds);
    } else if (flags.Is("--server-threads")) {
      flags.NonNegativeInt(f->server_threads);
    } else if (flags.Is("--lab")) {
      flags.Switch(f->lab);
    } else if (flags.Is("--lab-inner")) {
      flags.Switch(f->lab_inner);
    } else if (flags.Is("--rate")) {
      flags.Value(f->rate);
    } else if (flags.Is("--no-peer")) {
      flags.Switch(f->no_peer);
    } else if (flags.Is("--quick")) {
      flags.Switch(quick);  // applied above
    } else {
      flags.Unknown();
    }
  }
  error = flags.error();
  return flags.ok();
}

// --- Load sampling ----------------------------------------------------------

// Samples the 1-minute load average every kLoadSamplePeriod on a thread of
// its own, so that the results say how busy the (shared) machine was.
class LoadSampler {
 public:
  LoadSampler() : thread_([this] { Run(); }) {}
  ~LoadSampler() { Finish(); }

  // Stops sampling; returns the samples (at least the one taken now).
  std::vector<double> Finish() {
    if (!stop_.HasBeenNotified()) stop_.Notify();
    if (thread_.joinable()) thread_.join();
    samples_.push_back(LoadAverage1m());
    return samples_;
  }

 private:
  void Run() {
    do {
      samples_.push_back(LoadAverage1m());
    } while (!stop_.WaitForNotificationWithTimeout(kLoadSamplePeriod));
  }

  absl::Notification stop_;
  std::vector<double> samples_;  // Written by the thread until joined.
  std::thread thread_;
};

void PrintLoadLine(std::vector<double> samples, const std::string& command) {
  std::sort(samples.begin(), samples.end());
  PrintJsonLine(Json{
      {"suite", "env"},
      {"bench", kSuite},
      {"when", "during"},
      {"command", command},
      {"loadavg_1m_samples",
       {{"min", samples.front()},
        {"median", Median(samples)},
        {"max", samples.back()},
        {"n", samples.size()}}},
      {"note",
       "1-minute load average sampled every 5 s from getloadavg; it counts "
       "this suite's own server processes as well as whatever else runs on "
       "the machine"}});
}

// --- Sessions ---------------------------------------------------------------

absl::StatusOr<std::unique_ptr<runtime::GrpcSession>> OpenSession(
    const Bench& b, const std::string& target, const GraphDef& graph) {
  runtime::GrpcSessionOptions options;
  options.security.job_token = b.token;
  auto session = runtime::GrpcSession::Create(target, graph, options);
  if (!session.ok()) {
    return absl::Status(session.status().code(),
                        absl::StrCat("creating a session on ", target, ": ",
                                     session.status().message()));
  }
  return session;
}

absl::StatusOr<Session::CallableHandle> MakeCallable(
    Session& session, std::vector<std::string> feeds,
    std::vector<std::string> fetches) {
  CallableOptions options;
  options.feeds = std::move(feeds);
  options.fetches = std::move(fetches);
  options.run_options.timeout = kStepTimeout;
  return session.MakeCallable(options);
}

struct StepTimes {
  std::vector<double> us;      // Wall time of each timed run.
  double cpu_us_per_step = 0;  // CpuMeter over the timed runs.
};

// Times `runs` RunCallables (after `warmup` untimed ones) of a callable
// with one float feed and one float fetch; `expect(x, y)` checks each
// result. CPU time is that of this process and `cluster`'s servers.
absl::StatusOr<StepTimes> TimeScalarSteps(
    Session& session, Session::CallableHandle handle, int warmup, int runs,
    const ServerCluster& cluster,
    const std::function<absl::Status(float x, float y)>& expect) {
  StepTimes times;
  std::vector<double>& us = times.us;
  us.reserve(runs);
  std::vector<Tensor> out;
  std::optional<CpuMeter> cpu;
  for (int i = 0; i < warmup + runs; ++i) {
    if (i == warmup) cpu.emplace(cluster);
    // Small integers: every result of the graphs here is exact in float.
    const float x = static_cast<float>(i % 7 + 1);
    const std::vector<Tensor> feeds = {Tensor(x)};
    const Clock::time_point start = Clock::now();
    absl::Status s = session.RunCallable(handle, feeds, &out);
    const double elapsed = MicrosSince(start);
    COHORT_RETURN_IF_ERROR(s);
    if (out.size() != 1 || out[0].dtype() != DT_FLOAT ||
        out[0].NumElements() != 1) {
      return absl::InternalError("the step fetched no float scalar");
    }
    COHORT_RETURN_IF_ERROR(expect(x, out[0].flat<float>()(0)));
    if (i >= warmup) us.push_back(elapsed);
  }
  times.cpu_us_per_step = cpu->MicrosPerStep(us.size());
  return times;
}

// --- tensor_transfer_throughput ---------------------------------------------

// A variable of `bytes` bytes (float32, all 1.0) on ps:0, read there and
// summed on worker:0. The Fill runs on ps:0, so the graph carries only the
// shape, not the data.
absl::StatusOr<GraphDef> TransferGraph(int64_t bytes) {
  const int64_t n = bytes / 4;
  if (n > std::numeric_limits<int32_t>::max()) {
    return absl::InvalidArgumentError(
        absl::StrCat(bytes,
                     " bytes is more float32 elements than an int32 "
                     "shape dimension holds"));
  }
  Scope root = Scope::NewRootScope();
  Scope ps = root.WithDevice(kPs);
  Output fill =
      ops::Fill(ps.WithOpName("fill"),
                ops::Const(ps, Tensor::Vec<int32_t>({static_cast<int32_t>(n)})),
                ops::Const(ps, 1.0f));
  ops::Variable v = ops::MakeVariable(ps, absl::StrCat("v", bytes), fill);
  ops::GlobalVariablesInitializer(ps.WithOpName("init"));
  ops::Sum(root.WithDevice(kWorker0).WithOpName("sum"), v.value,
           ops::Const(root.WithDevice(kWorker0), 0));
  GraphDef graph;
  COHORT_RETURN_IF_ERROR(root.ToGraphDef(&graph));
  return graph;
}

struct TransferCase {
  int64_t bytes = 0;
  std::unique_ptr<runtime::GrpcSession> session;
  Session::CallableHandle handle = 0;
  bool failed = false;
};

Json TransferParams(int64_t bytes) {
  return Json{{"bytes", bytes}, {"dtype", "float32"}, {"tasks", 2}};
}

absl::Status CheckSum(const std::vector<Tensor>& out, int64_t bytes) {
  const double want = static_cast<double>(bytes / 4);
  if (out.size() != 1 || out[0].dtype() != DT_FLOAT ||
      out[0].NumElements() != 1) {
    return absl::InternalError("the transfer step fetched no float scalar");
  }
  const double got = out[0].flat<float>()(0);
  // Sums of ones stay exact in float up to 2^24 elements; leave room for
  // a different summation order above that.
  if (std::abs(got - want) > want * 1e-6) {
    return absl::InternalError(
        absl::StrCat("the sum of the received tensor is ", got, ", expected ",
                     want, ": the tensor did not arrive intact"));
  }
  return absl::OkStatus();
}

// Opens the session, initialises the variable and runs the warm-up steps.
absl::Status PrepareTransfer(const Bench& b, const std::string& target,
                             TransferCase* c) {
  COHORT_ASSIGN_OR_RETURN(GraphDef graph, TransferGraph(c->bytes));
  COHORT_ASSIGN_OR_RETURN(c->session, OpenSession(b, target, graph));
  COHORT_RETURN_IF_ERROR(c->session->Run({}, {}, {"init"}, nullptr));
  COHORT_ASSIGN_OR_RETURN(c->handle, MakeCallable(*c->session, {}, {"sum:0"}));
  std::vector<Tensor> out;
  for (int i = 0; i < kTransferWarmupSteps; ++i) {
    COHORT_RETURN_IF_ERROR(c->session->RunCallable(c->handle, {}, &out));
    COHORT_RETURN_IF_ERROR(CheckSum(out, c->bytes));
  }
  return absl::OkStatus();
}

absl::Status MeasureTransfer(Bench& b, const ServerCluster& cluster,
                             TransferCase& c, int rep) {
  const Flags& f = b.flags;
  std::vector<double> step_us;
  std::vector<Tensor> out;
  const CpuMeter cpu(cluster);
  const Clock::time_point start = Clock::now();
  double elapsed_us = 0;
  do {
    const Clock::time_point step_start = Clock::now();
    COHORT_RETURN_IF_ERROR(c.session->RunCallable(c.handle, {}, &out));
    step_us.push_back(MicrosSince(step_start));
    COHORT_RETURN_IF_ERROR(CheckSum(out, c.bytes));
    elapsed_us = MicrosSince(start);
  } while (elapsed_us < f.transfer_seconds * 1e6 ||
           static_cast<int>(step_us.size()) < f.transfer_min_steps);
  const double gb_s =
      static_cast<double>(c.bytes) * step_us.size() / (elapsed_us * 1e-6) / 1e9;
  Json line = Line("tensor_transfer_throughput", TransferParams(c.bytes), gb_s,
                   "GB/s", rep);
  line["steps"] = step_us.size();
  line["step_ms_p50"] = Round3(Median(step_us) / 1e3);
  line["cpu_us_per_step"] = cpu.MicrosPerStep(step_us.size());
  line["note"] =
      "ps:0 variable read -> worker:0 Sum, separate `cohort server` "
      "processes; bytes x steps / wall time of back-to-back callable steps, "
      "nothing subtracted";
  b.ours.Print(line);
  return absl::OkStatus();
}

void RunIperf3(Bench& b, int rep) {
  Iperf3Hosts hosts;
  if (b.flags.lab_inner) {
    hosts.server = Lab::Address(1);
    hosts.client = Lab::Address(0);
    hosts.server_prefix = Lab::ExecPrefix(1);
  }
  absl::StatusOr<std::vector<Json>> lines =
      MeasureIperf3(b.flags.iperf_seconds, rep, hosts);
  if (!lines.ok()) {
    Fail(b, absl::StrCat("iperf3 peer: ", lines.status().message()),
         {{"peer", "iperf3"}, {"rep", rep}});
    return;
  }
  for (Json& line : *lines) {
    line["loadavg_1m"] = LoadAverage1m();
    if (!LabRate().empty()) line["params"]["lab"] = LabRate();
    PrintJsonLine(line);
    if (line["metric"] != "tcp_bw_recv_bytes") continue;
    for (int64_t bytes : b.flags.sizes) {
      Json copy = line;
      copy["params"]["bytes"] = bytes;
      b.peer_per_size.Add(copy);
    }
  }
}

void PrintTransferRatios(Bench& b, const std::vector<TransferCase>& cases) {
  // iperf3 failed in every repetition: its error lines said so already.
  if (b.peer_per_size.lines().empty()) return;
  for (const TransferCase& c : cases) {
    if (c.failed) continue;  // Its error line says why.
    RatioSpec spec;
    spec.metric = "tensor_transfer_throughput";
    spec.params = {{"bytes", c.bytes}};
    spec.peer_metric = "tcp_bw_recv_bytes";
    spec.peer_params = {{"streams", 1}};
    spec.lower_is_better = false;
    spec.note = absl::StrCat(
        "cohort tensor GB/s (ps:0 -> worker:0 through RecvTensor) / one "
        "iperf3 TCP stream ",
        LabRate().empty()
            ? std::string("on loopback")
            : absl::StrCat("from h1 to h0 across a lab link capped at ",
                           LabRate()),
        ", medians over repetitions of the same run");
    absl::Status s =
        PrintRatio(kSuite, "iperf3", b.ours, b.peer_per_size, spec);
    if (!s.ok()) {
      Fail(b, absl::StrCat("no tensor_transfer_throughput ratio for ", c.bytes,
                           " bytes: ", s.message()));
    }
  }
}

// --- remote_step_p50 / p99 ----------------------------------------------

// x (float scalar) fed on ps:0, y = 2x on worker:0: one 4-byte tensor
// crosses the tasks per step.
absl::StatusOr<GraphDef> RemoteStepGraph() {
  Scope root = Scope::NewRootScope();
  Output x = ops::Placeholder(root.WithOpName("x").WithDevice(kPs), DT_FLOAT,
                              PartialTensorShape({}));
  Scope w = root.WithDevice(kWorker0);
  ops::Mul(w.WithOpName("y"), x, ops::Const(w, 2.0f));
  GraphDef graph;
  COHORT_RETURN_IF_ERROR(root.ToGraphDef(&graph));
  return graph;
}

struct RemoteCase {
  std::unique_ptr<runtime::GrpcSession> session;
  Session::CallableHandle handle = 0;
};

absl::Status PrepareRemote(const Bench& b, const std::string& target,
                           RemoteCase* c) {
  COHORT_ASSIGN_OR_RETURN(GraphDef graph, RemoteStepGraph());
  COHORT_ASSIGN_OR_RETURN(c->session, OpenSession(b, target, graph));
  COHORT_ASSIGN_OR_RETURN(c->handle, MakeCallable(*c->session, {"x"}, {"y:0"}));
  return absl::OkStatus();
}

absl::Status MeasureRemote(Bench& b, const ServerCluster& cluster,
                           RemoteCase& c, int rep) {
  COHORT_ASSIGN_OR_RETURN(
      StepTimes times,
      TimeScalarSteps(*c.session, c.handle, b.flags.warmup, b.flags.runs,
                      cluster, [](float x, float y) {
                        if (y == 2 * x) return absl::OkStatus();
                        return absl::InternalError(
                            absl::StrCat("remote step: fed ", x, ", fetched ",
                                         y, ", expected ", 2 * x));
                      }));
  const std::vector<double>& us = times.us;
  const Json params = {
      {"bytes", 4}, {"tasks", 2}, {"path", "callable"}, {"runs", us.size()}};
  const std::string note =
      "client in the bench process -> master on worker:0 -> ps:0 "
      "(Placeholder) -> worker:0 (Mul) through RecvTensor -> client";
  for (auto [metric, pct] : {std::pair<const char*, int>{"remote_step_p50", 50},
                             {"remote_step_p99", 99}}) {
    Json line = Line(metric, params, Percentile(us, pct), "us", rep);
    line["cpu_us_per_step"] = times.cpu_us_per_step;
    line["note"] = note;
    b.ours.Print(line);
  }
  return absl::OkStatus();
}

// --- step_overhead_vs_local ---------------------------------------------

// The graph suite's 10-node scalar graph: a Placeholder and nine chained
// Add/Mul nodes.
absl::StatusOr<GraphDef> ChainGraph(std::string* fetch) {
  Scope root = Scope::NewRootScope();
  Output x =
      ops::Placeholder(root.WithOpName("x"), DT_FLOAT, PartialTensorShape({}));
  Output y = x;
  for (int i = 0; i < 9; ++i) {
    y = i % 2 == 0 ? ops::Add(root, y, y) : ops::Mul(root, y, x);
  }
  GraphDef graph;
  COHORT_RETURN_IF_ERROR(root.ToGraphDef(&graph));
  *fetch = y.name();
  return graph;
}

// y of the chain for x: four rounds of (y + y) * x, then a last doubling.
float ChainValue(float x) {
  float y = x;
  for (int i = 0; i < 9; ++i) y = i % 2 == 0 ? y + y : y * x;
  return y;
}

struct OverheadCase {
  std::unique_ptr<Session> local;
  Session::CallableHandle local_handle = 0;
  std::unique_ptr<runtime::GrpcSession> grpc;
  Session::CallableHandle grpc_handle = 0;
  std::vector<double> local_p50, grpc_p50;
};

absl::Status PrepareOverhead(const Bench& b, const std::string& target,
                             OverheadCase* c) {
  std::string fetch;
  COHORT_ASSIGN_OR_RETURN(GraphDef graph, ChainGraph(&fetch));
  COHORT_ASSIGN_OR_RETURN(c->local, LocalSession::Create(graph));
  COHORT_ASSIGN_OR_RETURN(c->local_handle,
                          MakeCallable(*c->local, {"x"}, {fetch}));
  COHORT_ASSIGN_OR_RETURN(c->grpc, OpenSession(b, target, graph));
  COHORT_ASSIGN_OR_RETURN(c->grpc_handle,
                          MakeCallable(*c->grpc, {"x"}, {fetch}));
  return absl::OkStatus();
}

absl::Status MeasureOverhead(Bench& b, const ServerCluster& cluster,
                             OverheadCase& c, int rep) {
  auto expect = [](float x, float y) {
    if (y == ChainValue(x)) return absl::OkStatus();
    return absl::InternalError(absl::StrCat("10-node graph: fed ", x,
                                            ", fetched ", y, ", expected ",
                                            ChainValue(x)));
  };
  for (bool grpc : {false, true}) {
    Session& session = grpc ? static_cast<Session&>(*c.grpc) : *c.local;
    COHORT_ASSIGN_OR_RETURN(
        StepTimes times,
        TimeScalarSteps(session, grpc ? c.grpc_handle : c.local_handle,
                        b.flags.warmup, b.flags.runs, cluster, expect));
    const std::vector<double>& us = times.us;
    Json params = {{"nodes", 10},
                   {"path", "callable"},
                   {"session", grpc ? "grpc" : "local"},
                   {"runs", us.size()}};
    if (grpc) params["server"] = "child_process";
    (grpc ? c.grpc_p50 : c.local_p50).push_back(Percentile(us, 50));
    for (auto [metric, pct] :
         {std::pair<const char*, int>{"session_run_overhead_p50", 50},
          {"session_run_overhead_p99", 99}}) {
      Json line = Line(metric, params, Percentile(us, pct), "us", rep);
      // The idle server counts too for the local session: its heartbeats
      // are the only noise there.
      line["cpu_us_per_step"] = times.cpu_us_per_step;
      b.ours.Print(line);
    }
  }
  return absl::OkStatus();
}

void PrintOverheadRatio(const OverheadCase& c) {
  const double grpc = Median(c.grpc_p50), local = Median(c.local_p50);
  PrintJsonLine(
      Json{{"suite", kSuite},
           {"metric", "step_overhead_vs_local"},
           {"params", {{"nodes", 10}, {"path", "callable"}}},
           {"value", Round3(local > 0 ? grpc / local : 0)},
           {"unit", "x"},
           {"grpc_p50_us", Round3(grpc)},
           {"local_p50_us", Round3(local)},
           {"reps", std::min(c.grpc_p50.size(), c.local_p50.size())},
           {"better", "lower"},
           {"note",
            "median over repetitions of each p50: GrpcSession to a one-task "
            "`cohort server` child process (Server::CreateLocal's cluster) / "
            "LocalSession in the bench process"}});
}

// --- The run ------------------------------------------------------------

std::string SelfPath() { return ExecutablePath(); }

std::string NewJobToken() {
  absl::BitGen gen;
  return absl::StrFormat("%016x%016x", absl::Uniform<uint64_t>(gen),
                         absl::Uniform<uint64_t>(gen));
}

absl::StatusOr<std::unique_ptr<ServerCluster>> StartCluster(
    const Bench& b, const std::vector<std::pair<std::string, int>>& jobs) {
  ServerCluster::Options options;
  options.exe = b.exe;
  options.job_token = b.token;
  options.threads = b.flags.server_threads;
  if (b.flags.lab_inner) {
    // This process and worker:0 on h0; ps:0 on h1, across the link.
    options.host = [](const std::string& job) {
      return Lab::Address(job == "ps" ? 1 : 0);
    };
    options.prefix = [](const std::string& job) {
      return job == "ps" ? Lab::ExecPrefix(1) : std::vector<std::string>{};
    };
  }
  return ServerCluster::Start(jobs, options);
}

// Everything a run holds. The clusters come first so that they are
// destroyed last: sessions close while their servers still run (Teardown
// does the same explicitly).
struct Fixture {
  std::unique_ptr<ServerCluster> two_tasks;  // ps:0, worker:0
  std::unique_ptr<ServerCluster> one_task;   // localhost:0
  std::vector<TransferCase> transfers;
  RemoteCase remote;
  OverheadCase overhead;
  bool remote_ok = false;
  bool overhead_ok = false;
};

// Starts the servers and opens the sessions; what fails is reported and
// left out of the repetitions.
void Prepare(Bench& b, Fixture& x) {
  const Flags& f = b.flags;
  if (f.transfer || f.remote) {
    auto cluster = StartCluster(b, {{"ps", 1}, {"worker", 1}});
    if (!cluster.ok()) {
      Fail(b, absl::StrCat("starting the cluster {ps:0, worker:0}: ",
                           cluster.status().message()));
    } else {
      x.two_tasks = *std::move(cluster);
    }
  }
  const absl::StatusOr<std::string> master =
      x.two_tasks != nullptr
          ? x.two_tasks->target("worker", 0)
          : absl::StatusOr<std::string>(
                absl::UnavailableError("the cluster did not start"));
  for (int64_t bytes : f.transfer ? f.sizes : std::vector<int64_t>{}) {
    TransferCase& c = x.transfers.emplace_back();
    c.bytes = bytes;
    absl::Status s = master.status();
    if (s.ok()) s = PrepareTransfer(b, *master, &c);
    if (!s.ok()) {
      c.failed = true;
      if (x.two_tasks == nullptr) continue;  // Reported above.
      Fail(b,
           absl::StrCat("preparing the ", bytes,
                        "-byte transfer: ", s.message()),
           {{"metric", "tensor_transfer_throughput"},
            {"params", TransferParams(bytes)}});
    }
  }
  if (f.remote && master.ok()) {
    absl::Status s = PrepareRemote(b, *master, &x.remote);
    if (!s.ok()) {
      Fail(b, absl::StrCat("preparing the remote step: ", s.message()),
           {{"metric", "remote_step_p50"}});
    }
    x.remote_ok = s.ok();
  }
  if (f.overhead) {
    auto cluster = StartCluster(b, {{"localhost", 1}});
    absl::Status s = cluster.status();
    if (s.ok()) {
      x.one_task = *std::move(cluster);
      auto target = x.one_task->target("localhost", 0);
      s = target.ok() ? PrepareOverhead(b, *target, &x.overhead)
                      : target.status();
    }
    if (!s.ok()) {
      Fail(b, absl::StrCat("preparing the local/grpc overhead: ", s.message()),
           {{"metric", "step_overhead_vs_local"}});
    }
    x.overhead_ok = s.ok();
  }
}

void RunRep(Bench& b, Fixture& x, int rep) {
  for (TransferCase& c : x.transfers) {
    if (c.failed) continue;
    absl::Status s = MeasureTransfer(b, *x.two_tasks, c, rep);
    if (!s.ok()) {
      c.failed = true;
      Fail(
          b,
          absl::StrCat("tensor transfer of ", c.bytes, " bytes: ", s.message()),
          {{"metric", "tensor_transfer_throughput"},
           {"params", TransferParams(c.bytes)},
           {"rep", rep}});
    }
  }
  // Right after cohort's transfers, so both see the same machine.
  if (b.flags.transfer && !b.flags.no_peer) RunIperf3(b, rep);
  if (x.remote_ok) {
    absl::Status s = MeasureRemote(b, *x.two_tasks, x.remote, rep);
    if (!s.ok()) {
      x.remote_ok = false;
      Fail(b, absl::StrCat("remote step: ", s.message()),
           {{"metric", "remote_step_p50"}, {"rep", rep}});
    }
  }
  if (x.overhead_ok) {
    absl::Status s = MeasureOverhead(b, *x.one_task, x.overhead, rep);
    if (!s.ok()) {
      x.overhead_ok = false;
      Fail(b, absl::StrCat("local/grpc overhead: ", s.message()),
           {{"metric", "step_overhead_vs_local"}, {"rep", rep}});
    }
  }
}

// Closes the sessions, then stops the servers, each of which must exit
// cleanly.
void Teardown(Bench& b, Fixture& x) {
  x.transfers.clear();
  x.remote = RemoteCase();
  x.overhead = OverheadCase();
  for (auto* cluster : {&x.two_tasks, &x.one_task}) {
    if (*cluster == nullptr) continue;
    absl::Status s = (*cluster)->Stop();
    if (!s.ok()) Fail(b, std::string(s.message()));
    cluster->reset();
  }
}

// `--lab`: two lab hosts with links capped at --rate, and the suite again
// inside h0 (`--lab-inner`, the other flags as given): only a process in a
// lab host reaches the lab's addresses. Its lines go to stdout as they are.
int RunInLab(const Flags& f, const std::vector<std::string>& args) {
  Lab lab;
  if (absl::Status s = lab.Up(2, f.rate); !s.ok()) {
    PrintErrorLine(kSuite, std::string(s.message()));
    return 1;
  }
  std::vector<std::string> inner = SelfCommand(kSuite);
  for (const std::string& a : args) {
    if (a != "--lab") inner.push_back(a);
  }
  inner.push_back("--lab-inner");
  absl::StatusOr<std::vector<std::string>> out =
      lab.RunOnHosts({inner}, absl::Minutes(30));
  if (!out.ok()) {
    PrintErrorLine(kSuite, std::string(out.status().message()));
    return 1;
  }
  // Its JSON lines to stdout, its diagnostics (the same pipe) to stderr.
  for (absl::string_view line : absl::StrSplit((*out)[0], '\n')) {
    if (line.empty()) continue;
    (absl::StartsWith(line, "{") ? std::cout : std::cerr) << line << "\n";
  }
  std::cout << std::flush;
  return 0;
}

}  // namespace

int RunRuntimeBench(const std::vector<std::string>& args) {
  Bench b;
  std::string error;
  if (!ParseFlags(args, &b.flags, error)) {
    std::cerr << "cohort bench runtime: " << error << "\n";
    return 2;
  }
  if (b.flags.lab && !b.flags.lab_inner) return RunInLab(b.flags, args);
  if (b.flags.lab_inner) {
    LabRate() = b.flags.rate;
    b.flags.overhead = false;  // a loopback figure: not a lab one
  }
  b.exe = SelfPath();
  b.token = NewJobToken();
  std::string command = "cohort bench runtime";
  for (const std::string& a : args) absl::StrAppend(&command, " ", a);
  PrintEnvLine(kSuite, "start");
  LoadSampler load;
  Fixture x;
  Prepare(b, x);
  for (int rep = 0; rep < b.flags.reps; ++rep) RunRep(b, x, rep);
  if (b.flags.transfer && !b.flags.no_peer) PrintTransferRatios(b, x.transfers);
  if (x.overhead_ok) PrintOverheadRatio(x.overhead);
  Teardown(b, x);
  PrintLoadLine(load.Finish(), command);
  PrintEnvLine(kSuite, "end");
  return b.rc;
}

}  // namespace cohort::bench
