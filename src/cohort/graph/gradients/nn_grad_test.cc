// Symbolic gradients of nn ops against central finite differences.
#include "absl/strings/str_cat.h"
#include "cohort/graph/gradients.h"
#include "cohort/graph/gradients/grad_check.h"
#include "cohort/graph/kernel_test_util.h"
#include "cohort/graph/kernels/array_ops.h"
#include "cohort/graph/kernels/nn_ops.h"
#include "gtest/gtest.h"

namespace cohort {
namespace {

Tensor D(std::vector<double> v, TensorShape s) {
  return *Tensor::FromVector<double>(v, s);
}

const Tensor kX = D({0.5, -1.2, 2.0, 1.5, -0.3, 0.7}, TensorShape({2, 3}));

double GradError(
    const std::vector<Tensor>& xs,
    const std::function<Output(const Scope&, const std::vector<Output>&)>& f) {
  Scope root = Scope::NewRootScope();
  std::vector<Output> ph;
  for (size_t i = 0; i < xs.size(); ++i) {
    ph.push_back(ops::Placeholder(root.WithOpName(absl::StrCat("x", i)),
                                  xs[i].dtype(), xs[i].shape()));
  }
  Output y = f(root, ph);
  EXPECT_TRUE(root.ok()) << root.status();
  auto err = MaxGradientError(root, ph, xs, y);
  EXPECT_TRUE(err.ok()) << err.status();
  return err.ok() ? *err : 1e9;
}

TEST(NnGradTest, Activations) {
  EXPECT_LT(GradError({kX},
                      [](const Scope& s, const std::vector<Output>& x) {
                        return ops::Relu(s, x[0]);
                      }),
            1e-6);
  EXPECT_LT(GradError({kX},
                      [](const Scope& s, const std::vector<Output>& x) {
                        return ops::Sigmoid(s, x[0]);
                      }),
            1e-6);
  EXPECT_LT(GradError({kX},
                      [](const Scope& s, const std::vector<Output>& x) {
                        return ops::Tanh(s, x[0]);
                      }),
            1e-6);
  EXPECT_LT(GradError({kX},
                      [](const Scope& s, const std::vector<Output>& x) {
                        return ops::Softmax(s, x[0]);
                      }),
            1e-6);
}

TEST(NnGradTest, ReluGradIsLinearInItsGradients) {
  // d/dgradients is the mask of positive features; d/dfeatures is zero
  // (kX keeps every feature away from 0, where the mask would jump).
  const Tensor g = D({1.0, -2.0, 0.5, 3.0, 0.25, -1.5}, TensorShape({2, 3}));
  EXPECT_LT(GradError({g, kX},
                      [](const Scope& s, const std::vector<Output>& x) {
                        return ops::ReluGrad(s, x[0], x[1]);
                      }),
            1e-6);
}

TEST(NnGradTest, SoftmaxCrossEntropyFeaturesAndLabels) {
  const Tensor labels = D({0.2, 0.3, 0.5, 1, 0, 0}, TensorShape({2, 3}));
  EXPECT_LT(
      GradError({kX, labels},
                [](const Scope& s, const std::vector<Output>& x) {
                  return ops::SoftmaxCrossEntropyWithLogits(s, x[0], x[1]).loss;
                }),
      1e-6);
}

TEST(NnGradTest, SparseSoftmaxCrossEntropy) {
  Tensor labels = Tensor::Vec<int64_t>({2, 0});
  EXPECT_LT(GradError({kX},
                      [labels](const Scope& s, const std::vector<Output>& x) {
                        return ops::SparseSoftmaxCrossEntropyWithLogits(s, x[0],
                                                                        labels)
                            .loss;
                      }),
            1e-6);
}

}  // namespace
}  // namespace cohort
