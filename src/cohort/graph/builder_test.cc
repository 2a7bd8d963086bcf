#include "cohort/graph/builder.h"

#include "cohort/graph/kernels/array_ops.h"
#include "cohort/graph/kernels/math_ops.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(BuilderTest, NamesScopesDevicesAndInputs) {
  Scope root = Scope::NewRootScope();
  auto x = ops::Placeholder(root.WithOpName("x"), DT_FLOAT, {-1, 3});
  Scope dense =
      root.NewSubScope("dense").WithDevice("/job:ps/task:0/device:CPU:0");
  auto y = ops::Add(dense, x, 1.0f);  // The literal becomes a float Const.
  auto z = ops::Add(dense, y, y);
  ASSERT_TRUE(root.ok()) << root.status();
  EXPECT_EQ(x.name(), "x:0");
  EXPECT_EQ(y.node_name(), "dense/Add");
  EXPECT_EQ(z.node_name(), "dense/Add_1");
  EXPECT_EQ(y.op().device(), "/job:ps/task:0/device:CPU:0");
  EXPECT_EQ(y.dtype(), DT_FLOAT);
  EXPECT_EQ(y.shape().DebugString(), "[?,3]");
  EXPECT_EQ(root.NewSubScope("dense").name_scope(), "dense_1");
  GraphDef g;
  ASSERT_TRUE(root.ToGraphDef(&g).ok());
  ASSERT_EQ(g.node_size(), 4);
  EXPECT_EQ(g.node(1).name(), "dense/Const");
  EXPECT_EQ(g.node(2).attr().at("T").type(), DT_FLOAT);
  EXPECT_THAT(g.node(2).input(), ElementsAre("x", "dense/Const"));
  EXPECT_EQ(root.FindOp("dense/Add_1"), z.op());
}

TEST(BuilderTest, ControlDependencies) {
  Scope root = Scope::NewRootScope();
  auto init = ops::NoOp(root.WithOpName("init"));
  auto c =
      ops::Const(root.WithControlDependencies({init}).WithOpName("c"), 2.0f);
  auto d = ops::Const(
      root.WithControlDependencies({init}).WithNoControlDependencies(), 3.0f);
  ASSERT_TRUE(root.ok());
  EXPECT_THAT(c.op().node_def().input(), ElementsAre("^init"));
  EXPECT_TRUE(d.op().node_def().input().empty());
  ASSERT_EQ(c.op().control_inputs().size(), 1u);
  EXPECT_EQ(c.op().control_inputs()[0], init);
}

TEST(BuilderTest, ShapeErrorsNameTheNodeAndStick) {
  Scope root = Scope::NewRootScope();
  auto a = ops::Const(root, Tensor(DT_FLOAT, TensorShape({2, 3})));
  auto b = ops::Const(root, Tensor(DT_FLOAT, TensorShape({4})));
  auto bad = ops::Add(root.WithOpName("bad"), a, b);
  EXPECT_FALSE(bad.valid());
  EXPECT_EQ(root.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(root.status().message()),
              HasSubstr("node 'bad' (op Add)"));
  EXPECT_THAT(std::string(root.status().message()), HasSubstr("[2,3] and [4]"));
  // Later ops do nothing; the first error is kept.
  auto later = ops::Add(root, a, a);
  EXPECT_FALSE(later.valid());
  GraphDef g;
  EXPECT_THAT(std::string(root.ToGraphDef(&g).message()), HasSubstr("'bad'"));
}

TEST(BuilderTest, TypeErrors) {
  Scope root = Scope::NewRootScope();
  auto f = ops::Const(root, 1.0f);
  auto i = ops::Const(root, int64_t{1});
  ops::Add(root.WithOpName("mixed"), f, i);
  EXPECT_THAT(std::string(root.status().message()),
              HasSubstr("input 'y' has type int64 but attr T is float"));

  Scope r2 = Scope::NewRootScope();
  auto s = ops::Const(r2, Tensor("text"));
  ops::Add(r2.WithOpName("strings"), s, s);
  EXPECT_THAT(
      std::string(r2.status().message()),
      HasSubstr("attr 'T' is string, allowed [float, double, int32, int64]"));

  Scope r3 = Scope::NewRootScope();
  BuildOp(r3.WithOpName("u"), "NoSuchOp", {});
  EXPECT_THAT(std::string(r3.status().message()),
              HasSubstr("unknown op 'NoSuchOp'"));
}

TEST(BuilderTest, LiteralsTakeTheOtherOperandsType) {
  Scope root = Scope::NewRootScope();
  auto x = ops::Placeholder(root, DT_INT64, {2});
  auto y = ops::Add(root, x, 1.0);  // double literal cast to int64
  ASSERT_TRUE(root.ok()) << root.status();
  EXPECT_EQ(y.dtype(), DT_INT64);
  auto d = ops::Add(root, 2.0, {1.f, 2.f});
  ASSERT_TRUE(root.ok()) << root.status();
  EXPECT_EQ(d.dtype(), DT_DOUBLE);
  EXPECT_EQ(d.shape().DebugString(), "[2]");
}

TEST(BuilderTest, ExtendSinceNode) {
  Scope root = Scope::NewRootScope();
  ops::Const(root, 1.0f);
  int mark = root.num_nodes();
  ops::Const(root, 2.0f);
  GraphDef tail;
  ASSERT_TRUE(root.ToGraphDef(&tail, mark).ok());
  ASSERT_EQ(tail.node_size(), 1);
  EXPECT_EQ(tail.node(0).name(), "Const_1");
}

TEST(CastTensorTest, Numeric) {
  auto t = CastTensor(Tensor::Vec<float>({1.7f, -2.2f}), DT_INT32);
  ASSERT_TRUE(t.ok());
  EXPECT_TRUE(t->Equals(Tensor::Vec<int32_t>({1, -2})));
  EXPECT_FALSE(CastTensor(Tensor("a"), DT_FLOAT).ok());
}

}  // namespace
}  // namespace cohort
