#include "cohort/graph/rendezvous.h"

#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort {
namespace {

using ::testing::HasSubstr;

Rendezvous::ParsedKey Key(const std::string& name) {
  return *Rendezvous::ParseKey(Rendezvous::CreateKey(
      "/job:worker/replica:0/task:0/device:CPU:0", 0x1234,
      "/job:ps/replica:0/task:0/device:CPU:0", name, 0, 0));
}

TEST(RendezvousTest, KeyFormatRoundTrip) {
  std::string key = Rendezvous::CreateKey(
      "/job:a/replica:0/task:0/device:CPU:0", 255,
      "/job:b/replica:0/task:1/device:CPU:0", "w/read:0", 2, 7);
  EXPECT_EQ(key,
            "/job:a/replica:0/task:0/device:CPU:0;00000000000000ff;"
            "/job:b/replica:0/task:1/device:CPU:0;w/read:0;2:7");
  auto k = Rendezvous::ParseKey(key);
  ASSERT_TRUE(k.ok());
  EXPECT_EQ(k->src_incarnation, 255u);
  EXPECT_EQ(k->edge_name, "w/read:0");
  EXPECT_EQ(k->frame_id, 2);
  EXPECT_EQ(k->iter_id, 7);
  EXPECT_EQ(Rendezvous::ParseKey("a;b;c").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(Rendezvous::ParseKey("a;zz;c;d;0:0").ok());
  EXPECT_FALSE(Rendezvous::ParseKey("a;1;c;d;0").ok());
}

TEST(RendezvousTest, SendThenRecvAndRecvThenSend) {
  LocalRendezvous r;
  ASSERT_TRUE(r.Send(Key("a"), Tensor(1.f)).ok());
  Tensor v;
  ASSERT_TRUE(r.Recv(Key("a"), &v, absl::InfiniteFuture()).ok());
  EXPECT_EQ(v.scalar<float>(), 1.f);

  // Recv first: RecvAsync (which the blocking Recv waits on) has parked
  // its waiter when it returns, so the Send below certainly comes second.
  absl::Status status = absl::UnknownError("not called");
  Tensor got;
  bool called = false;
  r.RecvAsync(Key("b"), [&](const absl::Status& s, const Tensor& t) {
    status = s;
    got = t;
    called = true;
  });
  EXPECT_FALSE(called);
  ASSERT_TRUE(r.Send(Key("b"), Tensor(2.f)).ok());
  // A local rendezvous hands the tensor over inside Send.
  ASSERT_TRUE(called);
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(got.scalar<float>(), 2.f);
}

TEST(RendezvousTest, DuplicateSendIsAnError) {
  LocalRendezvous r;
  ASSERT_TRUE(r.Send(Key("a"), Tensor(1.f)).ok());
  EXPECT_EQ(r.Send(Key("a"), Tensor(1.f)).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(RendezvousTest, AbortFailsWaitersAndLaterCalls) {
  LocalRendezvous r;
  absl::Status got;
  bool called = false;
  r.RecvAsync(Key("x"), [&](const absl::Status& s, const Tensor&) {
    got = s;
    called = true;
  });
  EXPECT_FALSE(called);
  r.StartAbort(absl::CancelledError("step 3 cancelled"));
  EXPECT_TRUE(called);
  EXPECT_EQ(got.code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(r.Send(Key("y"), Tensor(1.f)).code(), absl::StatusCode::kCancelled);
}

TEST(RendezvousTest, RecvDeadlineNamesTheTensor) {
  LocalRendezvous r;
  Tensor v;
  absl::Status s =
      r.Recv(Key("never"), &v, absl::Now() + absl::Milliseconds(20));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(std::string(s.message()), HasSubstr("'never'"));
}

}  // namespace
}  // namespace cohort
