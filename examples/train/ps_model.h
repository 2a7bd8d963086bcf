// The parameter-server job's model: a classifier with over a million
// parameters, built into a graph whose variables a replica device setter
// may place on ps tasks (docs/training.md).
//
//   logits = Relu(Relu(x W1 + b1) W2 + b2) W3 + b3
//   loss   = mean sparse softmax cross-entropy
//   train  = ApplyGradientDescent on every variable, then global_step += 1
//
// With the defaults (16 features, two hidden layers of 1024, 4 classes)
// the model has 1,071,108 parameters. Weights start from seeded
// RandomNormal, so every task that initialises builds the same values. The
// data are data_parallel.h's synthetic set (labels from a random "teacher"
// network), so the job and the synchronous example learn the same task.
//
// Thread safety: BuildPsModel builds into a Scope (single-threaded).
#ifndef COHORT_EXAMPLES_TRAIN_PS_MODEL_H_
#define COHORT_EXAMPLES_TRAIN_PS_MODEL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cohort/graph/builder.h"
#include "cohort/graph/kernels/state_ops.h"

namespace cohort::examples {

struct PsModelOptions {
  int features = 16;
  int hidden = 1024;  // Units in each of the two hidden layers.
  int classes = 4;
  float learning_rate = 0.1f;
  int64_t weight_seed = 99;
};

// Node names a session feeds and fetches.
struct PsModel {
  std::string x;            // Placeholder float [batch, features].
  std::string labels;       // Placeholder int32 [batch].
  std::string loss;         // float scalar.
  std::string logits;       // float [batch, classes].
  std::string train;        // Target: one SGD step and global_step += 1.
  std::string global_step;  // int64 scalar read.
  int64_t parameters = 0;
};

// Builds the model into `root`, creating the global step. Errors name the
// node that failed to build.
absl::StatusOr<PsModel> BuildPsModel(const Scope& root,
                                     const PsModelOptions& options);

}  // namespace cohort::examples

#endif  // COHORT_EXAMPLES_TRAIN_PS_MODEL_H_
