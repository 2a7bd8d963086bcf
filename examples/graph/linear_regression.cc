// Linear regression on generated data with a LocalSession (see models.h).
//   linear_regression [steps=200]
#include <cstdio>
#include <cstdlib>

#include "examples/graph/models.h"

int main(int argc, char** argv) {
  int steps = argc > 1 ? std::atoi(argv[1]) : 200;
  auto r = cohort::examples::TrainLinearRegression(
      steps, 20, [](int step, double loss) {
        std::printf("step %4d  mse %.6f\n", step, loss);
      });
  if (!r.ok()) {
    std::fprintf(stderr, "training failed: %s\n",
                 r.status().ToString().c_str());
    return 1;
  }
  std::printf("mse: %.6f before training, %.6f after %d steps\n",
              r->initial_loss, r->final_loss, r->steps);
  return 0;
}
