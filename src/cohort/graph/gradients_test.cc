#include "cohort/graph/gradients.h"

#include "cohort/graph/kernels/array_ops.h"
#include "cohort/graph/kernels/math_ops.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort {
namespace {

using ::testing::HasSubstr;

// A registry with Identity's gradient and an Add gradient valid for
// same-shape inputs (the real one, with broadcasting, lives in gradients/).
GradientRegistry* TestGradients() {
  static GradientRegistry* r = [] {
    auto* r = new GradientRegistry();
    EXPECT_TRUE(r->Register("Identity", [](const Scope& s, const Operation& op,
                                           const std::vector<Output>& dy,
                                           std::vector<Output>* dx) {
                   dx->push_back(ops::Identity(s, dy[0]));
                   return s.status();
                 }).ok());
    EXPECT_TRUE(r->Register("Add", [](const Scope& s, const Operation& op,
                                      const std::vector<Output>& dy,
                                      std::vector<Output>* dx) {
                   dx->push_back(dy[0]);
                   dx->push_back(dy[0]);
                   return absl::OkStatus();
                 }).ok());
    EXPECT_TRUE(r->RegisterNoGradient("Const").ok());
    return r;
  }();
  return r;
}

TEST(GradientsTest, SumsGradientsOfAllPaths) {
  Scope root = Scope::NewRootScope();
  auto x = ops::Placeholder(root.WithOpName("x"), DT_FLOAT);
  auto a = ops::Identity(root, x);
  auto y = ops::Add(root, a, x);     // dy/dx = 2 through two paths
  auto z = ops::Add(root, y, 1.0f);  // the Const gets no gradient
  auto seed = ops::Const(root, 1.0f);
  std::vector<Output> grads;
  ASSERT_TRUE(
      AddSymbolicGradients(root, {z}, {x, a}, {seed}, &grads, TestGradients())
          .ok())
      << root.status();
  ASSERT_EQ(grads.size(), 2u);
  // dz/dx sums two contributions with Add (no AddN in the standard set yet
  // or with AddN when registered): a node, not the seed itself.
  EXPECT_TRUE(grads[0].valid());
  EXPECT_NE(grads[0], seed);
  EXPECT_TRUE(grads[1].valid());
  EXPECT_THAT(grads[0].node_name(), HasSubstr("gradients"));
}

TEST(GradientsTest, MissingGradientNamesTheNode) {
  GradientRegistry empty;
  Scope root = Scope::NewRootScope();
  auto x = ops::Placeholder(root.WithOpName("x"), DT_FLOAT);
  auto y = ops::Identity(root.WithOpName("id"), x);
  std::vector<Output> grads;
  absl::Status s = AddSymbolicGradients(root, {y}, {x}, {ops::Const(root, 1.f)},
                                        &grads, &empty);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(s.message()), HasSubstr("node 'id'"));
}

TEST(GradientsTest, BadGradYs) {
  Scope root = Scope::NewRootScope();
  auto x = ops::Placeholder(root, DT_FLOAT);
  std::vector<Output> grads;
  EXPECT_EQ(
      AddSymbolicGradients(root, {x}, {x}, {}, &grads, TestGradients()).code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(AddSymbolicGradients(root, {x}, {x}, {ops::Const(root, 1.0)},
                                 &grads, TestGradients())
                .code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(GradientsTest, XIsYGivesSeed) {
  Scope root = Scope::NewRootScope();
  auto x = ops::Placeholder(root, DT_FLOAT);
  auto seed = ops::Const(root, 3.f);
  std::vector<Output> grads;
  ASSERT_TRUE(
      AddSymbolicGradients(root, {x}, {x}, {seed}, &grads, TestGradients())
          .ok());
  EXPECT_EQ(grads[0], seed);
}

}  // namespace
}  // namespace cohort
