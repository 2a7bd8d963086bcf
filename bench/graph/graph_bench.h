// `cohort bench graph`: the dataflow engine's benchmark suite.
//
// Prints JSON lines (docs/architecture.md format, suite "graph"):
//   matmul_gflops (GFLOP/s; n=256|1024|2048, dtype=float32, threads=T):
//       C = A * B of two n x n float32 matrices through a LocalSession
//       callable (the MatMul kernel: an Eigen tensor contraction on the
//       device's thread pool); 2 n^3 flops per product; each rep times as
//       many products as fit in --min-seconds after one warm-up.
//       The warm-up's product and each rep's last are checked against
//       products summed in double (every row up to n = 256, 33 rows
//       above) within the float dot-product bound 2 n eps sum |a b|; a
//       wrong product is a failed measurement and prints no figure.
//   numpy_matmul_gflops (GFLOP/s; same n): NumPy's np.matmul in the same
//       run, from bench/graph/numpy_matmul.py run with --python (default
//       /usr/bin/python3, Debian's python3-numpy). NumPy missing or failing
//       is a failed measurement (an error line, exit status 1) unless
//       --no-peer, which runs without it.
//   matmul_vs_numpy_ratio (x; n): median cohort GFLOP/s / median NumPy
//       GFLOP/s (target >= 0.8).
//   session_run_overhead_p50 / _p99 (us; nodes=10, path=callable): the
//       wall time of one RunCallable on a 10-node scalar float graph (a
//       Placeholder and nine chained Add/Mul nodes), --runs runs per rep
//       after 1,000 warm-up runs (target p50 < 20 us).
//
// Exit status: non-zero when any measurement fails; the suite prints a line
// {"suite": "graph", "error": ...} saying which.
//
//   cohort bench graph [--reps 3] [--only matmul,session]
//                      [--sizes 256,1024,2048] [--min-seconds 0.5]
//                      [--runs 20000] [--python PATH]
//                      [--numpy-script PATH] [--no-peer] [--quick]
#ifndef COHORT_BENCH_GRAPH_GRAPH_BENCH_H_
#define COHORT_BENCH_GRAPH_GRAPH_BENCH_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "cohort/graph/tensor.h"

namespace cohort::bench {

// Runs the suite with `args` (the flags above); returns the exit code.
int RunGraphBench(const std::vector<std::string>& args);

// Checks `c` = `a` * `b` (n x n, row-major float32) against products
// summed in double, one row at a time: every row up to n = 256, 33 rows
// spread over the matrix (first and last included) above, so the check
// stays far cheaper than the timing. The tolerance is the bound on a float
// dot product of n terms, 2 n eps sum |a_ik b_kj| (no summation order
// does worse), so a wrong block, a stale buffer or a transposed operand
// fails while rounding never does. DataLoss names the first wrong element
// (or the wrong shape).
absl::Status CheckMatMul(const Tensor& a, const Tensor& b, const Tensor& c,
                         int n);

}  // namespace cohort::bench

#endif  // COHORT_BENCH_GRAPH_GRAPH_BENCH_H_
