#include "examples/graph/models.h"

#include <cmath>
#include <random>
#include <vector>

#include "cohort/base/status.h"
#include "cohort/graph/builder.h"
#include "cohort/graph/gradients.h"
#include "cohort/graph/kernels/array_ops.h"
#include "cohort/graph/kernels/elementwise_ops.h"
#include "cohort/graph/kernels/math_ops.h"
#include "cohort/graph/kernels/nn_ops.h"
#include "cohort/graph/kernels/random_ops.h"
#include "cohort/graph/kernels/reduction_ops.h"
#include "cohort/graph/kernels/state_ops.h"
#include "cohort/graph/kernels/training_ops.h"
#include "cohort/graph/local_session.h"

namespace cohort::examples {
namespace {

// Runs `train` (fetching the loss) `steps` times through a callable.
absl::StatusOr<TrainResult> Fit(
    const Scope& root, const std::string& train, const std::string& loss,
    const std::vector<std::pair<std::string, Tensor>>& data, int steps,
    int log_every, const LossLogger& log,
    std::unique_ptr<LocalSession>* session_out = nullptr) {
  GraphDef g;
  COHORT_RETURN_IF_ERROR(root.ToGraphDef(&g));
  COHORT_ASSIGN_OR_RETURN(std::unique_ptr<LocalSession> session,
                          LocalSession::Create(g));
  COHORT_RETURN_IF_ERROR(session->Run({}, {}, {"init"}, nullptr));
  CallableOptions opts;
  std::vector<Tensor> feeds;
  for (const auto& [name, value] : data) {
    opts.feeds.push_back(name);
    feeds.push_back(value);
  }
  opts.fetches = {loss};
  COHORT_ASSIGN_OR_RETURN(auto eval, session->MakeCallable(opts));
  opts.targets = {train};
  COHORT_ASSIGN_OR_RETURN(auto step, session->MakeCallable(opts));
  TrainResult r;
  std::vector<Tensor> out;
  COHORT_RETURN_IF_ERROR(session->RunCallable(eval, feeds, &out));
  r.initial_loss = out[0].scalar<float>();
  for (int i = 1; i <= steps; ++i) {
    // The fetched loss is computed before this step's update.
    COHORT_RETURN_IF_ERROR(session->RunCallable(step, feeds, &out));
    if (log && log_every > 0 && i % log_every == 0)
      log(i, out[0].scalar<float>());
  }
  COHORT_RETURN_IF_ERROR(session->RunCallable(eval, feeds, &out));
  r.final_loss = out[0].scalar<float>();
  r.steps = steps;
  if (session_out != nullptr) *session_out = std::move(session);
  return r;
}

}  // namespace

absl::StatusOr<TrainResult> TrainLinearRegression(int steps, int log_every,
                                                  const LossLogger& log) {
  // Data: y = x . [2, -3, 0.5] + 1 + noise.
  const int n = 256;
  std::mt19937_64 rng(42);
  std::uniform_real_distribution<float> unif(-1.f, 1.f);
  std::normal_distribution<float> noise(0.f, 0.01f);
  Tensor x(DT_FLOAT, TensorShape({n, 3})), y(DT_FLOAT, TensorShape({n, 1}));
  const float w_true[3] = {2.f, -3.f, 0.5f};
  for (int i = 0; i < n; ++i) {
    float t = 1.f;
    for (int j = 0; j < 3; ++j) {
      float v = unif(rng);
      x.matrix<float>()(i, j) = v;
      t += v * w_true[j];
    }
    y.matrix<float>()(i, 0) = t + noise(rng);
  }

  Scope root = Scope::NewRootScope();
  auto xp = ops::Placeholder(root.WithOpName("x"), DT_FLOAT, {-1, 3});
  auto yp = ops::Placeholder(root.WithOpName("y"), DT_FLOAT, {-1, 1});
  auto w = ops::MakeVariable(root, "w",
                             Tensor::Filled<float>(TensorShape({3, 1}), 0.f));
  auto b = ops::MakeVariable(root, "b",
                             Tensor::Filled<float>(TensorShape({1}), 0.f));
  auto pred = ops::Add(root, ops::MatMul(root, xp, w.value), b.value);
  auto loss = ops::Mean(root.WithOpName("loss"),
                        ops::Square(root, ops::Sub(root, pred, yp)),
                        Tensor::Vec<int32_t>({0, 1}));
  std::vector<Output> grads;
  COHORT_RETURN_IF_ERROR(
      AddSymbolicGradients(root, {loss}, {w.value, b.value}, &grads));
  auto apply_w = ops::ApplyGradientDescent(root, w.handle, 0.2f, grads[0]);
  auto apply_b = ops::ApplyGradientDescent(root, b.handle, 0.2f, grads[1]);
  ops::NoOp(
      root.WithOpName("train").WithControlDependencies({apply_w, apply_b}));
  ops::GlobalVariablesInitializer(root);
  return Fit(root, "train", "loss:0", {{"x", x}, {"y", y}}, steps, log_every,
             log);
}

absl::StatusOr<TrainResult> TrainTwoLayerClassifier(int steps, int log_every,
                                                    const LossLogger& log) {
  const int n = 300, hidden = 32, classes = 3;
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<float> angle(0.f, 6.28318530718f);
  std::normal_distribution<float> jitter(0.f, 0.15f);
  Tensor x(DT_FLOAT, TensorShape({n, 2}));
  Tensor labels(DT_INT32, TensorShape({n}));
  for (int i = 0; i < n; ++i) {
    int c = i % classes;
    float r = 0.5f + c + jitter(rng), a = angle(rng);
    x.matrix<float>()(i, 0) = r * std::cos(a);
    x.matrix<float>()(i, 1) = r * std::sin(a);
    labels.data<int32_t>()[i] = c;
  }

  Scope root = Scope::NewRootScope();
  auto xp = ops::Placeholder(root.WithOpName("x"), DT_FLOAT, {-1, 2});
  auto lp = ops::Placeholder(root.WithOpName("labels"), DT_INT32, {-1});
  Scope init = root.NewSubScope("init_values");
  auto w1 = ops::MakeVariable(
      root, "w1",
      ops::Mul(init,
               ops::RandomNormal(init, Tensor::Vec<int32_t>({2, hidden}),
                                 DT_FLOAT, 1, 1),
               0.5f));
  auto b1 = ops::MakeVariable(
      root, "b1", Tensor::Filled<float>(TensorShape({hidden}), 0.f));
  auto w2 = ops::MakeVariable(
      root, "w2",
      ops::Mul(init,
               ops::RandomNormal(init, Tensor::Vec<int32_t>({hidden, classes}),
                                 DT_FLOAT, 1, 2),
               0.2f));
  auto b2 = ops::MakeVariable(
      root, "b2", Tensor::Filled<float>(TensorShape({classes}), 0.f));
  auto h = ops::Relu(root,
                     ops::Add(root, ops::MatMul(root, xp, w1.value), b1.value));
  auto logits = ops::Add(root.WithOpName("logits"),
                         ops::MatMul(root, h, w2.value), b2.value);
  auto xent = ops::SparseSoftmaxCrossEntropyWithLogits(root, logits, lp);
  auto loss = ops::Mean(root.WithOpName("loss"), xent.loss, 0);
  std::vector<ops::Variable> vars = {w1, b1, w2, b2};
  std::vector<Output> values;
  for (const auto& v : vars) values.push_back(v.value);
  std::vector<Output> grads;
  COHORT_RETURN_IF_ERROR(AddSymbolicGradients(root, {loss}, values, &grads));
  std::vector<Operation> updates;
  const std::vector<TensorShape> shapes = {
      TensorShape({2, hidden}), TensorShape({hidden}),
      TensorShape({hidden, classes}), TensorShape({classes})};
  for (size_t i = 0; i < vars.size(); ++i) {
    Scope s = root.NewSubScope("momentum");
    auto accum =
        ops::MakeVariable(s, "accum", Tensor::Filled<float>(shapes[i], 0.f));
    updates.push_back(ops::ApplyMomentum(s, vars[i].handle, accum.handle, 0.1f,
                                         grads[i], 0.9f));
  }
  ops::NoOp(root.WithOpName("train").WithControlDependencies(updates));
  ops::GlobalVariablesInitializer(root);
  std::unique_ptr<LocalSession> session;
  COHORT_ASSIGN_OR_RETURN(TrainResult r, Fit(root, "train", "loss:0",
                                             {{"x", x}, {"labels", labels}},
                                             steps, log_every, log, &session));
  std::vector<Tensor> out;
  COHORT_RETURN_IF_ERROR(session->Run({{"x", x}}, {"logits:0"}, {}, &out));
  auto l = out[0].matrix<float>();
  int correct = 0;
  for (int i = 0; i < n; ++i) {
    int best = 0;
    for (int c = 1; c < classes; ++c) {
      if (l(i, c) > l(i, best)) best = c;
    }
    correct += best == labels.data<int32_t>()[i];
  }
  r.accuracy = static_cast<double>(correct) / n;
  return r;
}

}  // namespace cohort::examples
