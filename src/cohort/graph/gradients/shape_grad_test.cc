// Symbolic gradients of shape ops against central finite differences.
#include "absl/strings/str_cat.h"
#include "cohort/graph/gradients.h"
#include "cohort/graph/gradients/grad_check.h"
#include "cohort/graph/kernel_test_util.h"
#include "cohort/graph/kernels/array_ops.h"
#include "cohort/graph/kernels/elementwise_ops.h"
#include "cohort/graph/kernels/shape_ops.h"
#include "gtest/gtest.h"

namespace cohort {
namespace {

Tensor D(std::vector<double> v, TensorShape s) {
  return *Tensor::FromVector<double>(v, s);
}

double GradError(
    const std::vector<Tensor>& xs,
    const std::function<Output(const Scope&, const std::vector<Output>&)>& f) {
  Scope root = Scope::NewRootScope();
  std::vector<Output> ph;
  for (size_t i = 0; i < xs.size(); ++i) {
    ph.push_back(
        ops::Placeholder(root.WithOpName(absl::StrCat("x", i)), xs[i].dtype()));
  }
  Output y = f(root, ph);
  EXPECT_TRUE(root.ok()) << root.status();
  auto err = MaxGradientError(root, ph, xs, y);
  EXPECT_TRUE(err.ok()) << err.status();
  return err.ok() ? *err : 1e9;
}

const Tensor kX = D({0.5, -1.2, 2.0, 1.5, -0.3, 0.7}, TensorShape({2, 3}));

TEST(ShapeGradTest, Reshape) {
  EXPECT_LT(
      GradError({kX},
                [](const Scope& s, const std::vector<Output>& x) {
                  return ops::Square(
                      s, ops::Reshape(s, x[0], Tensor::Vec<int32_t>({3, -1})));
                }),
      1e-6);
}

TEST(ShapeGradTest, Concat) {
  const Tensor y = D({1, 2, 3, 4}, TensorShape({2, 2}));
  EXPECT_LT(
      GradError({kX, y},
                [](const Scope& s, const std::vector<Output>& x) {
                  return ops::Square(s, ops::Concat(s, {x[0], x[1], x[0]}, 1));
                }),
      1e-6);
}

TEST(ShapeGradTest, SliceAndSliceGrad) {
  EXPECT_LT(GradError({kX},
                      [](const Scope& s, const std::vector<Output>& x) {
                        return ops::Square(
                            s, ops::Slice(s, x[0], Tensor::Vec<int32_t>({0, 1}),
                                          Tensor::Vec<int32_t>({2, -1})));
                      }),
            1e-6);
  EXPECT_LT(GradError({D({1, 2}, TensorShape({1, 2}))},
                      [](const Scope& s, const std::vector<Output>& x) {
                        return ops::Square(
                            s,
                            ops::SliceGrad(s, Tensor::Vec<int32_t>({2, 3}),
                                           Tensor::Vec<int32_t>({1, 1}), x[0]));
                      }),
            1e-6);
}

TEST(ShapeGradTest, Fill) {
  EXPECT_LT(GradError({Tensor(1.5)},
                      [](const Scope& s, const std::vector<Output>& x) {
                        return ops::Square(
                            s,
                            ops::Fill(s, Tensor::Vec<int32_t>({2, 2}), x[0]));
                      }),
            1e-6);
}

}  // namespace
}  // namespace cohort
