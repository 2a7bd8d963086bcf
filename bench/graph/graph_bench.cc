#include "bench/graph/graph_bench.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "bench/common/flags.h"
#include "bench/common/peer.h"
#include "cohort/base/json.h"
#include "cohort/base/subprocess.h"
#include "cohort/graph/builder.h"
#include "cohort/graph/kernels/array_ops.h"
#include "cohort/graph/kernels/blas.h"
#include "cohort/graph/kernels/elementwise_ops.h"
#include "cohort/graph/kernels/math_ops.h"
#include "cohort/graph/kernels/nn_ops.h"
#include "cohort/graph/kernels/reduction_ops.h"
#include "cohort/graph/local_session.h"

#ifndef COHORT_BENCH_GRAPH_DIR
#define COHORT_BENCH_GRAPH_DIR "bench/graph"
#endif

namespace cohort::bench {

absl::Status CheckMatMul(const Tensor& a, const Tensor& b, const Tensor& c,
                         int n) {
  if (c.dtype() != DT_FLOAT || c.dims() != 2 || c.dim_size(0) != n ||
      c.dim_size(1) != n) {
    return absl::DataLossError(absl::StrCat("MatMul of two ", n, " x ", n,
                                            " matrices returned shape ",
                                            c.shape().DebugString()));
  }
  const float* pa = a.data<float>();
  const float* pb = b.data<float>();
  const float* pc = c.data<float>();
  std::vector<int> rows;
  if (n <= 256) {
    for (int i = 0; i < n; ++i) rows.push_back(i);
  } else {
    for (int k = 0; k <= 32; ++k) rows.push_back(k * (n - 1) / 32);
  }
  const double eps = std::numeric_limits<float>::epsilon();
  std::vector<double> sum(n), magnitude(n);
  for (int i : rows) {
    std::fill(sum.begin(), sum.end(), 0.0);
    std::fill(magnitude.begin(), magnitude.end(), 0.0);
    for (int k = 0; k < n; ++k) {
      const double aik = pa[int64_t{i} * n + k];
      const float* brow = pb + int64_t{k} * n;
      for (int j = 0; j < n; ++j) {
        sum[j] += aik * brow[j];
        magnitude[j] += std::abs(aik * brow[j]);
      }
    }
    for (int j = 0; j < n; ++j) {
      const double got = pc[int64_t{i} * n + j];
      const double tolerance = 2.0 * n * eps * magnitude[j] + 1e-30;
      if (!(std::abs(got - sum[j]) <= tolerance)) {
        return absl::DataLossError(absl::StrCat(
            "MatMul (n=", n, ", ", Blas::Description(), ") element [", i, ",",
            j, "] is ", got, " where ", sum[j], " +- ", tolerance,
            " is due; the figure would time a wrong product"));
      }
    }
  }
  return absl::OkStatus();
}

namespace {

using Clock = std::chrono::steady_clock;

struct Flags {
  int reps = 3;
  std::vector<int> sizes = {256, 1024, 2048};
  double min_seconds = 0.5;
  int runs = 20000;
  bool matmul = true;
  bool session = true;
  bool kernels = true;
  // Elements of each kernel benchmark's float32 input (64 MiB).
  int64_t kernel_elements = int64_t{16} << 20;
  std::string python = "/usr/bin/python3";
  std::string numpy_script =
      std::string(COHORT_BENCH_GRAPH_DIR) + "/numpy_matmul.py";
  bool no_peer = false;
};

void Emit(const std::string& metric, const Json& params, double value,
          const std::string& unit, int rep) {
  Json j = {{"suite", "graph"}, {"metric", metric}, {"params", params},
            {"value", value},   {"unit", unit},     {"rep", rep}};
  std::cout << j.dump() << std::endl;
}

// A failed measurement: an error line on stdout (and the message on
// stderr); returns the exit code 1.
int Fail(const std::string& what) {
  PrintErrorLine("graph", what);
  std::cerr << "cohort bench graph: " << what << "\n";
  return 1;
}

template <typename T>
std::string Str(const T& status) {
  return status.ToString();
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

bool ParseFlags(const std::vector<std::string>& args, Flags* f,
                std::string& error) {
  FlagReader flags(args,
                   "flags: --reps N --only matmul,session,kernels "
                   "--sizes 256,1024,2048 --min-seconds S --runs N "
                   "--kernel-mib 64 --python PATH --numpy-script PATH "
                   "--no-peer --quick");
  // --quick first, so that explicit flags override what it sets.
  if (flags.Has("--quick")) {
    f->reps = 1;
    f->sizes = {256};
    f->min_seconds = 0.1;
    f->runs = 2000;
    f->kernel_elements = int64_t{1} << 20;
  }
  bool quick = false;
  std::set<std::string> only;
  int mib = 0;
  while (flags.Next()) {
    if (flags.Is("--reps")) {
      flags.PositiveInt(f->reps);
    } else if (flags.Is("--sizes")) {
      flags.PositiveIntList(f->sizes);
    } else if (flags.Is("--min-seconds")) {
      flags.PositiveNumber(f->min_seconds);
    } else if (flags.Is("--runs")) {
      flags.PositiveInt(f->runs);
    } else if (flags.Is("--only")) {
      if (flags.SubsetOf({"matmul", "session", "kernels"}, only)) {
        f->matmul = only.count("matmul") > 0;
        f->session = only.count("session") > 0;
        f->kernels = only.count("kernels") > 0;
      }
    } else if (flags.Is("--kernel-mib")) {
      if (flags.IntInRange(4096, mib)) {
        f->kernel_elements = int64_t{mib} << 18;  // float32: 4 bytes each
      }
    } else if (flags.Is("--python")) {
      flags.Value(f->python);
    } else if (flags.Is("--numpy-script")) {
      flags.Value(f->numpy_script);
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

// Runs NumPy's script, printing its lines; returns GFLOP/s per size, or an
// error when it cannot run, exits non-zero or prints nothing.
absl::StatusOr<std::map<int, std::vector<double>>> RunNumpy(const Flags& f) {
  std::map<int, std::vector<double>> out;
  std::string sizes;
  for (int n : f.sizes) absl::StrAppend(&sizes, sizes.empty() ? "" : ",", n);
  // NumPy's OpenBLAS gets the core type that this CPU supports, as ours
  // does (kernels/blas.h): the peer is OpenBLAS's best kernel, not the one
  // its 0.3.21 detection picks.
  RunProgramOptions options;
  const char* user_core = std::getenv("OPENBLAS_CORETYPE");
  const std::string core = user_core != nullptr && *user_core != '\0'
                               ? std::string(user_core)
                               : Blas::CoreTypeForThisCpu();
  if (!core.empty()) {
    options.env_overrides.push_back(absl::StrCat("OPENBLAS_CORETYPE=", core));
  }
  // Far above any --min-seconds a run asks for per size; a wedged Python
  // must still end the suite.
  options.deadline = absl::Hours(1);
  const std::vector<std::string> argv = {
      f.python,        f.numpy_script,
      "--sizes",       sizes,
      "--reps",        absl::StrCat(f.reps),
      "--min-seconds", absl::StrCat(f.min_seconds)};
  ProgramRun run = RunProgram(argv, options);
  // Python's own errors share the pipe; only JSON lines are NumPy's.
  for (absl::string_view text : absl::StrSplit(run.output, '\n')) {
    auto j = ParseJson(text, "numpy_matmul.py output");
    if (!j.ok() || !j->contains("value")) continue;
    std::cout << j->dump() << std::endl;  // Pass NumPy's line through.
    out[(*j)["params"]["n"].get<int>()].push_back((*j)["value"].get<double>());
  }
  if (!run.status.ok() || out.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        run.status.ok() ? DescribeCommand(argv) + " succeeded"
                        : std::string(run.status.message()),
        " and printed ", out.size(),
        " sizes (is python3-numpy installed? check --python); pass --no-peer "
        "to run without NumPy"));
  }
  return out;
}

int BenchMatMul(const Flags& f) {
  const int threads = static_cast<int>(std::thread::hardware_concurrency());
  std::map<int, std::vector<double>> ours;
  for (int n : f.sizes) {
    Scope root = Scope::NewRootScope();
    auto a = ops::Placeholder(root.WithOpName("a"), DT_FLOAT, {n, n});
    auto b = ops::Placeholder(root.WithOpName("b"), DT_FLOAT, {n, n});
    ops::MatMul(root.WithOpName("c"), a, b);
    GraphDef g;
    if (!root.ToGraphDef(&g).ok()) {
      return Fail(
          absl::StrCat("building the MatMul graph: ", Str(root.status())));
    }
    auto session = LocalSession::Create(g);
    if (!session.ok()) {
      return Fail(
          absl::StrCat("creating the session: ", Str(session.status())));
    }
    auto handle = (*session)->MakeCallable({{"a", "b"}, {"c:0"}, {}, {}});
    if (!handle.ok()) {
      return Fail(absl::StrCat("making the callable: ", Str(handle.status())));
    }
    Tensor av(DT_FLOAT, TensorShape({n, n})), bv(DT_FLOAT, TensorShape({n, n}));
    for (int64_t i = 0; i < av.NumElements(); ++i) {
      av.data<float>()[i] = static_cast<float>((i * 7919) % 1000) / 1000.f;
      bv.data<float>()[i] = static_cast<float>((i * 104729) % 1000) / 1000.f;
    }
    std::vector<Tensor> out;
    absl::Status s =
        (*session)->RunCallable(*handle, {av, bv}, &out);  // warm-up
    if (!s.ok()) {
      return Fail(absl::StrCat("running MatMul: ", Str(s)));
    }
    if (s = CheckMatMul(av, bv, out.at(0), n); !s.ok()) return Fail(Str(s));
    for (int rep = 0; rep < f.reps; ++rep) {
      int iters = 0;
      auto start = Clock::now();
      double elapsed = 0;
      do {
        s = (*session)->RunCallable(*handle, {av, bv}, &out);
        if (!s.ok()) {
          return Fail(absl::StrCat("running MatMul: ", Str(s)));
        }
        ++iters;
        elapsed = std::chrono::duration<double>(Clock::now() - start).count();
      } while (elapsed < f.min_seconds);
      double gflops =
          2.0 * n * n * static_cast<double>(n) * iters / elapsed / 1e9;
      // The last product of the timed loop is right too (checked outside
      // the timing); a wrong one prints no figure.
      if (s = CheckMatMul(av, bv, out.at(0), n); !s.ok()) return Fail(Str(s));
      ours[n].push_back(gflops);
      Emit("matmul_gflops",
           {{"n", n},
            {"dtype", "float32"},
            {"threads", threads},
            {"backend", Blas::Description()}},
           gflops, "GFLOP/s", rep);
    }
  }
  if (f.no_peer) return 0;
  auto numpy = RunNumpy(f);
  if (!numpy.ok()) return Fail(std::string(numpy.status().message()));
  for (int n : f.sizes) {
    auto it = numpy->find(n);
    if (it == numpy->end() || Median(it->second) <= 0) {
      return Fail(absl::StrCat("no NumPy figure for n=", n));
    }
    Emit("matmul_vs_numpy_ratio",
         {{"n", n}, {"dtype", "float32"}, {"threads", threads}},
         Median(ours[n]) / Median(it->second), "x", 0);
  }
  return 0;
}

int BenchSession(const Flags& f) {
  Scope root = Scope::NewRootScope();
  auto x =
      ops::Placeholder(root.WithOpName("x"), DT_FLOAT, PartialTensorShape({}));
  Output y = x;
  for (int i = 0; i < 9; ++i) {
    y = i % 2 == 0 ? ops::Add(root, y, y) : ops::Mul(root, y, x);
  }
  GraphDef g;
  if (!root.ToGraphDef(&g).ok() || g.node_size() != 10) {
    return Fail(
        absl::StrCat("building the scalar graph: ", Str(root.status())));
  }
  auto session = LocalSession::Create(g);
  if (!session.ok()) {
    return Fail(absl::StrCat("creating the session: ", Str(session.status())));
  }
  auto handle = (*session)->MakeCallable({{"x"}, {y.name()}, {}, {}});
  if (!handle.ok()) {
    return Fail(absl::StrCat("making the callable: ", Str(handle.status())));
  }
  const std::vector<Tensor> feeds = {Tensor(1.0f)};
  std::vector<Tensor> out;
  for (int i = 0; i < 1000; ++i) {
    absl::Status s = (*session)->RunCallable(*handle, feeds, &out);
    if (!s.ok()) {
      return Fail(absl::StrCat("running the scalar graph: ", Str(s)));
    }
  }
  for (int rep = 0; rep < f.reps; ++rep) {
    std::vector<double> us(f.runs);
    for (int i = 0; i < f.runs; ++i) {
      auto start = Clock::now();
      absl::Status s = (*session)->RunCallable(*handle, feeds, &out);
      us[i] = std::chrono::duration<double, std::micro>(Clock::now() - start)
                  .count();
      if (!s.ok()) {
        return Fail(absl::StrCat("running the scalar graph: ", Str(s)));
      }
    }
    std::sort(us.begin(), us.end());
    Json params = {{"nodes", 10}, {"path", "callable"}};
    Emit("session_run_overhead_p50", params, us[us.size() / 2], "us", rep);
    Emit("session_run_overhead_p99", params, us[us.size() * 99 / 100], "us",
         rep);
  }
  return 0;
}

}  // namespace

// One memory-bound kernel: a graph over float32 inputs of the same size,
// and the bytes it must move at least (inputs read once, output written
// once).
struct KernelCase {
  std::string op;
  int inputs;
  // Bytes moved per input byte: reads plus writes.
  double traffic;
  std::function<Output(const Scope&, const std::vector<Output>&)> build;
};

// glibc memcpy of the same buffer size, one thread (copy GB/s = bytes
// copied per second), in the same run. Memory traffic is twice the copy rate.
double MemcpyGbps(size_t bytes, double min_seconds) {
  std::vector<char> src(bytes, 1), dst(bytes, 0);
  int iters = 0;
  const auto start = Clock::now();
  double elapsed = 0;
  do {
    std::memcpy(dst.data(), src.data(), bytes);
    ++iters;
    elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  } while (elapsed < min_seconds);
  // Keeps the copies observable.
  if (dst[bytes / 2] != 1) return 0;
  return static_cast<double>(bytes) * iters / elapsed / 1e9;
}

int BenchKernels(const Flags& f) {
  const int64_t n = f.kernel_elements;
  const int threads = static_cast<int>(std::thread::hardware_concurrency());
  const int64_t rows = 1024;
  const std::vector<KernelCase> cases = {
      {"Add", 2, 3,
       [](const Scope& s, const std::vector<Output>& in) {
         return ops::Add(s, in[0], in[1]);
       }},
      {"Mul", 2, 3,
       [](const Scope& s, const std::vector<Output>& in) {
         return ops::Mul(s, in[0], in[1]);
       }},
      {"Relu", 1, 2,
       [](const Scope& s, const std::vector<Output>& in) {
         return ops::Relu(s, in[0]);
       }},
      {"Exp", 1, 2,
       [](const Scope& s, const std::vector<Output>& in) {
         return ops::Exp(s, in[0]);
       }},
      {"Sum", 1, 1,
       [](const Scope& s, const std::vector<Output>& in) {
         return ops::Sum(s, in[0], ops::Const(s, Tensor::Vec<int32_t>({0, 1})));
       }},
      {"Softmax", 1, 2,
       [](const Scope& s, const std::vector<Output>& in) {
         return ops::Softmax(s, in[0]);
       }},
  };
  const size_t bytes = static_cast<size_t>(n) * sizeof(float);
  std::vector<double> copy;
  for (int rep = 0; rep < f.reps; ++rep) {
    copy.push_back(MemcpyGbps(bytes, f.min_seconds));
    Emit("copy_bw_iter",
         {{"MiB", static_cast<int64_t>(bytes >> 20)}, {"threads", 1}},
         copy.back(), "GB/s", rep);
  }
  const double memory_gbps = 2 * Median(copy);
  for (const KernelCase& c : cases) {
    Scope root = Scope::NewRootScope();
    std::vector<Output> in;
    std::vector<std::string> feeds;
    for (int i = 0; i < c.inputs; ++i) {
      const std::string name = absl::StrCat("in", i);
      in.push_back(
          ops::Placeholder(root.WithOpName(name), DT_FLOAT, {rows, n / rows}));
      feeds.push_back(name);
    }
    Output out = c.build(root.WithOpName("out"), in);
    GraphDef g;
    if (!root.ToGraphDef(&g).ok()) {
      return Fail(
          absl::StrCat("building the ", c.op, " graph: ", Str(root.status())));
    }
    auto session = LocalSession::Create(g);
    if (!session.ok()) {
      return Fail(absl::StrCat("creating the ", c.op,
                               " session: ", Str(session.status())));
    }
    auto handle = (*session)->MakeCallable({feeds, {out.name()}, {}, {}});
    if (!handle.ok()) {
      return Fail(absl::StrCat("making the ", c.op,
                               " callable: ", Str(handle.status())));
    }
    std::vector<Tensor> values;
    for (int i = 0; i < c.inputs; ++i) {
      Tensor t(DT_FLOAT, TensorShape({rows, n / rows}));
      float* d = t.data<float>();
      for (int64_t j = 0; j < n; ++j) d[j] = static_cast<float>(j % 97) / 97.f;
      values.push_back(t);
    }
    std::vector<Tensor> result;
    absl::Status s = (*session)->RunCallable(*handle, values, &result);
    if (!s.ok()) return Fail(absl::StrCat("running ", c.op, ": ", Str(s)));
    std::vector<double> gbps;
    for (int rep = 0; rep < f.reps; ++rep) {
      int iters = 0;
      const auto start = Clock::now();
      double elapsed = 0;
      do {
        s = (*session)->RunCallable(*handle, values, &result);
        if (!s.ok()) return Fail(absl::StrCat("running ", c.op, ": ", Str(s)));
        ++iters;
        elapsed = std::chrono::duration<double>(Clock::now() - start).count();
      } while (elapsed < f.min_seconds);
      gbps.push_back(c.traffic * static_cast<double>(bytes) * iters / elapsed /
                     1e9);
      Emit("kernel_gbps",
           {{"op", c.op},
            {"MiB", static_cast<int64_t>(bytes >> 20)},
            {"dtype", "float32"},
            {"threads", threads}},
           gbps.back(), "GB/s", rep);
    }
    Emit("kernel_vs_memcpy_ratio",
         {{"op", c.op},
          {"MiB", static_cast<int64_t>(bytes >> 20)},
          {"threads", threads}},
         Median(gbps) / memory_gbps, "x", 0);
  }
  return 0;
}

int RunGraphBench(const std::vector<std::string>& args) {
  Flags f;
  std::string error;
  if (!ParseFlags(args, &f, error)) {
    std::cerr << "cohort bench graph: " << error << "\n";
    return 2;
  }
  PrintEnvLine("graph", "start");
  int rc = 0;
  if (f.matmul) rc = BenchMatMul(f);
  if (rc == 0 && f.session) rc = BenchSession(f);
  if (rc == 0 && f.kernels) rc = BenchKernels(f);
  PrintEnvLine("graph", "end");
  return rc;
}

}  // namespace cohort::bench
