// A graph cannot kill the process that runs it (issue 25, item 2): integer
// traps become results or errors, and every tensor a graph's kernels
// allocate is checked against the step's and the device's memory budgets.
#include "cohort/graph/memory_budget.h"

#include <climits>
#include <cstdint>
#include <limits>
#include <vector>

#include "cohort/graph/builder.h"
#include "cohort/graph/kernels/array_ops.h"
#include "cohort/graph/kernels/elementwise_ops.h"
#include "cohort/graph/kernels/math_ops.h"
#include "cohort/graph/kernels/random_ops.h"
#include "cohort/graph/kernels/reduction_ops.h"
#include "cohort/graph/kernels/shape_ops.h"
#include "cohort/graph/kernels/state_ops.h"
#include "cohort/graph/local_session.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kMiB = int64_t{1} << 20;

std::unique_ptr<LocalSession> MakeSession(const Scope& root,
                                          const MemoryLimits& limits = {}) {
  GraphDef def;
  EXPECT_TRUE(root.ToGraphDef(&def).ok()) << root.status();
  SessionOptions options;
  options.num_threads = 2;
  options.memory = limits;
  auto s = LocalSession::Create(def, options);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *std::move(s) : nullptr;
}

TEST(MemoryBudgetTest, ChargesTheChainOrNothing) {
  auto parent = MemoryBudget::Create("the parent", 100, nullptr, "raise it");
  auto child = MemoryBudget::Create("the child", 60, parent.get(), "raise it");
  ASSERT_TRUE(child->Charge(50, "a").ok());
  EXPECT_EQ(child->used(), 50);
  EXPECT_EQ(parent->used(), 50);
  // Over the child's limit: nothing charged anywhere.
  absl::Status s = child->Charge(20, "output 0");
  EXPECT_TRUE(absl::IsResourceExhausted(s)) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("output 0 needs 20 bytes"));
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("the child's memory budget of 60 bytes"));
  EXPECT_EQ(child->used(), 50);
  EXPECT_EQ(parent->used(), 50);
  // Over the parent's limit through another child: the first is untouched.
  auto other = MemoryBudget::Create("other", 1000, parent.get(), "raise it");
  s = other->Charge(60, "x");
  EXPECT_TRUE(absl::IsResourceExhausted(s)) << s;
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("the parent's memory budget"));
  EXPECT_EQ(other->used(), 0);
  // A request beyond any count is refused without overflowing.
  EXPECT_TRUE(absl::IsResourceExhausted(child->Charge(INT64_MAX, "huge")));
  child->Release(50);
  EXPECT_EQ(parent->used(), 0);
}

TEST(MemoryBudgetTest, BuffersGiveTheirBytesBackWhenFreed) {
  auto budget = MemoryBudget::Create("b", 1 << 20, nullptr, "raise it");
  {
    auto t = Tensor::Allocate(DT_FLOAT, TensorShape({1000}), budget.get(), "");
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_GE(budget->used(), 4000);
    Tensor copy = t->DeepCopy();  // Charged too, unchecked.
    EXPECT_GE(budget->used(), 8000);
  }
  EXPECT_EQ(budget->used(), 0);
  auto huge = Tensor::Allocate(DT_FLOAT, TensorShape({int64_t{1} << 62}),
                               budget.get(), "");
  EXPECT_TRUE(absl::IsInvalidArgument(huge.status())) << huge.status();
}

// Div(INT_MIN, -1) trapped (SIGFPE) and killed the process.
template <typename T>
void DivMinByMinusOne() {
  Scope root = Scope::NewRootScope();
  const DataType dt = DataTypeToEnum<T>::value;
  auto x = ops::Placeholder(root.WithOpName("x"), dt);
  auto y = ops::Placeholder(root.WithOpName("y"), dt);
  ops::Div(root.WithOpName("div"), x, y);
  auto session = MakeSession(root);
  const T min = std::numeric_limits<T>::min();
  std::vector<Tensor> out;
  // Broadcast (scalar divisor) and elementwise paths.
  ASSERT_TRUE(session
                  ->Run({{"x", Tensor::Vec<T>({min, 7, -7})},
                         {"y", Tensor::Vec<T>({-1})}},
                        {"div:0"}, {}, &out)
                  .ok());
  EXPECT_TRUE(out[0].Equals(Tensor::Vec<T>({min, -7, 7})))
      << out[0].DebugString();
  ASSERT_TRUE(session
                  ->Run({{"x", Tensor::Vec<T>({min, min})},
                         {"y", Tensor::Vec<T>({-1, 2})}},
                        {"div:0"}, {}, &out)
                  .ok());
  EXPECT_TRUE(out[0].Equals(Tensor::Vec<T>({min, min / 2})));
  // Division by zero is an error naming the node; the session still runs.
  absl::Status s =
      session->Run({{"x", Tensor::Vec<T>({1})}, {"y", Tensor::Vec<T>({0})}},
                   {"div:0"}, {}, &out);
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("node 'div' (op Div)"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("division by zero"));
  ASSERT_TRUE(
      session
          ->Run({{"x", Tensor::Vec<T>({9})}, {"y", Tensor::Vec<T>({3})}},
                {"div:0"}, {}, &out)
          .ok());
  EXPECT_TRUE(out[0].Equals(Tensor::Vec<T>({3})));
}

TEST(GraphCannotKillTest, IntDivMinByMinusOneInt32) {
  DivMinByMinusOne<int32_t>();
}
TEST(GraphCannotKillTest, IntDivMinByMinusOneInt64) {
  DivMinByMinusOne<int64_t>();
}

// Signed overflow in the other integer kernels wraps (no undefined
// behaviour for the sanitizers to trap on).
TEST(GraphCannotKillTest, IntegerOverflowWraps) {
  Scope root = Scope::NewRootScope();
  auto x = ops::Placeholder(root.WithOpName("x"), DT_INT32);
  ops::Neg(root.WithOpName("neg"), x);
  ops::Mul(root.WithOpName("mul"), x, x);
  ops::Add(root.WithOpName("add"), x, x);
  ops::Sub(root.WithOpName("sub"), ops::Neg(root, x), x);
  auto session = MakeSession(root);
  std::vector<Tensor> out;
  ASSERT_TRUE(session
                  ->Run({{"x", Tensor::Vec<int32_t>({INT_MIN})}},
                        {"neg:0", "mul:0", "add:0"}, {}, &out)
                  .ok());
  EXPECT_TRUE(out[0].Equals(Tensor::Vec<int32_t>({INT_MIN})));
  EXPECT_TRUE(out[1].Equals(Tensor::Vec<int32_t>({0})));
  EXPECT_TRUE(out[2].Equals(Tensor::Vec<int32_t>({0})));
}

// Fill and RandomUniform with shape [2147483647, 512] aborted on an
// out-of-memory CHECK.
// A float cast to an integer type it does not fit (found by
// fuzz_graph_run: 1e277 to int32, undefined behaviour) saturates, and NaN
// gives 0.
TEST(GraphCannotKillTest, FloatToIntCastsSaturate) {
  Scope root = Scope::NewRootScope();
  auto x = ops::Placeholder(root.WithOpName("x"), DT_DOUBLE);
  ops::Cast(root.WithOpName("i32"), x, DT_INT32);
  ops::Cast(root.WithOpName("i64"), x, DT_INT64);
  auto session = MakeSession(root);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  std::vector<Tensor> out;
  ASSERT_TRUE(session
                  ->Run({{"x", Tensor::Vec<double>(
                                   {1e277, -1e277, nan, -7.9, 2147483647.0})}},
                        {"i32:0", "i64:0"}, {}, &out)
                  .ok());
  EXPECT_TRUE(out[0].Equals(
      Tensor::Vec<int32_t>({INT32_MAX, INT32_MIN, 0, -7, INT32_MAX})));
  EXPECT_TRUE(out[1].Equals(
      Tensor::Vec<int64_t>({INT64_MAX, INT64_MIN, 0, -7, 2147483647})));
}

// Integer Sum and MatMul wrap like the elementwise integer kernels (found by
// fuzz_graph_run: Eigen's reducer overflowed, undefined behaviour).
TEST(GraphCannotKillTest, IntegerSumAndMatMulWrap) {
  Scope root = Scope::NewRootScope();
  auto x = ops::Placeholder(root.WithOpName("x"), DT_INT32);
  ops::Sum(root.WithOpName("sum"), x,
           ops::Const(root, Tensor::Vec<int32_t>({0, 1})));
  ops::MatMul(root.WithOpName("mm"), x, x, /*transpose_a=*/false,
              /*transpose_b=*/true);
  auto session = MakeSession(root);
  std::vector<Tensor> out;
  Tensor big(DT_INT32, TensorShape({1, 2}));
  big.flat<int32_t>()(0) = INT32_MAX;
  big.flat<int32_t>()(1) = 3;
  ASSERT_TRUE(session->Run({{"x", big}}, {"sum:0", "mm:0"}, {}, &out).ok());
  // INT32_MAX + 3 and INT32_MAX^2 + 9, modulo 2^32.
  EXPECT_EQ(out[0].flat<int32_t>()(0), INT32_MIN + 2);
  EXPECT_EQ(out[1].flat<int32_t>()(0), 10);
}

TEST(GraphCannotKillTest, HugeShapesFromDataAreResourceExhausted) {
  Scope root = Scope::NewRootScope();
  auto dims = ops::Placeholder(root.WithOpName("dims"), DT_INT32);
  ops::Fill(root.WithOpName("fill"), dims, 1.0f);
  ops::RandomUniform(root.WithOpName("rand"), dims, DT_FLOAT);
  auto session = MakeSession(root);
  const Tensor huge = Tensor::Vec<int32_t>({2147483647, 512});
  std::vector<Tensor> out;
  for (const char* fetch : {"fill:0", "rand:0"}) {
    absl::Status s = session->Run({{"dims", huge}}, {fetch}, {}, &out);
    ASSERT_TRUE(absl::IsResourceExhausted(s)) << s;
    EXPECT_THAT(std::string(s.message()),
                HasSubstr(fetch[0] == 'f' ? "node 'fill' (op Fill)"
                                          : "node 'rand' (op RandomUniform)"));
    // 2147483647 * 512 floats.
    EXPECT_THAT(std::string(s.message()), HasSubstr("float [2147483647,512]"));
    EXPECT_THAT(std::string(s.message()),
                HasSubstr("needs 4398046509056 bytes"));
    EXPECT_THAT(std::string(s.message()),
                HasSubstr("the step's memory budget"));
  }
  // The session still runs steps.
  ASSERT_TRUE(
      session
          ->Run({{"dims", Tensor::Vec<int32_t>({2, 2})}}, {"fill:0"}, {}, &out)
          .ok());
  EXPECT_TRUE(out[0].Equals(Tensor::Filled<float>(TensorShape({2, 2}), 1.f)));
}

// Element counts that overflow int64 are InvalidArgument, not a wrap or a
// CHECK failure.
TEST(GraphCannotKillTest, OverflowingShapesAreInvalidArgument) {
  Scope root = Scope::NewRootScope();
  auto dims = ops::Placeholder(root.WithOpName("dims"), DT_INT32);
  auto s1 = ops::Placeholder(root.WithOpName("s1"), DT_INT32);
  ops::Fill(root.WithOpName("fill"), dims, 1.0f);
  ops::BroadcastGradientArgs(root.WithOpName("bga"), dims, s1);
  auto session = MakeSession(root);
  const Tensor overflow = Tensor::Vec<int32_t>(
      {INT_MAX, INT_MAX, INT_MAX, INT_MAX, INT_MAX, INT_MAX});
  std::vector<Tensor> out;
  absl::Status s = session->Run({{"dims", overflow}}, {"fill:0"}, {}, &out);
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("too many elements"));
  // A negative dimension in a broadcast shape CHECK-failed.
  s = session->Run({{"dims", Tensor::Vec<int32_t>({-5})},
                    {"s1", Tensor::Vec<int32_t>({-5})}},
                   {"bga:0"}, {}, &out);
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("node 'bga'"));
  s = session->Run({{"dims", overflow}, {"s1", overflow}}, {"bga:0"}, {}, &out);
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
}

// Four 1 MiB Fills held at once fit a 5 MiB step budget and not a 3.5 MiB
// one (each alone fits both).
TEST(GraphCannotKillTest, StepBudgetCountsEveryNodesLiveTensors) {
  Scope root = Scope::NewRootScope();
  auto dims = ops::Placeholder(root.WithOpName("dims"), DT_INT32);
  std::vector<Output> parts;
  for (int i = 0; i < 4; ++i) parts.push_back(ops::Fill(root, dims, 1.0f));
  ops::AddN(root.WithOpName("sum"), parts);
  const Tensor mib = Tensor::Vec<int32_t>({256, 1024});  // 1 MiB of floats.
  std::vector<Tensor> out;
  {
    MemoryLimits limits;
    limits.per_step_bytes = 5 * kMiB;
    auto session = MakeSession(root, limits);
    absl::Status s = session->Run({{"dims", mib}}, {"sum:0"}, {}, &out);
    ASSERT_TRUE(s.ok()) << s;
    EXPECT_EQ(out[0].data<float>()[0], 4.f);
  }
  MemoryLimits limits;
  limits.per_step_bytes = 7 * kMiB / 2;
  auto session = MakeSession(root, limits);
  absl::Status s = session->Run({{"dims", mib}}, {"sum:0"}, {}, &out);
  ASSERT_TRUE(absl::IsResourceExhausted(s)) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("(op Fill)"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("needs 1048576 bytes"));
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("memory budget of 3670016 bytes"));
  // Smaller steps still run.
  ASSERT_TRUE(
      session->Run({{"dims", Tensor::Vec<int32_t>({2})}}, {"sum:0"}, {}, &out)
          .ok());
}

// A variable's value counts against the server (device) budget for as long
// as the variable holds it: assigning past the budget fails, and resetting
// the variable gives the bytes back.
TEST(GraphCannotKillTest, VariablesCountAgainstTheServerBudget) {
  Scope root = Scope::NewRootScope();
  auto dims = ops::Placeholder(root.WithOpName("dims"), DT_INT32);
  auto v1 = ops::VarHandleOp(root.WithOpName("v1"), DT_FLOAT,
                             PartialTensorShape::UnknownRank());
  auto v2 = ops::VarHandleOp(root.WithOpName("v2"), DT_FLOAT,
                             PartialTensorShape::UnknownRank());
  ops::AssignVariableOp(root.WithOpName("assign1"), v1,
                        ops::Fill(root, dims, 1.0f));
  ops::AssignVariableOp(root.WithOpName("assign2"), v2,
                        ops::Fill(root, dims, 2.0f));
  MemoryLimits limits;
  limits.per_server_bytes = 6 * kMiB;
  auto session = MakeSession(root, limits);
  MemoryBudget* server = session->device()->memory_budget();
  const Tensor four_mib = Tensor::Vec<int32_t>({1024, 1024});
  ASSERT_TRUE(
      session->Run({{"dims", four_mib}}, {}, {"assign1"}, nullptr).ok());
  EXPECT_GE(server->used(), 4 * kMiB);  // Held by v1 after the step.
  absl::Status s = session->Run({{"dims", four_mib}}, {}, {"assign2"}, nullptr);
  ASSERT_TRUE(absl::IsResourceExhausted(s)) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("device /job:localhost"));
  ASSERT_TRUE(session->Reset().ok());
  EXPECT_LT(server->used(), kMiB);
  ASSERT_TRUE(
      session->Run({{"dims", four_mib}}, {}, {"assign2"}, nullptr).ok());
}

// A Const that broadcasts one value to 512 MiB is charged to the device.
TEST(GraphCannotKillTest, ConstValuesCountAgainstTheServerBudget) {
  GraphDef def;
  NodeDef* node = def.add_node();
  node->set_name("big");
  node->set_op("Const");
  (*node->mutable_attr())["dtype"].set_type(DT_FLOAT);
  TensorProto* value = (*node->mutable_attr())["value"].mutable_tensor();
  value->set_dtype(DT_FLOAT);
  value->mutable_tensor_shape()->add_dim()->set_size(128 * kMiB);
  value->add_float_val(1.0f);
  SessionOptions options;
  options.num_threads = 1;
  options.memory.per_server_bytes = 64 * kMiB;
  auto session = LocalSession::Create(def, options);
  ASSERT_TRUE(session.ok()) << session.status();
  std::vector<Tensor> out;
  absl::Status s = (*session)->Run({}, {"big:0"}, {}, &out);
  ASSERT_TRUE(absl::IsResourceExhausted(s)) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("node 'big' (op Const)"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("needs 536870912 bytes"));
}

}  // namespace
}  // namespace cohort
