// `cohort bench <suite> [suite flags...]`: runs a benchmark suite, which
// prints JSON lines in the format of docs/architecture.md ("Benchmark output").
//
//   cohort bench coord --quick
//   cohort bench barrier --reps 3 --no-peer
//   cohort bench list
//
// Suites are an explicit table below: to add one, include its header, add
// one line to kSuites and link its library in tools/cohort/CMakeLists.txt.
// A suite gets the arguments after its name and returns the exit code:
// non-zero when any measurement failed (the suite prints a JSON line with an
// "error" key saying which), including a peer benchmark (TCPStore, gloo,
// NumPy) that is missing or fails; --no-peer runs a suite without its peer.
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "bench/barrier/barrier_bench.h"
#include "bench/collective/collective_bench.h"
#include "bench/coord/coord_bench.h"
#include "bench/graph/graph_bench.h"
#include "bench/recovery/recovery_bench.h"
#include "bench/runtime/runtime_bench.h"
#include "bench/training/training_bench.h"
#include "tools/cohort/commands.h"

namespace cohort::tools {
namespace {

struct BenchSuite {
  const char* name;
  const char* description;
  int (*run)(const std::vector<std::string>& args);
};

const BenchSuite kSuites[] = {
    {"coord",
     "coordination service: barrier release latency, KV throughput, "
     "KV round trips, 1,024-task registration, with the TCPStore "
     "peer (threads and processes)",
     &bench::RunCoordBench},
    {"barrier",
     "barrier execution mode: barrier and allGather (64 B) latency "
     "for gangs of 2, 4, 8 processes, with the gloo peer "
     "(all_gather_object and tensor all_gather)",
     &bench::RunBarrierBench},
    {"graph",
     "graph engine: MatMul float32 GFLOP/s (256, 1024, 2048) against "
     "NumPy, LocalSession per-run overhead (10-node callable)",
     &bench::RunGraphBench},
    {"runtime",
     "distributed runtime between `cohort server` processes: tensor "
     "transfer GB/s (1, 16, 64 MiB) against one iperf3 TCP stream, remote "
     "step p50/p99 (4-byte tensor, callable), GrpcSession vs LocalSession "
     "step overhead",
     &bench::RunRuntimeBench},
    {"collective",
     "collectives: all-reduce time (1, 64 MiB float32) across gangs of "
     "2 and 4 processes over shared memory and TCP, with the gloo peer",
     &bench::RunCollectiveBench},
    {"training",
     "data-parallel training: examples/s of 1 and 2 tasks on a model of "
     "a million parameters, gradients all-reduced; the scaling",
     &bench::RunTrainingBench},
    {"recovery",
     "fault tolerance: from a worker's kill -9 to the job training again "
     "(the ps job under --restart task), with the torchrun peer",
     &bench::RunRecoveryBench},
};

void ListSuites(std::ostream& out) {
  for (const BenchSuite& suite : kSuites) {
    out << "  " << suite.name << "\t" << suite.description << "\n";
  }
}

}  // namespace

void RegisterBenchCommand(CLI::App& app, int& exit_code) {
  auto suite_name = std::make_shared<std::string>();
  CLI::App* command = app.add_subcommand(
      "bench",
      "run a benchmark suite (JSON lines on stdout); `list` lists them");
  command->add_option("suite", *suite_name, "suite name, or list")->required();
  command->allow_extras();
  command->prefix_command();
  command->callback([command, suite_name, &exit_code] {
    if (*suite_name == "list") {
      ListSuites(std::cout);
      return;
    }
    for (const BenchSuite& suite : kSuites) {
      if (*suite_name == suite.name) {
        exit_code = suite.run(command->remaining());
        return;
      }
    }
    std::cerr << "cohort bench: unknown suite \"" << *suite_name
              << "\"; suites:\n";
    ListSuites(std::cerr);
    exit_code = 1;
  });
}

}  // namespace cohort::tools
