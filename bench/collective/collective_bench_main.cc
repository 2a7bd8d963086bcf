// Standalone `cohort bench collective` (see collective_bench.h).
#include <string>
#include <vector>

#include "bench/collective/collective_bench.h"

int main(int argc, char** argv) {
  return cohort::bench::RunCollectiveBench(
      std::vector<std::string>(argv + 1, argv + argc));
}
