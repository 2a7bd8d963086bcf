#include "cohort/graph/executor.h"

#include <atomic>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/notification.h"
#include "cohort/graph/builder.h"
#include "cohort/graph/cancellation.h"
#include "cohort/graph/device.h"
#include "cohort/graph/kernels/all_kernels.h"
#include "cohort/graph/kernels/array_ops.h"
#include "cohort/graph/kernels/math_ops.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort {
namespace {

using ::testing::HasSubstr;

std::atomic<int> g_count{0};

// Two of these in one group must run at the same time, or both fail.
class WaitForPeerOp : public OpKernel {
 public:
  explicit WaitForPeerOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    set_expensive(true);
  }
  void Compute(OpKernelContext* ctx) override {
    static absl::Mutex mu;
    static auto* arrived = new absl::flat_hash_map<int64_t, int>();
    absl::MutexLock lock(&mu);
    int& n = (*arrived)[ctx->step_id()];
    ++n;
    auto both = [&n]() { return n >= 2; };
    if (!mu.AwaitWithTimeout(absl::Condition(&both), absl::Seconds(10))) {
      ctx->SetStatus(
          absl::DeadlineExceededError("peer branch never ran concurrently"));
      return;
    }
    ctx->set_output(0, ctx->input(0));
  }
};

class FailOp : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    ctx->SetStatus(absl::InvalidArgumentError("boom"));
  }
};

class CountOp : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    ctx->set_output(0, Tensor(int64_t{++g_count}));
  }
};

class WrongTypeOp : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override { ctx->set_output(0, Tensor(3)); }
};

// When set, notified by BlockOp once it waits on its step's cancellation:
// a test then cancels a step that is certainly running.
std::atomic<absl::Notification*> g_block_parked{nullptr};

// Completes only when the step is cancelled.
class BlockOp : public AsyncOpKernel {
 public:
  using AsyncOpKernel::AsyncOpKernel;
  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    CancellationManager* cm = ctx->cancellation_manager();
    auto token = cm->GetCancellationToken();
    auto finish = [ctx, done]() {
      ctx->SetStatus(absl::CancelledError("block cancelled"));
      done();
    };
    if (!cm->RegisterCallback(token, finish)) {
      finish();
      return;
    }
    if (absl::Notification* parked = g_block_parked.load()) parked->Notify();
  }
};

struct Registries {
  OpRegistry ops;
  KernelRegistry kernels;
  Registries() {
    EXPECT_TRUE(RegisterArrayOps(&ops).ok());
    EXPECT_TRUE(RegisterMathOps(&ops).ok());
    EXPECT_TRUE(RegisterArrayKernels(&kernels).ok());
    EXPECT_TRUE(RegisterMathKernels(&kernels).ok());
    EXPECT_TRUE(ops.Register(OpDefBuilder("WaitForPeer")
                                 .Input("x: float")
                                 .Output("y: float")
                                 .SetShapeFn(shape_fns::Unchanged))
                    .ok());
    EXPECT_TRUE(
        ops.Register(OpDefBuilder("Fail").Input("x: float").Output("y: float"))
            .ok());
    EXPECT_TRUE(
        ops.Register(OpDefBuilder("Count").Output("n: int64").SetIsStateful())
            .ok());
    EXPECT_TRUE(
        ops.Register(OpDefBuilder("WrongType").Output("y: float")).ok());
    EXPECT_TRUE(ops.Register(OpDefBuilder("Block").Output("y: float")).ok());
    EXPECT_TRUE(
        kernels.Register<WaitForPeerOp>(KernelDefBuilder("WaitForPeer")).ok());
    EXPECT_TRUE(kernels.Register<FailOp>(KernelDefBuilder("Fail")).ok());
    EXPECT_TRUE(kernels.Register<CountOp>(KernelDefBuilder("Count")).ok());
    EXPECT_TRUE(
        kernels.Register<WrongTypeOp>(KernelDefBuilder("WrongType")).ok());
    EXPECT_TRUE(kernels.Register<BlockOp>(KernelDefBuilder("Block")).ok());
  }
};

Registries& R() {
  static Registries* r = new Registries();
  return *r;
}

Device* TheDevice() {
  static Device* d =
      new Device("/job:localhost/replica:0/task:0/device:CPU:0", 4);
  return d;
}

class ExecutorTest : public ::testing::Test {
 protected:
  ExecutorTest() : root_(Scope::NewRootScope(&R().ops)) {}

  absl::StatusOr<std::unique_ptr<Executor>> Make(
      const std::vector<std::string>& feeds,
      const std::vector<std::string>& fetches,
      const std::vector<std::string>& targets = {}) {
    if (!root_.ok()) return root_.status();
    GraphDef def;
    EXPECT_TRUE(root_.ToGraphDef(&def).ok());
    auto g = Graph::FromGraphDef(def, &R().ops);
    if (!g.ok()) return g.status();
    graph_ = *std::move(g);
    Executor::Options o;
    o.device = TheDevice();
    o.kernels = &R().kernels;
    return Executor::Create(*graph_, feeds, fetches, targets, o);
  }
  Operation Op(const std::string& op, std::vector<NodeInput> in,
               const std::string& name) {
    return BuildOp(root_.WithOpName(name), op, in);
  }

  Scope root_;
  std::unique_ptr<Graph> graph_;
};

TEST_F(ExecutorTest, RunsFeedsAndFetches) {
  auto x = ops::Placeholder(root_.WithOpName("x"), DT_FLOAT, {2});
  auto y = ops::Add(root_.WithOpName("y"), x, 1.0f);
  ops::Add(root_.WithOpName("z"), y, y);
  auto ex = Make({"x"}, {"z:0", "y", "x:0"});
  ASSERT_TRUE(ex.ok()) << ex.status();
  std::vector<Tensor> feeds = {Tensor::Vec<float>({1, 2})};
  std::vector<Tensor> out;
  Executor::RunArgs args;
  args.feeds = feeds;
  ASSERT_TRUE((*ex)->Run(args, &out).ok());
  ASSERT_EQ(out.size(), 3u);
  EXPECT_TRUE(out[0].Equals(Tensor::Vec<float>({4, 6})));
  EXPECT_TRUE(out[1].Equals(Tensor::Vec<float>({2, 3})));
  EXPECT_TRUE(out[2].SharesBufferWith(feeds[0]));  // Fetching a feed.
}

TEST_F(ExecutorTest, PrunesToWhatFetchesAndTargetsNeed) {
  Op("Count", {}, "used");
  Op("Count", {}, "unused");
  auto ex = Make({}, {"used:0"});
  ASSERT_TRUE(ex.ok()) << ex.status();
  EXPECT_EQ((*ex)->num_nodes(), 1);
}

TEST_F(ExecutorTest, ControlDependenciesRunFirst) {
  auto count = Op("Count", {}, "count");
  ops::NoOp(root_.WithControlDependencies({count}).WithOpName("after"));
  auto ex = Make({}, {}, {"after"});
  ASSERT_TRUE(ex.ok()) << ex.status();
  int before = g_count.load();
  std::vector<Tensor> out;
  ASSERT_TRUE((*ex)->Run({}, &out).ok());
  EXPECT_EQ(g_count.load(), before + 1);
}

TEST_F(ExecutorTest, IndependentExpensiveBranchesRunInParallel) {
  auto x = ops::Const(root_, 1.0f);
  auto a = Op("WaitForPeer", {x}, "a");
  auto b = Op("WaitForPeer", {x}, "b");
  ops::Add(root_.WithOpName("sum"), a.output(0), b.output(0));
  auto ex = Make({}, {"sum"});
  ASSERT_TRUE(ex.ok()) << ex.status();
  std::vector<Tensor> out;
  Executor::RunArgs args;
  args.step_id = 77;
  absl::Status s = (*ex)->Run(args, &out);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(out[0].scalar<float>(), 2.f);
}

TEST_F(ExecutorTest, FirstErrorStopsTheStepAndNamesTheNode) {
  auto x = ops::Const(root_, 1.0f);
  auto f = Op("Fail", {x}, "layer/f");
  ops::Add(root_.WithOpName("after"), f.output(0), x);
  auto ex = Make({}, {"after"});
  ASSERT_TRUE(ex.ok());
  std::vector<Tensor> out;
  absl::Status s = (*ex)->Run({}, &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "node 'layer/f' (op Fail): boom");
  // The executor keeps working for other steps (same error again).
  EXPECT_EQ((*ex)->Run({}, &out).code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(ExecutorTest, WrongOutputDtypeIsInvalidArgument) {
  Op("WrongType", {}, "w");
  auto ex = Make({}, {"w"});
  ASSERT_TRUE(ex.ok());
  std::vector<Tensor> out;
  absl::Status s = (*ex)->Run({}, &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("node 'w' (op WrongType): output 0 has dtype int32"));
}

TEST_F(ExecutorTest, DeadlineCancelsABlockedStep) {
  Op("Block", {}, "block");
  auto ex = Make({}, {"block"});
  ASSERT_TRUE(ex.ok());
  std::vector<Tensor> out;
  Executor::RunArgs args;
  args.deadline = absl::Now() + absl::Milliseconds(50);
  absl::Status s = (*ex)->Run(args, &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(std::string(s.message()), HasSubstr("deadline"));
}

TEST_F(ExecutorTest, OutsideCancellation) {
  Op("Block", {}, "block");
  auto ex = Make({}, {"block"});
  ASSERT_TRUE(ex.ok());
  CancellationManager cm;
  absl::Notification parked;
  g_block_parked = &parked;
  // Cancels only once the step is parked in BlockOp: a cancellation that
  // came first would be refused at the start instead.
  std::thread canceller([&] {
    if (!parked.WaitForNotificationWithTimeout(absl::Seconds(10))) {
      ADD_FAILURE() << "the step never reached Block";
    }
    cm.StartCancel();  // even so: the Run below must end
  });
  std::vector<Tensor> out;
  Executor::RunArgs args;
  args.cancellation = &cm;
  EXPECT_EQ((*ex)->Run(args, &out).code(), absl::StatusCode::kCancelled);
  canceller.join();
  g_block_parked = nullptr;
}

TEST_F(ExecutorTest, FeedErrors) {
  auto x = ops::Placeholder(root_.WithOpName("x"), DT_FLOAT, {-1, 2});
  auto y = ops::Add(root_.WithOpName("y"), x, 1.0f);
  (void)y;
  auto ex = Make({"x"}, {"y"});
  ASSERT_TRUE(ex.ok());
  std::vector<Tensor> out;
  Executor::RunArgs args;
  std::vector<Tensor> bad_type = {Tensor(DT_INT32, TensorShape({1, 2}))};
  args.feeds = bad_type;
  absl::Status s = (*ex)->Run(args, &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("placeholder 'x' is int32"));
  std::vector<Tensor> bad_shape = {Tensor(DT_FLOAT, TensorShape({2, 3}))};
  args.feeds = bad_shape;
  s = (*ex)->Run(args, &out);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("has shape [2,3], which is incompatible with its "
                        "declared shape [?,2]"));
  args.feeds = {};
  EXPECT_EQ((*ex)->Run(args, &out).code(), absl::StatusCode::kInvalidArgument);

  auto missing = Make({}, {"y"});
  EXPECT_THAT(std::string(missing.status().message()),
              HasSubstr("you must feed a value for placeholder 'x'"));
  auto not_placeholder = Make({"y"}, {"y"});
  EXPECT_THAT(std::string(not_placeholder.status().message()),
              HasSubstr("not a Placeholder"));
  EXPECT_THAT(std::string(Make({"x"}, {"nope:0"}).status().message()),
              HasSubstr("fetch 'nope:0' refers to unknown node"));
  EXPECT_THAT(std::string(Make({"x"}, {"y:3"}).status().message()),
              HasSubstr("has 1 outputs"));
  EXPECT_THAT(std::string(Make({"x"}, {}, {"zz"}).status().message()),
              HasSubstr("target 'zz'"));
}

TEST_F(ExecutorTest, ConcurrentSteps) {
  auto x = ops::Placeholder(root_.WithOpName("x"), DT_INT64, {});
  auto y = ops::Add(root_, x, x);
  ops::Add(root_.WithOpName("z"), y, int64_t{1});
  auto ex = Make({"x"}, {"z"});
  ASSERT_TRUE(ex.ok());
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) {
        int64_t v = t * 1000 + i;
        std::vector<Tensor> feeds = {Tensor(v)};
        std::vector<Tensor> out;
        Executor::RunArgs args;
        args.feeds = feeds;
        args.step_id = v;
        if (!(*ex)->Run(args, &out).ok() ||
            out[0].scalar<int64_t>() != 2 * v + 1)
          ++wrong;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
}

TEST_F(ExecutorTest, MissingKernelNamesTheNode) {
  ASSERT_TRUE(true);
  OpRegistry ops;
  ASSERT_TRUE(ops.Register(OpDefBuilder("NoKernel").Output("y: float")).ok());
  GraphDef def;
  NodeDef* n = def.add_node();
  n->set_name("nk");
  n->set_op("NoKernel");
  auto g = Graph::FromGraphDef(def, &ops);
  ASSERT_TRUE(g.ok());
  Executor::Options o;
  o.device = TheDevice();
  o.kernels = &R().kernels;
  auto ex = Executor::Create(**g, {}, {"nk"}, {}, o);
  EXPECT_EQ(ex.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(ex.status().message()),
              HasSubstr("no CPU kernel for node 'nk' (op NoKernel)"));
}

}  // namespace
}  // namespace cohort
