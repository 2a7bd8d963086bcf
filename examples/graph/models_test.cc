// The examples converge: the losses fall below stated bounds.
#include "examples/graph/models.h"

#include "gtest/gtest.h"

namespace cohort::examples {
namespace {

TEST(ExamplesTest, LinearRegressionReachesTheNoiseFloor) {
  auto r = TrainLinearRegression(200);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_GT(r->initial_loss, 1.0);
  // Noise variance is 1e-4; the bound leaves room for 200 steps of GD.
  EXPECT_LT(r->final_loss, 1e-3);
}

TEST(ExamplesTest, TwoLayerClassifierSeparatesTheRings) {
  auto r = TrainTwoLayerClassifier(300);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_GT(r->initial_loss, 0.9);  // About log(3) for near-uniform logits.
  EXPECT_LT(r->final_loss, 0.15);
  EXPECT_GT(r->accuracy, 0.95);
}

}  // namespace
}  // namespace cohort::examples
