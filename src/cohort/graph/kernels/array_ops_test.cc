#include "cohort/graph/kernels/array_ops.h"

#include "cohort/graph/kernel_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort {
namespace {

using ::testing::HasSubstr;

TEST(ArrayOpsTest, ConstOutputsItsValue) {
  Tensor v = Tensor::Vec<int32_t>({1, 2, 3});
  auto out = RunKernel("Const", {}, {{"value", v}, {"dtype", DT_INT32}});
  ASSERT_TRUE(out.ok()) << out.status();
  ExpectTensorEqual((*out)[0], v);
}

TEST(ArrayOpsTest, ConstRejectsMismatchedDtype) {
  auto out =
      RunKernel("Const", {}, {{"value", Tensor(1.f)}, {"dtype", DT_INT32}});
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ArrayOpsTest, IdentitySharesTheBuffer) {
  Tensor v = Tensor::Vec<std::string>({"a", "b"});
  auto out = RunKernel("Identity", {v});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_TRUE((*out)[0].SharesBufferWith(v));
}

TEST(ArrayOpsTest, UnfedPlaceholderFailsNamingIt) {
  auto out =
      RunKernel("Placeholder", {},
                {{"dtype", DT_FLOAT}, {"shape", PartialTensorShape({-1, 3})}});
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(
      std::string(out.status().message()),
      HasSubstr(
          "you must feed a value for placeholder 'op' (float, shape [?,3])"));
}

TEST(ArrayOpsTest, NoOpHasNoOutputs) {
  auto out = RunKernel("NoOp", {});
  ASSERT_TRUE(out.ok());
  EXPECT_TRUE(out->empty());
}

}  // namespace
}  // namespace cohort
