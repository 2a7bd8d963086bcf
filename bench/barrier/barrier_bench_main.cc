// Standalone `barrier_bench` (the same suite as `cohort bench barrier`).
#include <string>
#include <vector>

#include "bench/barrier/barrier_bench.h"

int main(int argc, char** argv) {
  return cohort::bench::RunBarrierBench(
      std::vector<std::string>(argv + 1, argv + argc));
}
