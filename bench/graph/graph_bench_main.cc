// Standalone `cohort bench graph` (same flags), for runs without the CLI.
#include <string>
#include <vector>

#include "bench/graph/graph_bench.h"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  return cohort::bench::RunGraphBench(args);
}
