#include "cohort/runtime/rendezvous_mgr.h"

#include <cstdlib>
#include <utility>
#include <vector>

#include "absl/synchronization/notification.h"
#include "cohort/runtime/worker_errors.h"
#include "cohort/runtime/worker_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort::runtime {
namespace {

using testing::Dev;
using ::testing::HasSubstr;
using testing::Task;

const std::string kA = Task("a", 0);
const std::string kB = Task("b", 0);

Rendezvous::ParsedKey Key(const std::string& src_task,
                          const std::string& dst_task, const std::string& name,
                          uint64_t inc = 1) {
  return *Rendezvous::ParseKey(
      Rendezvous::CreateKey(Dev(src_task), inc, Dev(dst_task), name));
}

struct RecvResult {
  absl::Notification done;
  absl::Status status;
  Tensor value;
  Rendezvous::DoneCallback Callback() {
    return [this](const absl::Status& s, const Tensor& v) {
      status = s;
      value = v;
      done.Notify();
    };
  }
};

// A worker that holds every RecvTensor until the test answers it.
class HeldRecvWorker : public testing::UnimplementedWorker {
 public:
  struct Held {
    CallOptions* opts;
    const RecvTensorRequest* request;
    RecvTensorResponse* response;
    StatusCallback done;
  };
  void RecvTensorAsync(CallOptions* opts, const RecvTensorRequest* request,
                       RecvTensorResponse* response,
                       StatusCallback done) override {
    absl::MutexLock lock(&mu_);
    held_.push_back(Held{opts, request, response, std::move(done)});
    // A cancel answers the held call the way the gRPC client does.
    opts->SetCancelCallback([this, index = held_.size() - 1] {
      StatusCallback d;
      {
        absl::MutexLock l(&mu_);
        d = std::move(held_[index].done);
      }
      if (d) d(absl::CancelledError("cancelled by caller"));
    });
  }
  // Waits for the n-th call (1-based); a copy of it.
  Held WaitForCall(size_t n) {
    absl::MutexLock lock(&mu_);
    std::pair<std::vector<Held>*, size_t> arg(&held_, n);
    if (!mu_.AwaitWithTimeout(
            absl::Condition(
                +[](std::pair<std::vector<Held>*, size_t>* a) {
                  return a->first->size() >= a->second;
                },
                &arg),
            absl::Seconds(30))) {
      ADD_FAILURE() << "RecvTensor call " << n << " never came";
      std::abort();
    }
    return held_[n - 1];
  }
  void Answer(size_t n, const absl::Status& status, const TensorProto& t) {
    StatusCallback d;
    Held h;
    {
      absl::MutexLock lock(&mu_);
      h = held_[n - 1];
      d = std::move(held_[n - 1].done);
    }
    ASSERT_TRUE(d) << "call " << n << " was already answered";
    h.opts->ClearCancelCallback();
    *h.response->mutable_tensor() = t;
    d(status);
  }

 private:
  absl::Mutex mu_;
  std::vector<Held> held_ ABSL_GUARDED_BY(mu_);
};

class OneWorkerCache : public WorkerCache {
 public:
  OneWorkerCache(std::string task, WorkerInterface* w)
      : task_(std::move(task)), worker_(w) {}
  std::vector<std::string> ListTasks() const override { return {task_}; }
  absl::StatusOr<WorkerInterface*> GetWorker(const std::string& t) override {
    if (t != task_) return absl::NotFoundError(t);
    return worker_;
  }
  std::string TaskAddress(const std::string&) const override { return ""; }

 private:
  std::string task_;
  WorkerInterface* worker_;
};

RendezvousMgr::Options MgrOptions(WorkerCache* cache = nullptr) {
  RendezvousMgr::Options o;
  o.task_name = kB;
  o.worker_cache = cache;
  return o;
}

TEST(RendezvousMgrTest, LocalSendThenRecvAndRecvThenSend) {
  RendezvousMgr mgr(MgrOptions());
  auto r = *mgr.Find(1);
  EXPECT_EQ(*mgr.Find(1), r);  // get-or-create returns the same step
  ASSERT_TRUE(r->Send(Key(kB, kB, "x"), Tensor(1.5f)).ok());
  RecvResult first;
  r->RecvAsync(Key(kB, kB, "x"), first.Callback());
  ASSERT_TRUE(first.done.HasBeenNotified());
  EXPECT_EQ(first.value.scalar<float>(), 1.5f);

  RecvResult second;
  r->RecvAsync(Key(kB, kB, "y"), second.Callback());
  EXPECT_FALSE(second.done.HasBeenNotified());
  ASSERT_TRUE(r->Send(Key(kB, kB, "y"), Tensor(2.5f)).ok());
  ASSERT_TRUE(second.done.HasBeenNotified());
  EXPECT_EQ(second.value.scalar<float>(), 2.5f);
}

TEST(RendezvousMgrTest, SendTwiceIsInvalidArgument) {
  RendezvousMgr mgr(MgrOptions());
  auto r = *mgr.Find(1);
  ASSERT_TRUE(r->Send(Key(kB, kB, "x"), Tensor(1.0f)).ok());
  EXPECT_EQ(r->Send(Key(kB, kB, "x"), Tensor(1.0f)).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(RendezvousMgrTest, CleanupAbortsWaitersAndRefusesTheStepAfterwards) {
  RendezvousMgr mgr(MgrOptions());
  auto r = *mgr.Find(7);
  RecvResult waiting;
  r->RecvAsync(Key(kB, kB, "x"), waiting.Callback());
  mgr.Cleanup(7);
  ASSERT_TRUE(waiting.done.HasBeenNotified());
  EXPECT_EQ(waiting.status.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(waiting.status.message(), "Cleanup 7");
  EXPECT_TRUE(IsDerivedError(waiting.status));
  EXPECT_EQ(mgr.NumSteps(), 0u);
  auto again = mgr.Find(7);
  EXPECT_EQ(again.status().code(), absl::StatusCode::kAborted);
  EXPECT_EQ(again.status().message(), "Cleanup 7");
  EXPECT_EQ(mgr.NumSteps(), 0u);  // no state re-created
  // Cleanup of a step never seen is OK and remembered too.
  mgr.Cleanup(8);
  EXPECT_EQ(mgr.Find(8).status().message(), "Cleanup 8");
}

// Takes `key` the way a peer's RecvTensor does (RecvLocalAsync), then
// reports it as the worker does.
absl::Status TakeAsPeer(RendezvousMgr& mgr, int64_t step_id,
                        const Rendezvous::ParsedKey& key) {
  auto r = mgr.Find(step_id);
  if (!r.ok()) return r.status();
  absl::Status status = absl::UnknownError("not answered");
  (*r)->RecvLocalAsync(
      key, nullptr,
      [&](const absl::Status& s, const Tensor&, absl::Time) { status = s; });
  if (status.ok()) mgr.TakenFrom(step_id);
  return status;
}

TEST(RendezvousMgrTest, ADrainedSucceededStepIsForgottenAtOnce) {
  RendezvousMgr mgr(MgrOptions());
  auto r = *mgr.Find(7);
  ASSERT_TRUE(r->Send(Key(kB, kB, "x"), Tensor(1.0f)).ok());
  RecvResult local;
  r->RecvAsync(Key(kB, kB, "x"), local.Callback());
  ASSERT_TRUE(local.done.HasBeenNotified());
  mgr.StepSucceeded(7);
  EXPECT_EQ(mgr.NumSteps(), 0u);
  // Forgotten as by Cleanup: a late RecvTensor is refused, not parked.
  EXPECT_EQ(mgr.Find(7).status().message(), "Cleanup 7");
}

TEST(RendezvousMgrTest, ASucceededStepGoesWhenItsLastTensorIsTaken) {
  RendezvousMgr mgr(MgrOptions());
  auto r = *mgr.Find(7);
  ASSERT_TRUE(r->Send(Key(kB, kA, "x"), Tensor(1.0f)).ok());
  ASSERT_TRUE(r->Send(Key(kB, kA, "y"), Tensor(2.0f)).ok());
  mgr.StepSucceeded(7);
  EXPECT_EQ(mgr.NumSteps(), 1u);  // two tensors still held for the peer
  ASSERT_TRUE(TakeAsPeer(mgr, 7, Key(kB, kA, "x")).ok());
  EXPECT_EQ(mgr.NumSteps(), 1u);
  ASSERT_TRUE(TakeAsPeer(mgr, 7, Key(kB, kA, "y")).ok());
  EXPECT_EQ(mgr.NumSteps(), 0u);
  EXPECT_EQ(mgr.Find(7).status().message(), "Cleanup 7");
}

TEST(RendezvousMgrTest, AStepNotSucceededStaysUntilCleanup) {
  RendezvousMgr mgr(MgrOptions());
  auto r = *mgr.Find(7);
  ASSERT_TRUE(r->Send(Key(kB, kA, "x"), Tensor(1.0f)).ok());
  // Taken while the step still runs here: more Sends may come.
  ASSERT_TRUE(TakeAsPeer(mgr, 7, Key(kB, kA, "x")).ok());
  EXPECT_EQ(mgr.NumSteps(), 1u);
  // A waiter of its own keeps a succeeded step too (a step whose Recv
  // never came failed; its CleanupGraph answers the waiter).
  RecvResult waiting;
  r->RecvAsync(Key(kB, kB, "z"), waiting.Callback());
  mgr.StepSucceeded(7);
  EXPECT_EQ(mgr.NumSteps(), 1u);
  EXPECT_FALSE(waiting.done.HasBeenNotified());
  mgr.Cleanup(7);
  EXPECT_EQ(waiting.status.message(), "Cleanup 7");
  EXPECT_EQ(mgr.NumSteps(), 0u);
}

TEST(RendezvousMgrTest, RemembersTenThousandCleanedSteps) {
  RendezvousMgr::Options o = MgrOptions();
  o.num_remembered_cleanups = 10;  // raised to the reference's minimum
  RendezvousMgr mgr(o);
  mgr.Cleanup(1);
  for (int64_t id = 2; id <= 10000; ++id) mgr.Cleanup(id);
  EXPECT_FALSE(mgr.Find(1).ok());  // 10,000 cleaned ids, 1 still among them
  mgr.Cleanup(10001);
  EXPECT_TRUE(mgr.Find(1).ok());  // now evicted (FIFO)
  EXPECT_FALSE(mgr.Find(2).ok());
}

TEST(RendezvousMgrTest, CancelledLocalRecvDropsOnlyThatWaiter) {
  RendezvousMgr mgr(MgrOptions());
  auto r = *mgr.Find(5);
  CancellationManager cm;
  absl::Notification done;
  absl::Status status;
  r->RecvLocalAsync(Key(kB, kA, "x"), &cm,
                    [&](const absl::Status& s, const Tensor&, absl::Time) {
                      status = s;
                      done.Notify();
                    });
  EXPECT_FALSE(done.HasBeenNotified());
  cm.StartCancel();
  ASSERT_TRUE(done.HasBeenNotified());
  EXPECT_EQ(status.code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(status.message(), "RecvTensor cancelled for 5");
  // The step goes on: a Send and a new receiver still meet.
  ASSERT_TRUE(r->Send(Key(kB, kA, "x"), Tensor(3.0f)).ok());
  absl::Notification got;
  Tensor value;
  r->RecvLocalAsync(Key(kB, kA, "x"), nullptr,
                    [&](const absl::Status& s, const Tensor& v, absl::Time) {
                      EXPECT_TRUE(s.ok()) << s;
                      value = v;
                      got.Notify();
                    });
  ASSERT_TRUE(got.HasBeenNotified());
  EXPECT_EQ(value.scalar<float>(), 3.0f);
}

TEST(RendezvousMgrTest, RecvWithAlreadyCancelledManagerAnswersAtOnce) {
  RendezvousMgr mgr(MgrOptions());
  auto r = *mgr.Find(5);
  CancellationManager cm;
  cm.StartCancel();
  absl::Status status;
  r->RecvLocalAsync(
      Key(kB, kA, "x"), &cm,
      [&](const absl::Status& s, const Tensor&, absl::Time) { status = s; });
  EXPECT_EQ(status.code(), absl::StatusCode::kCancelled);
}

TEST(RendezvousMgrTest, RemoteRecvAsksTheSourceTaskAndDecodes) {
  HeldRecvWorker a;
  OneWorkerCache cache(kA, &a);
  RendezvousMgr mgr(MgrOptions(&cache));
  auto r = *mgr.Find(9);
  RecvResult result;
  r->RecvAsync(Key(kA, kB, "w", 0xabc), result.Callback());
  auto call = a.WaitForCall(1);
  EXPECT_EQ(call.request->step_id(), 9);
  EXPECT_EQ(call.request->rendezvous_key(), Key(kA, kB, "w", 0xabc).full_key);
  EXPECT_NE(call.request->request_id(), 0);
  a.Answer(1, absl::OkStatus(),
           testing::ToProto(Tensor::Vec<float>({1, 2, 3})));
  ASSERT_TRUE(result.done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  ASSERT_TRUE(result.status.ok()) << result.status;
  EXPECT_TRUE(result.value.Equals(Tensor::Vec<float>({1, 2, 3})));

  // A second Recv gets a different request id; a hostile tensor is refused.
  RecvResult bad;
  r->RecvAsync(Key(kA, kB, "v", 0xabc), bad.Callback());
  auto call2 = a.WaitForCall(2);
  EXPECT_NE(call2.request->request_id(), call.request->request_id());
  TensorProto hostile = testing::ToProto(Tensor::Vec<float>({1, 2}));
  hostile.set_tensor_content("abc");
  a.Answer(2, absl::OkStatus(), hostile);
  ASSERT_TRUE(bad.done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_EQ(bad.status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status.message(), HasSubstr("tensor_content has 3 bytes"));
}

TEST(RendezvousMgrTest, AbortCancelsRemoteCallsWithTheStepStatus) {
  HeldRecvWorker a;
  OneWorkerCache cache(kA, &a);
  RendezvousMgr mgr(MgrOptions(&cache));
  auto r = *mgr.Find(3);
  RecvResult result;
  r->RecvAsync(Key(kA, kB, "w"), result.Callback());
  a.WaitForCall(1);
  r->StartAbort(absl::InternalError("boom"));
  ASSERT_TRUE(result.done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  // The step's status, not the RPC's "cancelled by caller".
  EXPECT_EQ(result.status, absl::InternalError("boom"));
  // After the abort, a new remote Recv does not even go out.
  RecvResult late;
  r->RecvAsync(Key(kA, kB, "z"), late.Callback());
  ASSERT_TRUE(late.done.HasBeenNotified());
  EXPECT_EQ(late.status, absl::InternalError("boom"));
}

TEST(RendezvousMgrTest, AbortAllRefusesLaterSteps) {
  RendezvousMgr mgr(MgrOptions());
  auto r = *mgr.Find(3);
  RecvResult waiting;
  r->RecvAsync(Key(kB, kB, "x"), waiting.Callback());
  mgr.AbortAll(absl::UnavailableError("stopping"));
  ASSERT_TRUE(waiting.done.HasBeenNotified());
  EXPECT_EQ(waiting.status, absl::UnavailableError("stopping"));
  EXPECT_EQ(mgr.Find(4).status(), absl::UnavailableError("stopping"));
}

TEST(RendezvousMgrTest, UnknownSourceTaskFailsTheRecv) {
  HeldRecvWorker a;
  OneWorkerCache cache(kA, &a);
  RendezvousMgr mgr(MgrOptions(&cache));
  auto r = *mgr.Find(3);
  RecvResult result;
  r->RecvAsync(Key(Task("c", 0), kB, "w"), result.Callback());
  ASSERT_TRUE(result.done.HasBeenNotified());
  EXPECT_EQ(result.status.code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace cohort::runtime
