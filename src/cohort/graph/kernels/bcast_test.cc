#include "cohort/graph/kernels/bcast.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort {
namespace {

using ::testing::ElementsAre;

TEST(BCastTest, SameShape) {
  BCast b(BCast::Vec{2, 3}, BCast::Vec{2, 3});
  ASSERT_TRUE(b.valid());
  EXPECT_TRUE(b.same_shape());
  EXPECT_EQ(b.output_shape().DebugString(), "[2,3]");
  EXPECT_THAT(b.result_shape(), ElementsAre(6));  // collapsed
  EXPECT_TRUE(b.grad_x_reduce_idx().empty());
}

TEST(BCastTest, RowVector) {
  BCast b(BCast::Vec{4, 3}, BCast::Vec{3});
  ASSERT_TRUE(b.valid());
  EXPECT_EQ(b.output_shape().DebugString(), "[4,3]");
  EXPECT_THAT(b.x_reshape(), ElementsAre(4, 3));
  EXPECT_THAT(b.y_reshape(), ElementsAre(1, 3));
  EXPECT_THAT(b.y_bcast(), ElementsAre(4, 1));
  EXPECT_THAT(b.x_bcast(), ElementsAre(1, 1));
  EXPECT_TRUE(b.grad_x_reduce_idx().empty());
  EXPECT_THAT(b.grad_y_reduce_idx(), ElementsAre(0));
}

TEST(BCastTest, BothBroadcastAndCollapse) {
  BCast b(BCast::Vec{2, 1, 5, 7}, BCast::Vec{3, 5, 7});
  ASSERT_TRUE(b.valid());
  EXPECT_EQ(b.output_shape().DebugString(), "[2,3,5,7]");
  EXPECT_THAT(b.x_reshape(), ElementsAre(2, 1, 35));
  EXPECT_THAT(b.y_reshape(), ElementsAre(1, 3, 35));
  EXPECT_THAT(b.grad_x_reduce_idx(), ElementsAre(1));
  EXPECT_THAT(b.grad_y_reduce_idx(), ElementsAre(0));
}

TEST(BCastTest, ScalarAndOnes) {
  BCast b(BCast::Vec{}, BCast::Vec{1, 1});
  ASSERT_TRUE(b.valid());
  EXPECT_EQ(b.output_shape().DebugString(), "[1,1]");
  EXPECT_THAT(b.grad_x_reduce_idx(), ElementsAre(0, 1));
  EXPECT_TRUE(b.grad_y_reduce_idx().empty());
}

TEST(BCastTest, Incompatible) {
  BCast b(BCast::Vec{2, 3}, BCast::Vec{4});
  EXPECT_FALSE(b.valid());
  EXPECT_EQ(b.ErrorMessage(),
            "incompatible shapes for broadcasting: [2,3] and [4]");
}

}  // namespace
}  // namespace cohort
