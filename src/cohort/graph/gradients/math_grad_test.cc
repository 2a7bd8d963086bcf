// Symbolic gradients of math ops against central finite differences.
#include <functional>

#include "absl/strings/str_cat.h"
#include "cohort/graph/gradients.h"
#include "cohort/graph/gradients/grad_check.h"
#include "cohort/graph/kernel_test_util.h"
#include "cohort/graph/kernels/array_ops.h"
#include "cohort/graph/kernels/elementwise_ops.h"
#include "cohort/graph/kernels/math_ops.h"
#include "cohort/graph/kernels/reduction_ops.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort {
namespace {

using Fn = std::function<Output(const Scope&, const std::vector<Output>&)>;

Tensor D(std::vector<double> v, TensorShape s) {
  return *Tensor::FromVector<double>(v, s);
}

// Feeds `xs` through placeholders (unknown shapes when `known_shapes` is
// false, so broadcasting gradients take the run-time path) and checks the
// gradient of f.
void CheckGrad(const Fn& f, const std::vector<Tensor>& xs,
               bool known_shapes = false, double tol = 1e-6) {
  Scope root = Scope::NewRootScope();
  std::vector<Output> ph;
  for (size_t i = 0; i < xs.size(); ++i) {
    ph.push_back(
        ops::Placeholder(root.WithOpName(absl::StrCat("x", i)), xs[i].dtype(),
                         known_shapes ? PartialTensorShape(xs[i].shape())
                                      : PartialTensorShape()));
  }
  Output y = f(root, ph);
  ASSERT_TRUE(root.ok()) << root.status();
  auto err = MaxGradientError(root, ph, xs, y);
  ASSERT_TRUE(err.ok()) << err.status();
  EXPECT_LT(*err, tol);
}

const Tensor kA = D({0.5, -1.2, 2.0, 1.5, -0.3, 0.7}, TensorShape({2, 3}));
const Tensor kRow = D({0.9, -2.0, 1.3}, TensorShape({3}));
const Tensor kCol = D({1.1, -0.4}, TensorShape({2, 1}));
const Tensor kPos = D({0.5, 1.2, 2.0, 1.5, 0.3, 0.7}, TensorShape({2, 3}));

TEST(MathGradTest, AddWithBroadcasting) {
  auto f = [](const Scope& s, const std::vector<Output>& x) {
    return ops::Add(s, x[0], x[1]);
  };
  CheckGrad(f, {kA, kRow});
  CheckGrad(f, {kA, kRow}, /*known_shapes=*/true);
  CheckGrad(f, {kCol, kRow});
  CheckGrad(f, {kA, kA}, true);
}

TEST(MathGradTest, SubMulDivWithBroadcasting) {
  CheckGrad(
      [](const Scope& s, const std::vector<Output>& x) {
        return ops::Sub(s, x[0], x[1]);
      },
      {kCol, kRow});
  CheckGrad(
      [](const Scope& s, const std::vector<Output>& x) {
        return ops::Mul(s, x[0], x[1]);
      },
      {kA, kCol});
  CheckGrad(
      [](const Scope& s, const std::vector<Output>& x) {
        return ops::Div(s, x[0], x[1]);
      },
      {kA, kRow});
}

TEST(MathGradTest, Pow) {
  CheckGrad(
      [](const Scope& s, const std::vector<Output>& x) {
        return ops::Pow(s, x[0], x[1]);
      },
      {kPos, kRow}, false, 1e-5);
}

TEST(MathGradTest, MaximumMinimum) {
  CheckGrad(
      [](const Scope& s, const std::vector<Output>& x) {
        return ops::Maximum(s, x[0], x[1]);
      },
      {kA, kRow});
  CheckGrad(
      [](const Scope& s, const std::vector<Output>& x) {
        return ops::Minimum(s, x[0], x[1]);
      },
      {kCol, kA});
}

TEST(MathGradTest, UnaryOps) {
  using U = Output (*)(const Scope&, Input);
  for (U u : {static_cast<U>(ops::Neg), static_cast<U>(ops::Square),
              static_cast<U>(ops::Exp)}) {
    CheckGrad([u](const Scope& s,
                  const std::vector<Output>& x) { return u(s, x[0]); },
              {kA});
  }
  for (U u : {static_cast<U>(ops::Sqrt), static_cast<U>(ops::Log)}) {
    CheckGrad([u](const Scope& s,
                  const std::vector<Output>& x) { return u(s, x[0]); },
              {kPos});
  }
}

TEST(MathGradTest, AddNAndIdentity) {
  CheckGrad(
      [](const Scope& s, const std::vector<Output>& x) {
        return ops::AddN(s, {x[0], ops::Identity(s, x[1]), x[0]});
      },
      {kA, kPos}, true);
}

TEST(MathGradTest, Select) {
  Tensor cond(DT_BOOL, TensorShape({2, 3}));
  for (int i = 0; i < 6; ++i) cond.data<bool>()[i] = i % 2 == 0;
  CheckGrad(
      [cond](const Scope& s, const std::vector<Output>& x) {
        return ops::Select(s, cond, x[0], x[1]);
      },
      {kA, kPos});
}

TEST(MathGradTest, CastPassesTheGradientBack) {
  Scope root = Scope::NewRootScope();
  auto x = ops::Placeholder(root, DT_DOUBLE);
  auto y =
      ops::Sum(root, ops::Mul(root, ops::Cast(root, x, DT_FLOAT), 3.0f), 0);
  auto xi = ops::Placeholder(root, DT_INT32);
  auto yi = ops::Sum(root, ops::Cast(root, xi, DT_FLOAT), 0);
  std::vector<Output> g;
  ASSERT_TRUE(AddSymbolicGradients(root, {y, yi}, {x, xi}, &g).ok())
      << root.status();
  EXPECT_EQ(g[0].dtype(), DT_DOUBLE);
  auto out = EvalGraph(
      root, {{x, Tensor::Vec<double>({1, 2})}, {xi, Tensor::Vec<int32_t>({1})}},
      {g[0], g[1]});
  ASSERT_TRUE(out.ok()) << out.status();
  ExpectTensorNear((*out)[0], Tensor::Vec<double>({3, 3}), 1e-12);
  // No gradient flows into an integer: zeros.
  ExpectTensorEqual((*out)[1], Tensor::Vec<int32_t>({0}));
}

TEST(MathGradTest, MatMulAllTransposes) {
  const Tensor a = D({1, 2, 3, 4, 5, 6}, TensorShape({2, 3}));
  const Tensor b = D({0.5, -1, 2, 0.3, 0.1, -0.7}, TensorShape({3, 2}));
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      SCOPED_TRACE(absl::StrCat("ta=", ta, " tb=", tb));
      Tensor av = ta ? D({1, 4, 2, 5, 3, 6}, TensorShape({3, 2})) : a;
      Tensor bv = tb ? D({0.5, 2, 0.1, -1, 0.3, -0.7}, TensorShape({2, 3})) : b;
      CheckGrad(
          [ta, tb](const Scope& s, const std::vector<Output>& x) {
            return ops::MatMul(s, x[0], x[1], ta, tb);
          },
          {av, bv}, true);
    }
  }
}

TEST(MathGradTest, Reductions) {
  const Tensor x =
      D({0.5, -1.2, 2.0, 1.5, -0.3, 0.7, 3.1, 0.2, -2.2, 1.0, 0.4, 0.8},
        TensorShape({2, 3, 2}));
  for (bool keep : {false, true}) {
    CheckGrad(
        [keep](const Scope& s, const std::vector<Output>& v) {
          return ops::Sum(s, v[0], 1, keep);
        },
        {x});
    CheckGrad(
        [keep](const Scope& s, const std::vector<Output>& v) {
          return ops::Mean(s, v[0], Tensor::Vec<int32_t>({0, 2}), keep);
        },
        {x});
    CheckGrad(
        [keep](const Scope& s, const std::vector<Output>& v) {
          return ops::Max(s, v[0], -1, keep);
        },
        {x});
  }
  CheckGrad(
      [](const Scope& s, const std::vector<Output>& v) {
        return ops::Mean(s, v[0], Tensor::Vec<int32_t>({0, 1, 2}));
      },
      {x}, true);
}

TEST(MathGradTest, MaxSplitsTiesEqually) {
  Scope root = Scope::NewRootScope();
  auto x = ops::Placeholder(root, DT_DOUBLE);
  auto y = ops::Max(root, x, 0);
  std::vector<Output> g;
  ASSERT_TRUE(AddSymbolicGradients(root, {y}, {x}, &g).ok());
  auto out = EvalGraph(root, {{x, Tensor::Vec<double>({2, 1, 2})}}, {g[0]});
  ASSERT_TRUE(out.ok()) << out.status();
  ExpectTensorNear((*out)[0], Tensor::Vec<double>({0.5, 0, 0.5}), 1e-12);
}

TEST(MathGradTest, ComparisonsStopTheGradient) {
  Scope root = Scope::NewRootScope();
  auto x = ops::Placeholder(root, DT_DOUBLE);
  auto y = ops::Select(root, ops::Greater(root, x, 0.0), x, ops::Neg(root, x));
  std::vector<Output> g;
  ASSERT_TRUE(AddSymbolicGradients(root, {y}, {x}, &g).ok()) << root.status();
  auto out = EvalGraph(root, {{x, Tensor::Vec<double>({2, -3})}}, {g[0]});
  ASSERT_TRUE(out.ok()) << out.status();
  ExpectTensorNear((*out)[0], Tensor::Vec<double>({1, -1}), 1e-12);
}

}  // namespace
}  // namespace cohort
