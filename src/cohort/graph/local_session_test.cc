#include "cohort/graph/local_session.h"

#include <cmath>
#include <thread>

#include "absl/synchronization/notification.h"
#include "cohort/graph/builder.h"
#include "cohort/graph/cancellation.h"
#include "cohort/graph/kernels/all_kernels.h"
#include "cohort/graph/kernels/array_ops.h"
#include "cohort/graph/kernels/elementwise_ops.h"
#include "cohort/graph/kernels/math_ops.h"
#include "cohort/graph/kernels/nn_ops.h"
#include "cohort/graph/kernels/reduction_ops.h"
#include "cohort/graph/kernels/sendrecv_ops.h"
#include "cohort/graph/kernels/state_ops.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort {
namespace {

using ::testing::HasSubstr;

std::unique_ptr<LocalSession> MakeSession(const Scope& root,
                                          SessionOptions options = {}) {
  GraphDef def;
  EXPECT_TRUE(root.ToGraphDef(&def).ok()) << root.status();
  if (options.num_threads == 0) options.num_threads = 2;
  auto s = LocalSession::Create(def, options);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *std::move(s) : nullptr;
}

TEST(LocalSessionTest, RunWithFeedsFetchesTargets) {
  Scope root = Scope::NewRootScope();
  auto x = ops::Placeholder(root.WithOpName("x"), DT_FLOAT, {2});
  ops::Add(root.WithOpName("y"), x, {10.f, 20.f});
  auto session = MakeSession(root);
  std::vector<Tensor> out;
  ASSERT_TRUE(
      session->Run({{"x", Tensor::Vec<float>({1, 2})}}, {"y:0"}, {}, &out)
          .ok());
  EXPECT_TRUE(out[0].Equals(Tensor::Vec<float>({11, 22})));
  // Same signature again (cached executor), different values.
  ASSERT_TRUE(
      session->Run({{"x", Tensor::Vec<float>({0, 0})}}, {"y:0"}, {}, &out)
          .ok());
  EXPECT_TRUE(out[0].Equals(Tensor::Vec<float>({10, 20})));
}

#if defined(__x86_64__)
// Kernels run with denormals flushed (denormal.h), as TensorFlow's do: a
// denormal input reads as zero, and the caller's own mode is left alone.
TEST(LocalSessionTest, KernelsFlushDenormalsAndTheCallerKeepsItsMode) {
  Scope root = Scope::NewRootScope();
  auto x = ops::Placeholder(root.WithOpName("x"), DT_FLOAT, {1});
  ops::Mul(root.WithOpName("y"), x, {1.f});
  auto session = MakeSession(root);
  const float denormal = 1e-40f;
  ASSERT_TRUE(std::fpclassify(denormal) == FP_SUBNORMAL);
  std::vector<Tensor> out;
  ASSERT_TRUE(
      session->Run({{"x", Tensor::Vec<float>({denormal})}}, {"y:0"}, {}, &out)
          .ok());
  EXPECT_EQ(out[0].data<float>()[0], 0.0f);
  volatile float here = denormal;
  EXPECT_EQ(here * 1.0f, denormal);
}
#endif

// Kernels may write over an input that nothing else holds
// (forward_input_or_allocate_output), and a reduction over no axis returns
// its input's buffer: neither may change what a feed, another fetch, a
// variable or another consumer sees. Large enough (1 MiB) for the pool, run
// repeatedly so that consumers land on both threads.
TEST(LocalSessionTest, KernelsWriteOverOnlyInputsNothingElseHolds) {
  const int64_t n = 1 << 18;
  Tensor fed(DT_FLOAT, TensorShape({n}));
  for (int64_t i = 0; i < n; ++i) fed.data<float>()[i] = i % 2 ? -1.f : 2.f;
  const Tensor fed_copy = fed.DeepCopy();
  Tensor negated(DT_FLOAT, TensorShape({n})), relu(DT_FLOAT, TensorShape({n}));
  Tensor relu_of_negated(DT_FLOAT, TensorShape({n}));
  for (int64_t i = 0; i < n; ++i) {
    const float x = fed.data<float>()[i];
    negated.data<float>()[i] = -x;
    relu.data<float>()[i] = x > 0 ? x : 0.f;
    relu_of_negated.data<float>()[i] = -x > 0 ? -x : 0.f;
  }

  Scope root = Scope::NewRootScope();
  auto x = ops::Placeholder(root.WithOpName("x"), DT_FLOAT, {n});
  ops::Relu(root.WithOpName("relu_of_feed"), x);
  // `neg` is fetched and has two consumers; `kept` only feeds the Sum.
  auto neg = ops::Neg(root.WithOpName("neg"), x);
  ops::Relu(root.WithOpName("relu_of_neg"), neg);
  auto same = ops::Sum(root.WithOpName("same"), neg,
                       Tensor(DT_INT32, TensorShape({0})));
  ops::Relu(root.WithOpName("relu_of_same"), same);
  auto v = ops::MakeVariable(root, "v", fed);
  ops::Relu(root.WithOpName("relu_of_v"), v.value);
  auto init = ops::GlobalVariablesInitializer(root);
  auto session = MakeSession(root);
  ASSERT_NE(session, nullptr);
  std::vector<Tensor> out;
  ASSERT_TRUE(session->Run({}, {}, {init.name()}, nullptr).ok());
  for (int run = 0; run < 20; ++run) {
    SCOPED_TRACE(run);
    ASSERT_TRUE(session
                    ->Run({{"x", fed}},
                          {"relu_of_feed:0", "neg:0", "relu_of_neg:0",
                           "relu_of_same:0", "relu_of_v:0", v.value.name()},
                          {}, &out)
                    .ok());
    EXPECT_TRUE(fed.Equals(fed_copy));  // The feed.
    EXPECT_TRUE(out[0].Equals(relu));
    EXPECT_TRUE(out[1].Equals(negated));  // A fetch another kernel reads.
    EXPECT_TRUE(out[2].Equals(relu_of_negated));
    EXPECT_TRUE(out[3].Equals(relu_of_negated));
    EXPECT_TRUE(out[4].Equals(relu));
    EXPECT_TRUE(out[5].Equals(fed_copy));  // The variable.
  }
}

TEST(LocalSessionTest, VariablesPersistAndResetClearsThem) {
  Scope root = Scope::NewRootScope();
  auto w = ops::MakeVariable(root, "w", Tensor::Vec<float>({1, 2}));
  auto init = ops::GlobalVariablesInitializer(root);
  ops::AssignAddVariableOp(root.WithOpName("bump"), w.handle, {1.f, 1.f});
  auto session = MakeSession(root);
  std::vector<Tensor> out;
  absl::Status s = session->Run({}, {w.value.name()}, {}, &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.message()), HasSubstr("'w'"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("uninitialized"));
  ASSERT_TRUE(session->Run({}, {}, {init.name()}, nullptr).ok());
  ASSERT_TRUE(session->Run({}, {}, {"bump"}, nullptr).ok());
  ASSERT_TRUE(session->Run({}, {}, {"bump"}, nullptr).ok());
  ASSERT_TRUE(session->Run({}, {w.value.name()}, {}, &out).ok());
  EXPECT_TRUE(out[0].Equals(Tensor::Vec<float>({3, 4})));
  ASSERT_TRUE(session->Reset().ok());
  EXPECT_EQ(session->Run({}, {w.value.name()}, {}, &out).code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(session->Run({}, {}, {init.name()}, nullptr).ok());
  ASSERT_TRUE(session->Run({}, {w.value.name()}, {}, &out).ok());
  EXPECT_TRUE(out[0].Equals(Tensor::Vec<float>({1, 2})));
}

TEST(LocalSessionTest, ErrorsLeaveTheSessionUsable) {
  Scope root = Scope::NewRootScope();
  auto x = ops::Placeholder(root.WithOpName("x"), DT_FLOAT);
  ops::Add(root.WithOpName("y"), x, 1.0f);
  ops::Add(root.WithOpName("broken"),
           ops::Const(root, Tensor::Vec<float>({1, 2})), x);
  auto session = MakeSession(root);
  std::vector<Tensor> out;
  EXPECT_THAT(std::string(session->Run({}, {"y"}, {}, &out).message()),
              HasSubstr("you must feed a value for placeholder 'x'"));
  EXPECT_THAT(
      std::string(
          session->Run({{"y", Tensor(1.f)}}, {"y"}, {}, &out).message()),
      HasSubstr("not a Placeholder"));
  absl::Status s = session->Run({{"x", Tensor::Vec<float>({1, 2, 3})}},
                                {"broken"}, {}, &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("node 'broken' (op Add)"));
  EXPECT_THAT(std::string(session->Run({}, {"nope"}, {}, &out).message()),
              HasSubstr("unknown node 'nope'"));
  ASSERT_TRUE(session->Run({{"x", Tensor(1.f)}}, {"y"}, {}, &out).ok());
  EXPECT_EQ(out[0].scalar<float>(), 2.f);
}

TEST(LocalSessionTest, CallablesAndRelease) {
  Scope root = Scope::NewRootScope();
  auto x = ops::Placeholder(root.WithOpName("x"), DT_INT32);
  ops::Add(root.WithOpName("y"), x, 5);
  auto session = MakeSession(root);
  CallableOptions co;
  co.feeds = {"x"};
  co.fetches = {"y:0"};
  auto h = session->MakeCallable(co);
  ASSERT_TRUE(h.ok()) << h.status();
  std::vector<Tensor> out;
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(session->RunCallable(*h, {Tensor(i)}, &out).ok());
    EXPECT_EQ(out[0].scalar<int32_t>(), i + 5);
  }
  ASSERT_TRUE(session->ReleaseCallable(*h).ok());
  EXPECT_EQ(session->RunCallable(*h, {Tensor(1)}, &out).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(session->ReleaseCallable(*h).code(),
            absl::StatusCode::kInvalidArgument);
  co.feeds = {"y"};
  EXPECT_EQ(session->MakeCallable(co).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(LocalSessionTest, ExtendAddsNodes) {
  Scope root = Scope::NewRootScope();
  auto a = ops::Const(root.WithOpName("a"), 2.0f);
  auto session = MakeSession(root);
  int mark = root.num_nodes();
  ops::Add(root.WithOpName("b"), a, a);
  GraphDef more;
  ASSERT_TRUE(root.ToGraphDef(&more, mark).ok());
  ASSERT_TRUE(session->Extend(more).ok());
  std::vector<Tensor> out;
  ASSERT_TRUE(session->Run({}, {"b"}, {}, &out).ok());
  EXPECT_EQ(out[0].scalar<float>(), 4.f);
  EXPECT_EQ(session->Extend(more).code(),
            absl::StatusCode::kInvalidArgument);  // dup
}

TEST(LocalSessionTest, TimeoutGivesDeadlineExceededAndSessionSurvives) {
  Scope root = Scope::NewRootScope();
  ops::Recv(root.WithOpName("r"), DT_FLOAT, "never_sent",
            "/job:a/replica:0/task:0/device:CPU:0",
            "/job:localhost/replica:0/task:0/device:CPU:0");
  ops::Const(root.WithOpName("c"), 1.0f);
  auto session = MakeSession(root);
  RunOptions ro;
  ro.timeout = absl::Milliseconds(50);
  std::vector<Tensor> out;
  absl::Status s = session->Run(ro, {}, {"r"}, {}, &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("timed out after 50ms"));
  ASSERT_TRUE(session->Run({}, {"c"}, {}, &out).ok());
}

TEST(LocalSessionTest, CloseRefusesFurtherCalls) {
  Scope root = Scope::NewRootScope();
  ops::Const(root.WithOpName("c"), 1.0f);
  auto session = MakeSession(root);
  ASSERT_TRUE(session->Close().ok());
  std::vector<Tensor> out;
  EXPECT_EQ(session->Run({}, {"c"}, {}, &out).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(session->Close().ok());
}

// Notified by BlockUntilCancelledOp once it waits on its step's
// cancellation; set by the test that runs it.
absl::Notification* g_blocked = nullptr;

// Completes only when its step is cancelled. It tells the test when it is
// parked (its cancellation callback registered), so that the test acts on
// a step that is certainly running.
class BlockUntilCancelledOp : public AsyncOpKernel {
 public:
  using AsyncOpKernel::AsyncOpKernel;
  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    CancellationManager* cm = ctx->cancellation_manager();
    auto finish = [ctx, done] {
      ctx->SetStatus(absl::CancelledError("BlockUntilCancelled cancelled"));
      done();
    };
    if (!cm->RegisterCallback(cm->GetCancellationToken(), finish)) {
      finish();
      return;
    }
    g_blocked->Notify();
  }
};

// Every standard op and kernel, and BlockUntilCancelled.
struct BlockingRegistries {
  OpRegistry ops;
  KernelRegistry kernels;
  BlockingRegistries() {
    EXPECT_TRUE(RegisterAllOps(&ops).ok());
    EXPECT_TRUE(RegisterAllKernels(&kernels).ok());
    EXPECT_TRUE(
        ops.Register(OpDefBuilder("BlockUntilCancelled").Output("y: float"))
            .ok());
    EXPECT_TRUE(kernels
                    .Register<BlockUntilCancelledOp>(
                        KernelDefBuilder("BlockUntilCancelled"))
                    .ok());
  }
};

// Close while the step is parked in a kernel (not before it starts, which
// is the FailedPrecondition of CloseRefusesFurtherCalls): the step is
// cancelled, and says that the session was closed.
TEST(LocalSessionTest, CloseCancelsARunningStep) {
  static BlockingRegistries* registries = new BlockingRegistries();
  Scope root = Scope::NewRootScope(&registries->ops);
  BuildOp(root.WithOpName("block"), "BlockUntilCancelled", {});
  SessionOptions options;
  options.op_registry = &registries->ops;
  options.kernels = &registries->kernels;
  auto session = MakeSession(root, options);
  ASSERT_NE(session, nullptr);
  absl::Notification blocked;
  g_blocked = &blocked;
  absl::Status s;
  std::thread runner([&] {
    std::vector<Tensor> out;
    RunOptions ro;
    ro.timeout = absl::Seconds(30);
    s = session->Run(ro, {}, {"block:0"}, {}, &out);
  });
  // (EXPECT, not ASSERT: the runner must be joined whatever happens.)
  EXPECT_TRUE(blocked.WaitForNotificationWithTimeout(absl::Seconds(10)))
      << "the step never reached BlockUntilCancelled";
  EXPECT_TRUE(session->Close().ok());
  runner.join();
  g_blocked = nullptr;
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled) << s;
  EXPECT_THAT(s.message(), HasSubstr("the session was closed")) << s;
}

TEST(LocalSessionTest, GlobalStepIncrements) {
  Scope root = Scope::NewRootScope();
  auto step = ops::GetOrCreateGlobalStep(root);
  auto again = ops::GetOrCreateGlobalStep(root.NewSubScope("train"));
  EXPECT_EQ(step.handle, again.handle);
  auto inc = ops::IncrementGlobalStep(root.WithOpName("inc"), step);
  (void)inc;
  auto init = ops::GlobalVariablesInitializer(root);
  auto session = MakeSession(root);
  ASSERT_TRUE(session->Run({}, {}, {init.name()}, nullptr).ok());
  for (int i = 0; i < 3; ++i)
    ASSERT_TRUE(session->Run({}, {}, {"inc"}, nullptr).ok());
  std::vector<Tensor> out;
  ASSERT_TRUE(session->Run({}, {"global_step/read"}, {}, &out).ok());
  EXPECT_EQ(out[0].scalar<int64_t>(), 3);
}

TEST(LocalSessionTest, SendRecvInOneStep) {
  Scope root = Scope::NewRootScope();
  const std::string dev = "/job:localhost/replica:0/task:0/device:CPU:0";
  auto x = ops::Placeholder(root.WithOpName("x"), DT_FLOAT);
  // Recv comes first in the graph: it waits until Send runs.
  auto r = ops::Recv(root.WithOpName("recv"), DT_FLOAT, "x:0", dev, dev, 7);
  ops::Add(root.WithOpName("out"), r, 1.0f);
  ops::Send(root.WithOpName("send"), x, "x:0", dev, dev, 7);
  auto session = MakeSession(root);
  std::vector<Tensor> out;
  ASSERT_TRUE(session->Run({{"x", Tensor(4.f)}}, {"out"}, {"send"}, &out).ok());
  EXPECT_EQ(out[0].scalar<float>(), 5.f);
}

// Under ThreadSanitizer (Eigen's kernels compiled at -O0 and instrumented,
// about 0.3 s a run) 200 runs took 65 s of the sanitizer job; 10 still send
// the two nodes through the pool together, and TSan checks each of them.
#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define COHORT_LOCAL_SESSION_TEST_TSAN 1
#endif
#endif
#ifdef COHORT_LOCAL_SESSION_TEST_TSAN
constexpr int kHeavyRuns = 10;
#else
constexpr int kHeavyRuns = 200;
#endif

// Two independent MatMuls big enough to split over the intra-op pool, run
// at once on a 2-thread device: with one pool for nodes and kernel pieces,
// both node threads could wait on pieces queued behind them (a hang that
// ctest's timeout turns into a failure).
TEST(LocalSessionTest, ConcurrentHeavyKernelsDoNotStarveEachOther) {
  Scope root = Scope::NewRootScope();
  auto x = ops::Placeholder(root.WithOpName("x"), DT_FLOAT, {256, 256});
  ops::MatMul(root.WithOpName("a"), x, x);
  ops::MatMul(root.WithOpName("b"), x, x, /*transpose_a=*/true);
  SessionOptions options;
  options.num_threads = 2;
  auto session = MakeSession(root, options);
  const Tensor ones = Tensor::Filled<float>(TensorShape({256, 256}), 1.f);
  std::vector<Tensor> out;
  for (int i = 0; i < kHeavyRuns; ++i) {
    ASSERT_TRUE(session->Run({{"x", ones}}, {"a:0", "b:0"}, {}, &out).ok());
  }
  EXPECT_EQ(out[0].data<float>()[0], 256.f);
  EXPECT_EQ(out[1].data<float>()[256 * 256 - 1], 256.f);
}

}  // namespace
}  // namespace cohort
