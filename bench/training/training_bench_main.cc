// Standalone `cohort bench training` (see training_bench.h).
#include <string>
#include <vector>

#include "bench/training/training_bench.h"

int main(int argc, char** argv) {
  return cohort::bench::RunTrainingBench(
      std::vector<std::string>(argv + 1, argv + argc));
}
