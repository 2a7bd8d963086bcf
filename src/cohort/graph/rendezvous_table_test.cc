#include "cohort/graph/rendezvous_table.h"

#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort {
namespace {

using ::testing::HasSubstr;

const std::string kKeyA = "/job:w/replica:0/task:0/device:CPU:0;01;x;a:0;0:0";
const std::string kKeyB = "/job:w/replica:0/task:0/device:CPU:0;01;x;b:0;0:0";

RendezvousTable::Options Step5() {
  RendezvousTable::Options o;
  o.step_id = 5;
  o.cancelled_prefix = "cancelled in step ";
  return o;
}

// Everything one receiver heard; `calls` counts how often it was answered.
struct Heard {
  int calls = 0;
  absl::Status status = absl::UnknownError("never answered");
  Tensor value;
  absl::Time sent_at;
  RendezvousTable::DoneCallback Done() {
    return [this](const absl::Status& s, const Tensor& v) {
      ++calls;
      status = s;
      value = v;
    };
  }
  RendezvousTable::TimedDoneCallback Timed() {
    return [this](const absl::Status& s, const Tensor& v, absl::Time t) {
      ++calls;
      status = s;
      value = v;
      sent_at = t;
    };
  }
};

const absl::Time kSentAt = absl::FromUnixSeconds(1000);

TEST(RendezvousTableTest, SendThenRecvHandsOverTheValueAndItsSendTime) {
  RendezvousTable table(Step5());
  ASSERT_TRUE(table.Send(kKeyA, "a:0", Tensor(1.5f), kSentAt).ok());
  EXPECT_FALSE(table.empty());
  Heard heard;
  table.Recv(kKeyA, "a:0", nullptr, heard.Timed());
  ASSERT_EQ(heard.calls, 1);  // inline: the value was there
  ASSERT_TRUE(heard.status.ok()) << heard.status;
  EXPECT_EQ(heard.value.scalar<float>(), 1.5f);
  EXPECT_EQ(heard.sent_at, kSentAt);
  EXPECT_TRUE(table.empty());
}

TEST(RendezvousTableTest, RecvThenSendAnswersTheWaiterInsideSend) {
  RendezvousTable table;
  Heard heard;
  table.Recv(kKeyA, "a:0", heard.Done());
  EXPECT_EQ(heard.calls, 0);
  EXPECT_FALSE(table.empty());  // a waiter counts
  ASSERT_TRUE(table.Send(kKeyA, "a:0", Tensor(2.f), kSentAt).ok());
  ASSERT_EQ(heard.calls, 1);
  ASSERT_TRUE(heard.status.ok()) << heard.status;
  EXPECT_EQ(heard.value.scalar<float>(), 2.f);
  EXPECT_TRUE(table.empty());
}

TEST(RendezvousTableTest, SecondSendOfAHeldKeyIsInvalidArgumentNamingIt) {
  RendezvousTable table(Step5());
  ASSERT_TRUE(table.Send(kKeyA, "a:0", Tensor(1.f), kSentAt).ok());
  absl::Status second = table.Send(kKeyA, "a:0", Tensor(9.f), kSentAt);
  EXPECT_EQ(second.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(second.message(), HasSubstr("'a:0'"));
  EXPECT_THAT(second.message(), HasSubstr(kKeyA));
  EXPECT_THAT(second.message(), HasSubstr("sent twice in step 5"));
  // The first value stays; the refused one is not stored.
  Heard heard;
  table.Recv(kKeyA, "a:0", heard.Done());
  EXPECT_EQ(heard.value.scalar<float>(), 1.f);
  // Once taken, the key is free: the table does not remember it.
  EXPECT_TRUE(table.Send(kKeyA, "a:0", Tensor(3.f), kSentAt).ok());
}

TEST(RendezvousTableTest, ASecondWaiterOfAKeyIsInvalidArgument) {
  RendezvousTable table;
  Heard first, second;
  table.Recv(kKeyA, "a:0", first.Done());
  table.Recv(kKeyA, "a:0", second.Done());
  ASSERT_EQ(second.calls, 1);
  EXPECT_EQ(second.status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(second.status.message(), HasSubstr("received twice in one step"));
  // The first waiter is untouched and still gets the tensor.
  EXPECT_EQ(first.calls, 0);
  ASSERT_TRUE(table.Send(kKeyA, "a:0", Tensor(4.f), kSentAt).ok());
  EXPECT_EQ(first.calls, 1);
  EXPECT_EQ(first.value.scalar<float>(), 4.f);
}

TEST(RendezvousTableTest, AbortFailsEveryWaiterOnceWithTheFirstStatus) {
  RendezvousTable table(Step5());
  Heard a, b;
  table.Recv(kKeyA, "a:0", a.Done());
  CancellationManager cm;
  table.Recv(kKeyB, "b:0", &cm, b.Timed());
  ASSERT_TRUE(table.Abort(absl::InternalError("boom")));
  EXPECT_EQ(a.calls, 1);
  EXPECT_EQ(b.calls, 1);
  EXPECT_EQ(a.status, absl::InternalError("boom"));
  EXPECT_EQ(b.status, absl::InternalError("boom"));
  // A later abort changes nothing and answers nobody again; neither does
  // the cancellation of a waiter the abort already answered.
  EXPECT_FALSE(table.Abort(absl::CancelledError("later")));
  cm.StartCancel();
  EXPECT_EQ(a.calls, 1);
  EXPECT_EQ(b.calls, 1);
  EXPECT_EQ(table.status(), absl::InternalError("boom"));
  EXPECT_TRUE(table.empty());
  EXPECT_FALSE(table.drained());  // aborted is never drained
}

TEST(RendezvousTableTest, AfterAbortRecvSendAndPendingFailWithItsStatus) {
  RendezvousTable table(Step5());
  ASSERT_TRUE(table.Send(kKeyA, "a:0", Tensor(1.f), kSentAt).ok());
  table.Abort(absl::DeadlineExceededError("step 5 timed out"));
  // Even a held tensor is gone: the step is over.
  Heard heard;
  table.Recv(kKeyA, "a:0", heard.Done());
  ASSERT_EQ(heard.calls, 1);
  EXPECT_EQ(heard.status, absl::DeadlineExceededError("step 5 timed out"));
  EXPECT_EQ(table.Send(kKeyB, "b:0", Tensor(1.f), kSentAt),
            absl::DeadlineExceededError("step 5 timed out"));
  struct Op : RendezvousTable::Pending {
    void Cancel() override {}
  };
  EXPECT_EQ(table.BeginPending(std::make_shared<Op>()),
            absl::DeadlineExceededError("step 5 timed out"));
}

TEST(RendezvousTableTest, AbortWithOkIsCancelledNamingTheStep) {
  RendezvousTable table(Step5());
  Heard heard;
  table.Recv(kKeyA, "a:0", heard.Done());
  table.Abort(absl::OkStatus());
  EXPECT_EQ(heard.status, absl::CancelledError("step 5 was aborted"));
}

TEST(RendezvousTableTest, CancellationDropsOnlyThatWaiter) {
  RendezvousTable table(Step5());
  CancellationManager cm;
  Heard cancelled, other;
  table.Recv(kKeyA, "a:0", &cm, cancelled.Timed());
  table.Recv(kKeyB, "b:0", nullptr, other.Timed());
  cm.StartCancel();
  ASSERT_EQ(cancelled.calls, 1);
  EXPECT_EQ(cancelled.status, absl::CancelledError("cancelled in step 5"));
  // The step goes on: the other waiter still waits, the cancelled key is
  // free for a Send and a new receiver.
  EXPECT_EQ(other.calls, 0);
  EXPECT_TRUE(table.status().ok());
  ASSERT_TRUE(table.Send(kKeyB, "b:0", Tensor(2.f), kSentAt).ok());
  EXPECT_EQ(other.calls, 1);
  EXPECT_EQ(other.value.scalar<float>(), 2.f);
  ASSERT_TRUE(table.Send(kKeyA, "a:0", Tensor(3.f), kSentAt).ok());
  Heard again;
  table.Recv(kKeyA, "a:0", nullptr, again.Timed());
  EXPECT_EQ(again.value.scalar<float>(), 3.f);
  EXPECT_EQ(cancelled.calls, 1);
}

TEST(RendezvousTableTest, AnAnsweredWaitersCancellationDoesNothing) {
  // Declared before the table: its destructor answers `later`, still
  // waiting at the end.
  Heard heard;
  Heard later;
  RendezvousTable table(Step5());
  CancellationManager cm;
  table.Recv(kKeyA, "a:0", &cm, heard.Timed());
  ASSERT_TRUE(table.Send(kKeyA, "a:0", Tensor(1.f), kSentAt).ok());
  ASSERT_EQ(heard.calls, 1);
  // The answered waiter was deregistered, and a later waiter of the same
  // key is not dropped by the old registration's cancellation.
  table.Recv(kKeyA, "a:0", nullptr, later.Timed());
  cm.StartCancel();
  EXPECT_EQ(heard.calls, 1);
  EXPECT_TRUE(heard.status.ok());
  EXPECT_EQ(later.calls, 0);
}

TEST(RendezvousTableTest, AnAlreadyCancelledReceiverIsAnsweredAtOnce) {
  RendezvousTable table(Step5());
  CancellationManager cm;
  cm.StartCancel();
  Heard heard;
  table.Recv(kKeyA, "a:0", &cm, heard.Timed());
  ASSERT_EQ(heard.calls, 1);
  EXPECT_EQ(heard.status, absl::CancelledError("cancelled in step 5"));
  EXPECT_TRUE(table.empty());  // nothing left parked
}

TEST(RendezvousTableTest, PendingOpsKeepItUndrainedAndAbortCancelsThem) {
  struct Op : RendezvousTable::Pending {
    int cancels = 0;
    void Cancel() override { ++cancels; }
  };
  RendezvousTable table(Step5());
  EXPECT_TRUE(table.drained());
  auto finished = std::make_shared<Op>();
  ASSERT_TRUE(table.BeginPending(finished).ok());
  EXPECT_TRUE(table.empty());
  EXPECT_FALSE(table.drained());
  EXPECT_TRUE(table.EndPending(finished.get()).ok());
  EXPECT_TRUE(table.drained());

  auto running = std::make_shared<Op>();
  ASSERT_TRUE(table.BeginPending(running).ok());
  table.Abort(absl::InternalError("boom"));
  EXPECT_EQ(running->cancels, 1);
  EXPECT_EQ(finished->cancels, 0);  // ended before the abort
  // The cancelled op learns why the step stopped.
  EXPECT_EQ(table.EndPending(running.get()), absl::InternalError("boom"));
}

TEST(RendezvousTableTest, AHeldTensorKeepsItUndrained) {
  RendezvousTable table;
  ASSERT_TRUE(table.Send(kKeyA, "a:0", Tensor(1.f), kSentAt).ok());
  EXPECT_FALSE(table.drained());
  Heard heard;
  table.Recv(kKeyA, "a:0", heard.Done());
  EXPECT_TRUE(table.drained());
}

TEST(RendezvousTableTest, DestructionAnswersWhatStillWaits) {
  Heard heard;
  CancellationManager cm;
  {
    RendezvousTable table(Step5());
    table.Recv(kKeyA, "a:0", &cm, heard.Timed());
  }
  ASSERT_EQ(heard.calls, 1);
  EXPECT_EQ(heard.status,
            absl::CancelledError("rendezvous of step 5 destroyed"));
  // Deregistered before the table went: cancelling now reaches nothing.
  cm.StartCancel();
  EXPECT_EQ(heard.calls, 1);
}

// Callbacks run outside the table's lock, so a receiver may go on with
// the table from its callback (absl::Mutex is not reentrant: under the
// lock this would deadlock).
TEST(RendezvousTableTest, CallbacksMayCallTheTable) {
  RendezvousTable table(Step5());
  std::vector<std::string> seen;
  // Answered inside Send: receives the next key, already sent.
  ASSERT_TRUE(table.Send(kKeyB, "b:0", Tensor(2.f), kSentAt).ok());
  table.Recv(kKeyA, "a:0", [&](const absl::Status& s, const Tensor&) {
    seen.push_back("a");
    table.Recv(kKeyB, "b:0", [&](const absl::Status& s2, const Tensor&) {
      seen.push_back(s2.ok() ? "b" : "b failed");
    });
  });
  ASSERT_TRUE(table.Send(kKeyA, "a:0", Tensor(1.f), kSentAt).ok());
  EXPECT_EQ(seen, (std::vector<std::string>{"a", "b"}));
  // Answered by the abort and by a cancellation: asks the table.
  CancellationManager cm;
  absl::Status status_seen;
  table.Recv(kKeyA, "a:0", &cm,
             [&](const absl::Status&, const Tensor&, absl::Time) {
               status_seen = table.status();
             });
  cm.StartCancel();
  EXPECT_TRUE(status_seen.ok());
  table.Recv(kKeyA, "a:0", [&](const absl::Status&, const Tensor&) {
    status_seen = table.status();
  });
  table.Abort(absl::InternalError("boom"));
  EXPECT_EQ(status_seen, absl::InternalError("boom"));
}

}  // namespace
}  // namespace cohort
