// Worker: RunGraph, RecvTensor, CleanupGraph, Stop (worker.h).
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "cohort/graph/rendezvous.h"
#include "cohort/runtime/worker.h"
#include "cohort/runtime/worker_errors.h"
#include "cohort/runtime/worker_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort::runtime {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;
using namespace testing;  // NOLINT: the test helpers

class WorkerStepsTest : public WorkerFixture {
 protected:
  void SetUp() override { ASSERT_TRUE(CreateSession("s").ok()); }

  // y = x + 2; fetches y then c.
  std::string AddGraph() {
    GraphDef g;
    AddPlaceholder(&g, "x", DT_FLOAT, kDev);
    AddConst(&g, "c", Tensor(2.0f), kDev);
    AddAdd(&g, "y", "x", "c", kDev);
    auto h = Register("s", g, {"x"}, {"y:0", "c:0"});
    EXPECT_TRUE(h.ok()) << h.status();
    return h.value_or("");
  }
  // Sends Const 4.5 (tensor "t") to the ps task.
  std::string SendGraph() {
    GraphDef g;
    AddConst(&g, "c", Tensor(4.5f), kDev);
    AddSend(&g, "send", "c", "t", kDev, Dev(Task("ps", 0)), kIncarnation);
    auto h = Register("s", g, {}, {});
    EXPECT_TRUE(h.ok()) << h.status();
    return h.value_or("");
  }
  RecvTensorRequest RecvRequest(int64_t step, uint64_t incarnation = 0,
                                int64_t request_id = 0) {
    RecvTensorRequest r;
    r.set_step_id(step);
    r.set_rendezvous_key(Rendezvous::CreateKey(
        kDev, incarnation == 0 ? kIncarnation : incarnation, Dev(Task("ps", 0)),
        "t"));
    r.set_request_id(request_id);
    return r;
  }
  std::string Blocked() {
    auto h = Register("s", BlockedGraph(), {}, {"r:0"});
    EXPECT_TRUE(h.ok()) << h.status();
    return h.value_or("");
  }
};

TEST_F(WorkerStepsTest, RunGraphFeedsAndFetchesInRegistrationOrder) {
  const std::string g = AddGraph();
  RunGraphResponse resp;
  ASSERT_TRUE(DoRunGraph(worker_.get(),
                         RunRequest("s", g, 1, {{"x", Tensor(1.5f)}}), &resp)
                  .ok());
  ASSERT_EQ(resp.recv_size(), 2);
  EXPECT_EQ(resp.recv(0).name(), "y:0");
  EXPECT_EQ(Tensor::FromProto(resp.recv(0).tensor())->scalar<float>(), 3.5f);
  EXPECT_EQ(resp.recv(1).name(), "c:0");
  EXPECT_EQ(Tensor::FromProto(resp.recv(1).tensor())->scalar<float>(), 2.0f);
  // Unnamed feeds are taken in order.
  ASSERT_TRUE(DoRunGraph(worker_.get(),
                         RunRequest("s", g, 2, {{"", Tensor(0.5f)}}), &resp)
                  .ok());
  EXPECT_EQ(Tensor::FromProto(resp.recv(0).tensor())->scalar<float>(), 2.5f);
}

TEST_F(WorkerStepsTest, RunGraphOnCallerThreadAnswersBeforeItReturns) {
  const std::string g = AddGraph();
  RunGraphRequest request = RunRequest("s", g, 3, {{"x", Tensor(1.5f)}});
  RunGraphResponse response;
  absl::Status status = absl::UnknownError("not answered");
  std::thread::id answered_on;
  worker_->RunGraphOnCallerThread(nullptr, &request, &response,
                                  [&](const absl::Status& s) {
                                    status = s;
                                    answered_on = std::this_thread::get_id();
                                  });
  // The step ran, and was answered, on this thread before the call
  // returned.
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(answered_on, std::this_thread::get_id());
  ASSERT_EQ(response.recv_size(), 2);
  EXPECT_EQ(Tensor::FromProto(response.recv(0).tensor())->scalar<float>(),
            3.5f);
  EXPECT_EQ(worker_->NumRunningSteps(), 0u);
  // Errors are RunGraph's own.
  RunGraphRequest unknown = RunRequest("s", "no-such-graph", 4);
  worker_->RunGraphOnCallerThread(nullptr, &unknown, &response,
                                  [&](const absl::Status& s) { status = s; });
  EXPECT_EQ(status,
            DoRunGraph(worker_.get(), RunRequest("s", "no-such-graph", 5)));
}

TEST_F(WorkerStepsTest, BadFeedsAreInvalidArgumentNamingThem) {
  const std::string g = AddGraph();
  absl::Status s = DoRunGraph(worker_.get(), RunRequest("s", g, 1));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("registered with 1 feeds [x]"));
  s = DoRunGraph(worker_.get(), RunRequest("s", g, 2, {{"z", Tensor(1.0f)}}));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("'z'"));
  s = DoRunGraph(worker_.get(),
                 RunRequest("s", g, 3, {{"x", Tensor(int32_t{1})}}));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("placeholder 'x'"));
  RunGraphRequest hostile = RunRequest("s", g, 4, {{"x", Tensor(1.0f)}});
  hostile.mutable_send(0)->mutable_tensor()->set_tensor_content("12345");
  s = DoRunGraph(worker_.get(), hostile);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "feed 'x': tensor_content has 5 bytes but shape [] of float "
            "needs 4");
  hostile.mutable_send(0)
      ->mutable_tensor()
      ->mutable_tensor_shape()
      ->add_dim()
      ->set_size(-4);
  EXPECT_EQ(DoRunGraph(worker_.get(), hostile).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(WorkerStepsTest, NodeErrorKeepsItsCodeAndNamesTheTask) {
  GraphDef g;
  AddVar(&g, "v", "never_set", kDev);
  AddRead(&g, "r", "v", kDev);
  auto h = Register("s", g, {}, {"r:0"});
  ASSERT_TRUE(h.ok());
  absl::Status s = DoRunGraph(worker_.get(), RunRequest("s", *h, 1));
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), StartsWith("node 'r' (op ReadVariableOp) on "
                                      "/job:worker/replica:0/task:0: "));
}

TEST_F(WorkerStepsTest, RepeatedRequestIdIsRefusedAndRunsOnce) {
  GraphDef init;
  AddVar(&init, "v", "counter", kDev);
  AddConst(&init, "zero", Tensor(0.0f), kDev);
  AddAssign(&init, "assign", "AssignVariableOp", "v", "zero", kDev);
  GraphDef inc;
  AddVar(&inc, "v", "counter", kDev);
  AddConst(&inc, "one", Tensor(1.0f), kDev);
  AddAssign(&inc, "add", "AssignAddVariableOp", "v", "one", kDev);
  AddRead(&inc, "r", "v", kDev);
  auto hi = Register("s", init, {}, {}, {"assign"});
  auto ha = Register("s", inc, {}, {}, {"add"});
  ASSERT_TRUE(hi.ok() && ha.ok());
  ASSERT_TRUE(DoRunGraph(worker_.get(), RunRequest("s", *hi, 1)).ok());
  RunGraphRequest req = RunRequest("s", *ha, 2);
  req.set_request_id(99);
  ASSERT_TRUE(DoRunGraph(worker_.get(), req).ok());
  absl::Status again = DoRunGraph(worker_.get(), req);
  EXPECT_EQ(again.code(), absl::StatusCode::kAborted);
  EXPECT_THAT(again.message(),
              StartsWith("The same RunGraph (Worker) request was received "
                         "twice. "));
  EXPECT_THAT(again.message(), HasSubstr("request_id: 99"));
  // Executed once: the counter is 1.
  GraphDef read;
  AddVar(&read, "v", "counter", kDev);
  AddRead(&read, "r", "v", kDev);
  auto hr = Register("s", read, {}, {"r:0"});
  RunGraphResponse resp;
  ASSERT_TRUE(DoRunGraph(worker_.get(), RunRequest("s", *hr, 3), &resp).ok());
  EXPECT_EQ(Tensor::FromProto(resp.recv(0).tensor())->scalar<float>(), 1.0f);
}

TEST_F(WorkerStepsTest, StepDeadlineIsDeadlineExceeded) {
  RunGraphRequest req = RunRequest("s", Blocked(), 1);
  req.set_timeout_in_ms(50);
  absl::Status s = DoRunGraph(worker_.get(), req);
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(s.message(), HasSubstr("/job:worker/replica:0/task:0"));
  // The CallOptions deadline applies too.
  auto call = StartRunGraph(worker_.get(), RunRequest("s", Blocked(), 2),
                            absl::Now() + absl::Milliseconds(50));
  EXPECT_EQ(call->Result().code(), absl::StatusCode::kDeadlineExceeded);
}

TEST_F(WorkerStepsTest, CallerCancelEndsTheStepCancelledAndDerived) {
  auto call = StartRunGraph(worker_.get(), RunRequest("s", Blocked(), 1));
  EXPECT_FALSE(call->Wait(absl::Milliseconds(20)));  // it really waits
  call->opts.StartCancel();
  absl::Status s = call->Result();
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled);
  EXPECT_TRUE(IsDerivedError(s));
  // The worker accepts new steps afterwards.
  EXPECT_TRUE(DoRunGraph(worker_.get(), RunRequest("s", SendGraph(), 2)).ok());
}

TEST_F(WorkerStepsTest, DeletingTheSessionCancelsItsSteps) {
  auto call = StartRunGraph(worker_.get(), RunRequest("s", Blocked(), 1));
  DeleteWorkerSessionRequest del;
  del.set_session_handle("s");
  ASSERT_TRUE(DoDeleteWorkerSession(worker_.get(), del).ok());
  absl::Status s = call->Result();
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled);
  EXPECT_THAT(s.message(), HasSubstr("worker session s"));
}

TEST_F(WorkerStepsTest, MasterIncarnationGcCancelsOldSteps) {
  ASSERT_TRUE(CreateSession("old", false, "/job:m/replica:0/task:0", 1).ok());
  auto h = Register("old", BlockedGraph(), {}, {"r:0"});
  ASSERT_TRUE(h.ok());
  auto call = StartRunGraph(worker_.get(), RunRequest("old", *h, 1));
  ASSERT_TRUE(CreateSession("new", false, "/job:m/replica:0/task:0", 2).ok());
  EXPECT_EQ(call->Result().code(), absl::StatusCode::kCancelled);
}

TEST_F(WorkerStepsTest, StopEndsRunningStepsUnavailableAndRefusesCalls) {
  auto call = StartRunGraph(worker_.get(), RunRequest("s", Blocked(), 1));
  auto recv = StartRecvTensor(worker_.get(), RecvRequest(77));
  EXPECT_FALSE(call->Wait(absl::Milliseconds(20)));
  const absl::Time start = absl::Now();
  worker_->Stop(StoppingError(kTask));
  // Stop returns once the step ended; both answers are already there.
  EXPECT_TRUE(call->finished.HasBeenNotified());
  EXPECT_EQ(worker_->NumRunningSteps(), 0u);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  const absl::Status stopping =
      absl::UnavailableError("server /job:worker/replica:0/task:0 is stopping");
  EXPECT_EQ(call->Result(), stopping);
  EXPECT_EQ(recv->Result(), stopping);
  EXPECT_EQ(DoGetStatus(worker_.get(), {}), stopping);
  EXPECT_EQ(DoRunGraph(worker_.get(), RunRequest("s", "g", 2)), stopping);
  EXPECT_EQ(DoRecvTensor(worker_.get(), RecvRequest(3)), stopping);
  worker_->Stop(absl::InternalError("again"));  // idempotent
  EXPECT_EQ(DoGetStatus(worker_.get(), {}), stopping);
}

TEST_F(WorkerStepsTest, ManyStepsLeaveNoPerStepState) {
  const std::string g = SendGraph();
  for (int64_t step = 1; step <= 200; ++step) {
    ASSERT_TRUE(DoRunGraph(worker_.get(), RunRequest("s", g, step)).ok());
    RecvTensorResponse resp;
    ASSERT_TRUE(DoRecvTensor(worker_.get(), RecvRequest(step), &resp).ok());
    CleanupGraphRequest cleanup;
    cleanup.set_step_id(step);
    ASSERT_TRUE(DoCleanupGraph(worker_.get(), cleanup).ok());
    ASSERT_EQ(worker_->NumStepRendezvous(), 0u) << step;
  }
}

TEST_F(WorkerStepsTest, RecvTensorBeforeAndAfterTheSend) {
  const std::string g = SendGraph();
  // Before: the RecvTensor creates the step's rendezvous and waits.
  auto early = StartRecvTensor(worker_.get(), RecvRequest(5));
  EXPECT_FALSE(early->Wait(absl::Milliseconds(20)));
  ASSERT_TRUE(DoRunGraph(worker_.get(), RunRequest("s", g, 5)).ok());
  ASSERT_TRUE(early->Result().ok()) << early->status;
  EXPECT_TRUE(
      Tensor::FromProto(early->response.tensor())->Equals(Tensor(4.5f)));
  EXPECT_FALSE(early->response.is_dead());
  EXPECT_GT(early->response.send_start_micros(), 0);
  // After: the tensor is already there.
  ASSERT_TRUE(DoRunGraph(worker_.get(), RunRequest("s", g, 6)).ok());
  RecvTensorResponse resp;
  ASSERT_TRUE(DoRecvTensor(worker_.get(), RecvRequest(6), &resp).ok());
  EXPECT_TRUE(Tensor::FromProto(resp.tensor())->Equals(Tensor(4.5f)));
}

TEST_F(WorkerStepsTest, RecvTensorWithStaleIncarnationIsAborted) {
  absl::Status s = DoRecvTensor(worker_.get(), RecvRequest(5, 0x99));
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(s.message(),
            "RecvTensor expects a different device incarnation: 153 vs. " +
                std::to_string(kIncarnation) +
                ". Your worker job was probably restarted. Check your worker "
                "job for the reason why it was restarted.");
  EXPECT_EQ(worker_->NumStepRendezvous(), 0u);  // nothing created
}

TEST_F(WorkerStepsTest, RecvTensorAfterCleanupIsAbortedAtOnce) {
  CleanupGraphRequest cleanup;
  cleanup.set_step_id(12);
  ASSERT_TRUE(DoCleanupGraph(worker_.get(), cleanup).ok());
  auto call = StartRecvTensor(worker_.get(), RecvRequest(12));
  // Answered inline, without waiting.
  ASSERT_TRUE(call->finished.HasBeenNotified());
  EXPECT_EQ(call->status.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(call->status.message(), "Cleanup 12");
  // And a RecvTensor waiting when the cleanup comes gets the same.
  auto waiting = StartRecvTensor(worker_.get(), RecvRequest(13));
  cleanup.set_step_id(13);
  ASSERT_TRUE(DoCleanupGraph(worker_.get(), cleanup).ok());
  ASSERT_TRUE(waiting->finished.HasBeenNotified());
  EXPECT_EQ(waiting->status.message(), "Cleanup 13");
}

TEST_F(WorkerStepsTest, RecvTensorKeyErrors) {
  RecvTensorRequest bad;
  bad.set_step_id(1);
  bad.set_rendezvous_key("not a key");
  EXPECT_EQ(DoRecvTensor(worker_.get(), bad).code(),
            absl::StatusCode::kInvalidArgument);
  RecvTensorRequest remote;
  remote.set_step_id(1);
  remote.set_rendezvous_key(
      Rendezvous::CreateKey(Dev(Task("ps", 0)), kIncarnation, kDev, "t"));
  absl::Status s = DoRecvTensor(worker_.get(), remote);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("not on this task"));
}

TEST_F(WorkerStepsTest, RecvTensorCancelDropsOnlyTheWaiter) {
  auto first = StartRecvTensor(worker_.get(), RecvRequest(8, 0, 1001));
  EXPECT_FALSE(first->Wait(absl::Milliseconds(20)));
  first->opts.StartCancel();
  absl::Status s = first->Result();
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(s.message(), "RecvTensor cancelled for 8");
  // The step was not aborted: its Send and a retry (new id) still meet.
  ASSERT_TRUE(DoRunGraph(worker_.get(), RunRequest("s", SendGraph(), 8)).ok());
  RecvTensorResponse resp;
  ASSERT_TRUE(DoRecvTensor(worker_.get(), RecvRequest(8, 0, 1002), &resp).ok());
  EXPECT_TRUE(Tensor::FromProto(resp.tensor())->Equals(Tensor(4.5f)));
}

TEST_F(WorkerStepsTest, RecvTensorDedupAndDeadline) {
  ASSERT_TRUE(DoRunGraph(worker_.get(), RunRequest("s", SendGraph(), 4)).ok());
  ASSERT_TRUE(DoRecvTensor(worker_.get(), RecvRequest(4, 0, 555)).ok());
  absl::Status again = DoRecvTensor(worker_.get(), RecvRequest(4, 0, 555));
  EXPECT_EQ(again.code(), absl::StatusCode::kAborted);
  EXPECT_THAT(again.message(),
              StartsWith("The same RecvTensor (GrpcWorker) request was "
                         "received twice. "));
  auto late = StartRecvTensor(worker_.get(), RecvRequest(40),
                              absl::Now() + absl::Milliseconds(50));
  EXPECT_EQ(late->Result().code(), absl::StatusCode::kDeadlineExceeded);
}

}  // namespace
}  // namespace cohort::runtime
