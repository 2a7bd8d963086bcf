#include "cohort/graph/kernels/sendrecv_ops.h"

#include <thread>

#include "cohort/graph/executor.h"
#include "cohort/graph/kernel_test_util.h"
#include "cohort/graph/kernels/array_ops.h"
#include "cohort/graph/rendezvous.h"
#include "cohort/graph/standard_registries.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort {
namespace {

using ::testing::HasSubstr;

const char kA[] = "/job:worker/replica:0/task:0/device:CPU:0";
const char kB[] = "/job:ps/replica:0/task:0/device:CPU:0";

// Two executors (as two tasks would have) share one rendezvous.
TEST(SendRecvTest, TwoExecutorsShareARendezvous) {
  Scope sender = Scope::NewRootScope();
  auto x = ops::Placeholder(sender.WithOpName("x"), DT_FLOAT);
  ops::Send(sender.WithOpName("send"), x, "x:0", kA, kB, 3);
  Scope receiver = Scope::NewRootScope();
  ops::Recv(receiver.WithOpName("recv"), DT_FLOAT, "x:0", kA, kB, 3);
  GraphDef gs, gr;
  ASSERT_TRUE(sender.ToGraphDef(&gs).ok());
  ASSERT_TRUE(receiver.ToGraphDef(&gr).ok());
  auto graph_s = *Graph::FromGraphDef(gs, StandardOpRegistry());
  auto graph_r = *Graph::FromGraphDef(gr, StandardOpRegistry());
  Executor::Options o;
  o.device = TestDevice();
  auto ex_s = Executor::Create(*graph_s, {"x"}, {}, {"send"}, o);
  auto ex_r = Executor::Create(*graph_r, {}, {"recv"}, {}, o);
  ASSERT_TRUE(ex_s.ok() && ex_r.ok());
  LocalRendezvous rendezvous;
  std::vector<Tensor> out;
  absl::Status recv_status;
  std::thread recv_thread([&] {
    Executor::RunArgs args;
    args.rendezvous = &rendezvous;
    args.deadline = absl::Now() + absl::Seconds(10);
    recv_status = (*ex_r)->Run(args, &out);
  });
  std::vector<Tensor> feeds = {Tensor(9.f)};
  Executor::RunArgs args;
  args.rendezvous = &rendezvous;
  args.feeds = feeds;
  std::vector<Tensor> none;
  ASSERT_TRUE((*ex_s)->Run(args, &none).ok());
  recv_thread.join();
  ASSERT_TRUE(recv_status.ok()) << recv_status;
  EXPECT_EQ(out[0].scalar<float>(), 9.f);
}

TEST(SendRecvTest, RecvOfWrongTypeFails) {
  Scope root = Scope::NewRootScope();
  ops::Recv(root.WithOpName("recv"), DT_INT32, "t", kA, kB);
  GraphDef g;
  ASSERT_TRUE(root.ToGraphDef(&g).ok());
  auto graph = *Graph::FromGraphDef(g, StandardOpRegistry());
  Executor::Options o;
  o.device = TestDevice();
  auto ex = Executor::Create(*graph, {}, {"recv"}, {}, o);
  ASSERT_TRUE(ex.ok());
  LocalRendezvous rendezvous;
  ASSERT_TRUE(
      rendezvous
          .Send(*Rendezvous::ParseKey(Rendezvous::CreateKey(kA, 0, kB, "t")),
                Tensor(1.f))
          .ok());
  Executor::RunArgs args;
  args.rendezvous = &rendezvous;
  std::vector<Tensor> out;
  absl::Status s = (*ex)->Run(args, &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("node 'recv' (op Recv): received tensor 't' is float"));
}

TEST(SendRecvTest, SendWithoutRendezvousIsFailedPrecondition) {
  auto out = RunKernel(
      "Send", {Tensor(1.f)},
      {{"tensor_name", "t"}, {"send_device", kA}, {"recv_device", kB}});
  EXPECT_EQ(out.status().code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace cohort
