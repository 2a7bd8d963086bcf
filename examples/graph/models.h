// Two small models trained with a LocalSession on generated data, written
// the way a user of cohort's graph API would write them (builder, symbolic
// gradients, resource variables, optimizer ops, callables).
//
//  - TrainLinearRegression: y = x . w + b + noise with x ~ U[-1, 1)^3
//    (256 samples, noise std 0.01); model MatMul + Add, mean squared error,
//    ApplyGradientDescent (learning rate 0.2). The loss floor is the noise
//    variance, 1e-4.
//  - TrainTwoLayerClassifier: 3 classes of 2-D points on three rings
//    around the origin (radius 0.5, 1.5, 2.5, jitter 0.15; 300 samples);
//    model Relu(x W1 + b1) W2 + b2 with 32 hidden units, sparse softmax
//    cross-entropy, ApplyMomentum (lr 0.1, momentum 0.9). Weights start
//    from seeded RandomNormal, so every run trains identically.
//
// Both return the loss before training, the final loss and (classifier) the
// training accuracy. Errors: any graph-building or session error, named by
// node.
//
// Thread safety: each call builds its own graph and session.
#ifndef COHORT_EXAMPLES_GRAPH_MODELS_H_
#define COHORT_EXAMPLES_GRAPH_MODELS_H_

#include <functional>

#include "absl/status/statusor.h"

namespace cohort::examples {

struct TrainResult {
  double initial_loss = 0;
  double final_loss = 0;
  double accuracy = 0;  // Classifier only.
  int steps = 0;
};

// `log(step, loss)` is called every `log_every` steps when set.
using LossLogger = std::function<void(int step, double loss)>;

absl::StatusOr<TrainResult> TrainLinearRegression(
    int steps, int log_every = 0, const LossLogger& log = nullptr);
absl::StatusOr<TrainResult> TrainTwoLayerClassifier(
    int steps, int log_every = 0, const LossLogger& log = nullptr);

}  // namespace cohort::examples

#endif  // COHORT_EXAMPLES_GRAPH_MODELS_H_
