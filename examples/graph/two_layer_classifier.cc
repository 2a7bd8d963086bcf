// A two-layer classifier on generated 2-D rings with a LocalSession (see
// models.h).
//   two_layer_classifier [steps=300]
#include <cstdio>
#include <cstdlib>

#include "examples/graph/models.h"

int main(int argc, char** argv) {
  int steps = argc > 1 ? std::atoi(argv[1]) : 300;
  auto r = cohort::examples::TrainTwoLayerClassifier(
      steps, 25, [](int step, double loss) {
        std::printf("step %4d  cross-entropy %.5f\n", step, loss);
      });
  if (!r.ok()) {
    std::fprintf(stderr, "training failed: %s\n",
                 r.status().ToString().c_str());
    return 1;
  }
  std::printf(
      "cross-entropy: %.5f before training, %.5f after %d steps; accuracy "
      "%.1f%%\n",
      r->initial_loss, r->final_loss, r->steps, 100 * r->accuracy);
  return 0;
}
