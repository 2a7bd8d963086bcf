#include "examples/train/ps_model.h"

#include <cmath>
#include <utility>

#include "cohort/base/status.h"
#include "cohort/graph/gradients.h"
#include "cohort/graph/kernels/array_ops.h"
#include "cohort/graph/kernels/elementwise_ops.h"
#include "cohort/graph/kernels/math_ops.h"
#include "cohort/graph/kernels/nn_ops.h"
#include "cohort/graph/kernels/random_ops.h"
#include "cohort/graph/kernels/reduction_ops.h"
#include "cohort/graph/kernels/training_ops.h"
#include "cohort/training/data_parallel.h"

namespace cohort::examples {

absl::StatusOr<PsModel> BuildPsModel(const Scope& root,
                                     const PsModelOptions& o) {
  if (o.features <= 0 || o.hidden <= 0 || o.classes < 2) {
    return absl::InvalidArgumentError(
        "ps model: features and hidden must be positive and classes >= 2");
  }
  auto step = ops::GetOrCreateGlobalStep(root);
  auto x = ops::Placeholder(root.WithOpName("x"), DT_FLOAT, {-1, o.features});
  auto labels = ops::Placeholder(root.WithOpName("labels"), DT_INT32, {-1});
  Scope init = root.NewSubScope("init_values");
  // He-style scaling (training/data_parallel.h): gain 2 for the Relu
  // layers, 1 for the output layer.
  auto weights = [&](const std::string& name, int in, int out, int seed2,
                     double gain) {
    return training::ScaledNormalWeights(root, init, name, in, out,
                                         o.weight_seed, seed2, gain);
  };
  auto zeros = [&](const std::string& name, int n) {
    return ops::MakeVariable(root, name,
                             Tensor::Filled<float>(TensorShape({n}), 0.f));
  };
  const std::vector<ops::Variable> vars = {
      weights("w1", o.features, o.hidden, 1, 2.0), zeros("b1", o.hidden),
      weights("w2", o.hidden, o.hidden, 2, 2.0),   zeros("b2", o.hidden),
      weights("w3", o.hidden, o.classes, 3, 1.0),  zeros("b3", o.classes)};
  auto layer = [&](Output in, int i) {
    return ops::Add(root, ops::MatMul(root, in, vars[2 * i].value),
                    vars[2 * i + 1].value);
  };
  auto h1 = ops::Relu(root, layer(x, 0));
  auto h2 = ops::Relu(root, layer(h1, 1));
  auto logits = ops::Identity(root.WithOpName("logits"), layer(h2, 2));
  auto xent = ops::SparseSoftmaxCrossEntropyWithLogits(root, logits, labels);
  auto loss = ops::Mean(root.WithOpName("loss"), xent.loss, 0);

  std::vector<Output> values;
  for (const auto& v : vars) values.push_back(v.value);
  std::vector<Output> grads;
  COHORT_RETURN_IF_ERROR(AddSymbolicGradients(root, {loss}, values, &grads));
  std::vector<Operation> updates;
  for (size_t i = 0; i < vars.size(); ++i) {
    updates.push_back(ops::ApplyGradientDescent(
        root.NewSubScope("sgd"), vars[i].handle, o.learning_rate, grads[i]));
  }
  // The step counts applied updates: it moves after them.
  ops::IncrementGlobalStep(
      root.WithOpName("train").WithControlDependencies(updates), step);
  COHORT_RETURN_IF_ERROR(root.status());

  PsModel m;
  m.x = x.name();
  m.labels = labels.name();
  m.loss = loss.name();
  m.logits = logits.name();
  m.train = "train";
  m.global_step = step.value.name();
  m.parameters = static_cast<int64_t>(o.features) * o.hidden + o.hidden +
                 static_cast<int64_t>(o.hidden) * o.hidden + o.hidden +
                 static_cast<int64_t>(o.hidden) * o.classes + o.classes;
  return m;
}

}  // namespace cohort::examples
