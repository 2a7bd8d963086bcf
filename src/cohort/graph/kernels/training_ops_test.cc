#include "cohort/graph/kernels/training_ops.h"

#include <cmath>
#include <memory>

#include "cohort/graph/kernel_test_util.h"
#include "cohort/graph/resource_mgr.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort {
namespace {

using ::testing::HasSubstr;

// Creates variable `name` in the test device (initialised when `value` is).
Tensor MakeVar(const std::string& name, const Tensor& value,
               DataType dtype = DT_FLOAT) {
  auto var = std::make_shared<Var>(dtype);
  if (value.IsInitialized()) {
    absl::MutexLock lock(var->mu());
    var->Assign(value.DeepCopy());
  }
  EXPECT_TRUE(TestDevice()->resource_manager()->Create("", name, var).ok());
  ResourceHandle h;
  h.device = TestDevice()->name();
  h.name = name;
  h.type_name = Var::kTypeName;
  return Tensor(h);
}

Tensor Value(const std::string& name) {
  auto var = TestDevice()->resource_manager()->Lookup<Var>("", name);
  EXPECT_TRUE(var.ok());
  absl::ReaderMutexLock lock((*var)->mu());
  return (*var)->value();
}

TEST(ApplyGradientDescentTest, UpdatesInPlaceWithoutChangingSnapshots) {
  Tensor h = MakeVar("gd_w", Tensor::Vec<float>({1, 2}));
  Tensor snapshot = Value("gd_w");
  auto out = RunKernel("ApplyGradientDescent",
                       {h, Tensor(0.5f), Tensor::Vec<float>({2, -2})});
  ASSERT_TRUE(out.ok()) << out.status();
  ExpectTensorEqual(Value("gd_w"), Tensor::Vec<float>({0, 3}));
  ExpectTensorEqual(snapshot, Tensor::Vec<float>({1, 2}));
}

TEST(ApplyGradientDescentTest, Errors) {
  Tensor h = MakeVar("gd_uninit", Tensor(), DT_FLOAT);
  auto uninit = RunKernel("ApplyGradientDescent",
                          {h, Tensor(0.5f), Tensor::Vec<float>({1})});
  EXPECT_EQ(uninit.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(uninit.status().message()), HasSubstr("'gd_uninit'"));
  EXPECT_THAT(std::string(uninit.status().message()), HasSubstr("node 'op'"));
  Tensor w = MakeVar("gd_shape", Tensor::Vec<float>({1, 2, 3}));
  auto shape = RunKernel("ApplyGradientDescent",
                         {w, Tensor(0.5f), Tensor::Vec<float>({1})});
  EXPECT_EQ(shape.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(
      std::string(shape.status().message()),
      HasSubstr("variable 'gd_shape' has shape [3] but grad has shape [1]"));
  auto type = RunKernel("ApplyGradientDescent",
                        {w, Tensor(0.5), Tensor::Vec<double>({1, 2, 3})});
  EXPECT_EQ(type.status().code(), absl::StatusCode::kInvalidArgument);
  ResourceHandle missing;
  missing.name = "gd_missing";
  auto nf = RunKernel("ApplyGradientDescent",
                      {Tensor(missing), Tensor(0.5f), Tensor::Vec<float>({1})});
  EXPECT_EQ(nf.status().code(), absl::StatusCode::kNotFound);
}

TEST(ApplyMomentumTest, PlainAndNesterov) {
  Tensor w = MakeVar("mom_w", Tensor::Vec<float>({1}));
  Tensor a = MakeVar("mom_a", Tensor::Vec<float>({0.5}));
  auto out =
      RunKernel("ApplyMomentum",
                {w, a, Tensor(0.1f), Tensor::Vec<float>({2}), Tensor(0.9f)});
  ASSERT_TRUE(out.ok()) << out.status();
  // accum = 0.5 * 0.9 + 2 = 2.45; w = 1 - 0.1 * 2.45.
  ExpectTensorNear(Value("mom_a"), Tensor::Vec<float>({2.45f}), 1e-6);
  ExpectTensorNear(Value("mom_w"), Tensor::Vec<float>({0.755f}), 1e-6);
  auto nest =
      RunKernel("ApplyMomentum",
                {w, a, Tensor(0.1f), Tensor::Vec<float>({2}), Tensor(0.9f)},
                {{"use_nesterov", true}});
  ASSERT_TRUE(nest.ok());
  // accum = 2.45 * 0.9 + 2 = 4.205; w -= 0.1 * 2 + 0.1 * 0.9 * 4.205.
  ExpectTensorNear(Value("mom_w"),
                   Tensor::Vec<float>({0.755f - 0.2f - 0.37845f}), 1e-5);
}

TEST(ApplyMomentumTest, LargeVariablesFollowTheFormulaBitForBit) {
  // A quarter million elements: the update runs on the test device's pool, and
  // each element must equal the formula with every product rounded.
  const TensorShape shape({500, 500});
  const Tensor w0 = RandomFloats(shape, 6), a0 = RandomFloats(shape, 7);
  const Tensor g = RandomFloats(shape, 8);
  const float lr = 0.01f, momentum = 0.9f;
  Tensor w = MakeVar("mom_big_w", w0);
  Tensor a = MakeVar("mom_big_a", a0);
  auto out =
      RunKernel("ApplyMomentum", {w, a, Tensor(lr), g, Tensor(momentum)});
  ASSERT_TRUE(out.ok()) << out.status();
  Tensor want_w(DT_FLOAT, shape), want_a(DT_FLOAT, shape);
  for (int64_t i = 0; i < g.NumElements(); ++i) {
    const float scaled = a0.data<float>()[i] * momentum;
    const float acc = scaled + g.data<float>()[i];
    const float step = acc * lr;
    want_a.data<float>()[i] = acc;
    want_w.data<float>()[i] = w0.data<float>()[i] - step;
  }
  ExpectSameFloatBits(Value("mom_big_a"), want_a);
  ExpectSameFloatBits(Value("mom_big_w"), want_w);
}

TEST(ApplyAdamTest, MatchesTheFormula) {
  Tensor w = MakeVar("adam_w", Tensor::Vec<double>({1, -1}), DT_DOUBLE);
  Tensor m = MakeVar("adam_m", Tensor::Vec<double>({0, 0}), DT_DOUBLE);
  Tensor v = MakeVar("adam_v", Tensor::Vec<double>({0, 0}), DT_DOUBLE);
  const double b1 = 0.9, b2 = 0.999, lr = 0.01, eps = 1e-8;
  auto out = RunKernel(
      "ApplyAdam", {w, m, v, Tensor(b1), Tensor(b2), Tensor(lr), Tensor(b1),
                    Tensor(b2), Tensor(eps), Tensor::Vec<double>({0.5, -2})});
  ASSERT_TRUE(out.ok()) << out.status();
  const double lr_t = lr * std::sqrt(1 - b2) / (1 - b1);
  auto expect = [&](double w0, double g) {
    double mm = (1 - b1) * g, vv = (1 - b2) * g * g;
    return w0 - lr_t * mm / (std::sqrt(vv) + eps);
  };
  ExpectTensorNear(Value("adam_w"),
                   Tensor::Vec<double>({expect(1, 0.5), expect(-1, -2)}),
                   1e-12);
  ExpectTensorNear(Value("adam_m"), Tensor::Vec<double>({0.05, -0.2}), 1e-12);
  auto bad =
      RunKernel("ApplyAdam", {w, m, v, Tensor::Vec<double>({b1}), Tensor(b2),
                              Tensor(lr), Tensor(b1), Tensor(b2), Tensor(eps),
                              Tensor::Vec<double>({0.5, -2})});
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()),
              HasSubstr("beta1_power must be a scalar"));
}

}  // namespace
}  // namespace cohort
