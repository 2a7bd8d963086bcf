#include "cohort/graph/kernels/random_ops.h"

#include <cmath>
#include <random>

#include "cohort/graph/kernel_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort {
namespace {

using ::testing::HasSubstr;

TEST(RandomTest, SameSeedSameNumbers) {
  for (const char* op : {"RandomUniform", "RandomNormal"}) {
    auto a = RunKernel(
        op, {Tensor::Vec<int32_t>({3, 4})},
        {{"dtype", DT_FLOAT}, {"seed", int64_t{7}}, {"seed2", int64_t{1}}});
    auto b = RunKernel(
        op, {Tensor::Vec<int32_t>({3, 4})},
        {{"dtype", DT_FLOAT}, {"seed", int64_t{7}}, {"seed2", int64_t{1}}});
    auto c = RunKernel(
        op, {Tensor::Vec<int32_t>({3, 4})},
        {{"dtype", DT_FLOAT}, {"seed", int64_t{8}}, {"seed2", int64_t{1}}});
    ASSERT_TRUE(a.ok() && b.ok() && c.ok()) << a.status();
    EXPECT_EQ((*a)[0].shape().DebugString(), "[3,4]");
    ExpectTensorEqual((*a)[0], (*b)[0]);
    EXPECT_FALSE((*a)[0].Equals((*c)[0]));
  }
}

TEST(RandomTest, UniformRangeAndNormalMoments) {
  auto u = RunKernel("RandomUniform", {Tensor::Vec<int32_t>({20000})},
                     {{"dtype", DT_DOUBLE}, {"seed", int64_t{1}}});
  ASSERT_TRUE(u.ok());
  double sum = 0;
  for (double v : (*u)[0].span<double>()) {
    ASSERT_GE(v, 0.0);
    ASSERT_LT(v, 1.0);
    sum += v;
  }
  EXPECT_NEAR(sum / 20000, 0.5, 0.01);
  auto n = RunKernel("RandomNormal", {Tensor::Vec<int32_t>({20001})},
                     {{"dtype", DT_FLOAT}, {"seed", int64_t{2}}});
  ASSERT_TRUE(n.ok());
  double m = 0, sq = 0;
  for (float v : (*n)[0].span<float>()) {
    m += v;
    sq += v * v;
  }
  m /= 20001;
  EXPECT_NEAR(m, 0.0, 0.03);
  EXPECT_NEAR(sq / 20001 - m * m, 1.0, 0.05);
}

TEST(RandomTest, KnownFirstValuesPinTheGenerator) {
  // mt19937_64 is fully specified by the C++ standard: these values must not
  // change across platforms or releases.
  auto u = RunKernel("RandomUniform", {Tensor::Vec<int32_t>({2})},
                     {{"dtype", DT_DOUBLE}, {"seed", int64_t{1}}});
  ASSERT_TRUE(u.ok());
  std::mt19937_64 engine(0x9E3779B97F4A7C15ULL);
  double first = static_cast<double>(engine() >> 11) / 9007199254740992.0;
  EXPECT_EQ((*u)[0].span<double>()[0], first);
}

TEST(RandomTest, Errors) {
  auto neg = RunKernel("RandomUniform", {Tensor::Vec<int32_t>({-1})},
                       {{"dtype", DT_FLOAT}});
  EXPECT_EQ(neg.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(neg.status().message()), HasSubstr("node 'op'"));
  auto type = RunKernel("RandomNormal", {Tensor::Vec<int32_t>({1})},
                        {{"dtype", DT_INT32}});
  EXPECT_EQ(type.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace cohort
