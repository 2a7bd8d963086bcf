// FramedChannel against a real FramedServer over loopback: concurrent calls
// answered out of order, deadlines, abandoned calls, a lost connection, an
// oversized reply and a wrong token.
#include "cohort/rpc/framed_channel.h"

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "cohort/rpc/framed_server.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort::rpc {
namespace {

using ::testing::HasSubstr;

constexpr char kToken[] = "channel-test-token";
constexpr absl::Duration kWait = absl::Seconds(20);

// Tagged requests: "park" is held until ReleaseAll() answers the parked ones
// newest first; "big:N" answers N bytes; anything else is echoed.
class TaggedHandler : public FramedServer::Handler {
 public:
  void OnRequest(const std::shared_ptr<FramedConnection>& c,
                 std::string request) override {
    absl::StatusOr<std::pair<uint32_t, absl::string_view>> split =
        SplitTaggedRequest(request);
    ASSERT_TRUE(split.ok()) << split.status();
    const auto [tag, body] = *split;
    if (absl::StartsWith(body, "park")) {
      absl::MutexLock lock(&mu_);
      parked_.push_back({c, tag, std::string(body)});
      return;
    }
    size_t big = 0;
    if (absl::StartsWith(body, "big:") &&
        absl::SimpleAtoi(body.substr(4), &big)) {
      c->ReplyTagged(tag, absl::StatusCode::kOk, std::string(big, 'b'));
      return;
    }
    if (body == "fail") {
      c->ReplyTagged(tag, absl::StatusCode::kNotFound, "no such thing");
      return;
    }
    c->ReplyTagged(tag, absl::StatusCode::kOk, body);
  }
  void OnClose(const std::shared_ptr<FramedConnection>&) override {}

  int parked() {
    absl::MutexLock lock(&mu_);
    return static_cast<int>(parked_.size());
  }
  bool WaitParked(int n) {
    absl::MutexLock lock(&mu_);
    auto enough = [this, n]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      return static_cast<int>(parked_.size()) >= n;
    };
    return mu_.AwaitWithTimeout(absl::Condition(&enough), kWait);
  }
  // Answers every parked request with its own body, newest first.
  void ReleaseAll() {
    std::vector<Parked> parked;
    {
      absl::MutexLock lock(&mu_);
      parked.swap(parked_);
    }
    for (auto it = parked.rbegin(); it != parked.rend(); ++it) {
      it->c->ReplyTagged(it->tag, absl::StatusCode::kOk, it->body);
    }
  }
  void CloseAll() {
    absl::MutexLock lock(&mu_);
    for (Parked& p : parked_) p.c->Close("test closes it");
  }

 private:
  struct Parked {
    std::shared_ptr<FramedConnection> c;
    uint32_t tag;
    std::string body;
  };
  absl::Mutex mu_;
  std::vector<Parked> parked_ ABSL_GUARDED_BY(mu_);
};

class FramedChannelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    FramedServerOptions options;
    options.name = "channel test server";
    options.job_token = kToken;
    options.max_frame_bytes = 1 << 20;
    auto server = FramedServer::Start(options, &handler_);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(server).value();
  }

  std::unique_ptr<FramedChannel> Connect(size_t max_frame = kDefaultMaxFrame) {
    auto channel = FramedChannel::Connect(server_->address(), kToken,
                                          absl::Now() + kWait, max_frame);
    EXPECT_TRUE(channel.ok()) << channel.status();
    return channel.ok() ? std::move(channel).value() : nullptr;
  }

  // A call's outcome, filled on the reader thread.
  struct Outcome {
    absl::Notification ended;
    absl::StatusOr<TaggedReply> result;
    FramedChannel::Done Done() {
      return [this](absl::StatusOr<TaggedReply> r) {
        result = std::move(r);
        ended.Notify();
      };
    }
  };

  TaggedHandler handler_;
  std::unique_ptr<FramedServer> server_;
};

TEST_F(FramedChannelTest, BlockingCallsGetTheirOwnAnswers) {
  auto channel = Connect();
  ASSERT_NE(channel, nullptr);
  auto a = channel->Call("hello", " world", absl::Now() + kWait);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->code, absl::StatusCode::kOk);
  EXPECT_EQ(a->body, "hello world");
  // A server error is an answer, not a failed call; the channel stays up.
  auto b = channel->Call("fail", "", absl::Now() + kWait);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->code, absl::StatusCode::kNotFound);
  EXPECT_EQ(b->body, "no such thing");
  EXPECT_FALSE(channel->broken());
  EXPECT_EQ(channel->in_flight(), 0u);
}

TEST_F(FramedChannelTest, ParkedCallsAnsweredOutOfOrderReachTheirCallers) {
  auto channel = Connect();
  ASSERT_NE(channel, nullptr);
  constexpr int kCalls = 50;
  std::vector<std::unique_ptr<Outcome>> outcomes;
  for (int i = 0; i < kCalls; ++i) {
    outcomes.push_back(std::make_unique<Outcome>());
    channel->Start("park:", absl::StrCat(i), absl::InfiniteFuture(),
                   outcomes.back()->Done());
  }
  ASSERT_TRUE(handler_.WaitParked(kCalls));
  EXPECT_EQ(channel->in_flight(), static_cast<size_t>(kCalls));
  // A call that is not parked passes the parked ones.
  auto echo = channel->Call("x", "", absl::Now() + kWait);
  ASSERT_TRUE(echo.ok()) << echo.status();
  EXPECT_EQ(echo->body, "x");
  handler_.ReleaseAll();  // newest first
  for (int i = 0; i < kCalls; ++i) {
    ASSERT_TRUE(outcomes[i]->ended.WaitForNotificationWithTimeout(kWait));
    ASSERT_TRUE(outcomes[i]->result.ok()) << outcomes[i]->result.status();
    EXPECT_EQ(outcomes[i]->result->body, absl::StrCat("park:", i));
  }
  EXPECT_EQ(channel->in_flight(), 0u);
}

TEST_F(FramedChannelTest, ConcurrentBlockingCallersEachGetTheirOwnAnswer) {
  auto channel = Connect();
  ASSERT_NE(channel, nullptr);
  // An asynchronous call parked throughout: the reader thread reads for it
  // and must step aside for the blocking callers.
  Outcome parked_async;
  channel->Start("park:async", "", absl::InfiniteFuture(), parked_async.Done());
  ASSERT_TRUE(handler_.WaitParked(1));
  constexpr int kThreads = 8;
  std::vector<absl::StatusOr<TaggedReply>> answers(kThreads);
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      answers[i] = channel->Call("park:", absl::StrCat(i), absl::Now() + kWait);
    });
  }
  ASSERT_TRUE(handler_.WaitParked(kThreads + 1));
  handler_.ReleaseAll();  // newest first, all in one go
  for (std::thread& t : threads) t.join();
  for (int i = 0; i < kThreads; ++i) {
    ASSERT_TRUE(answers[i].ok()) << answers[i].status();
    EXPECT_EQ(answers[i]->body, absl::StrCat("park:", i));
  }
  ASSERT_TRUE(parked_async.ended.WaitForNotificationWithTimeout(kWait));
  ASSERT_TRUE(parked_async.result.ok()) << parked_async.result.status();
  EXPECT_EQ(parked_async.result->body, "park:async");
  // Blocking and asynchronous calls keep working afterwards.
  auto again = channel->Call("again", "", absl::Now() + kWait);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->body, "again");
  Outcome async;
  channel->Start("async", "", absl::InfiniteFuture(), async.Done());
  ASSERT_TRUE(async.ended.WaitForNotificationWithTimeout(kWait));
  EXPECT_EQ(async.result->body, "async");
}

TEST_F(FramedChannelTest, AsyncDeadlineEndsTheCallButNotTheChannel) {
  auto channel = Connect();
  ASSERT_NE(channel, nullptr);
  Outcome late;
  channel->Start("park", "", absl::Now() + absl::Milliseconds(50), late.Done());
  ASSERT_TRUE(late.ended.WaitForNotificationWithTimeout(kWait));
  EXPECT_EQ(late.result.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(late.result.status().message(), HasSubstr(server_->address()));
  // The late answer is dropped; the channel goes on.
  handler_.ReleaseAll();
  auto echo = channel->Call("after", "", absl::Now() + kWait);
  ASSERT_TRUE(echo.ok()) << echo.status();
  EXPECT_EQ(echo->body, "after");
  EXPECT_FALSE(channel->broken());
}

TEST_F(FramedChannelTest, BlockingCallReturnsAtItsDeadline) {
  auto channel = Connect();
  ASSERT_NE(channel, nullptr);
  const absl::Time deadline = absl::Now() + absl::Milliseconds(30);
  auto r = channel->Call("park", "", deadline);
  EXPECT_GE(absl::Now(), deadline);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(channel->in_flight(), 0u);
  EXPECT_FALSE(channel->broken());
}

TEST_F(FramedChannelTest, AbandonEndsOneCallWithItsStatus) {
  auto channel = Connect();
  ASSERT_NE(channel, nullptr);
  Outcome abandoned, kept;
  const uint32_t tag =
      channel->Start("park:a", "", absl::InfiniteFuture(), abandoned.Done());
  channel->Start("park:k", "", absl::InfiniteFuture(), kept.Done());
  ASSERT_TRUE(handler_.WaitParked(2));
  channel->Abandon(tag, absl::CancelledError("caller gave up"));
  ASSERT_TRUE(abandoned.ended.HasBeenNotified());
  EXPECT_EQ(abandoned.result.status().code(), absl::StatusCode::kCancelled);
  channel->Abandon(tag, absl::CancelledError("twice"));  // ignored
  handler_.ReleaseAll();
  ASSERT_TRUE(kept.ended.WaitForNotificationWithTimeout(kWait));
  ASSERT_TRUE(kept.result.ok()) << kept.result.status();
  EXPECT_EQ(kept.result->body, "park:k");
}

TEST_F(FramedChannelTest, AbandonWakesABlockingCallerReadingForItself) {
  auto channel = Connect();
  ASSERT_NE(channel, nullptr);
  absl::Notification sent;
  uint32_t tag = 0;
  absl::StatusOr<TaggedReply> result;
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  std::thread caller([&] {
    result = channel->Call("park", "", deadline, [&](uint32_t t) {
      tag = t;
      sent.Notify();
    });
  });
  ASSERT_TRUE(sent.WaitForNotificationWithTimeout(kWait));
  ASSERT_TRUE(handler_.WaitParked(1));
  channel->Abandon(tag, absl::CancelledError("caller gave up"));
  caller.join();
  EXPECT_EQ(result.status().code(), absl::StatusCode::kCancelled);
  // It returned on the Abandon, long before its deadline.
  EXPECT_LT(absl::Now(), deadline - absl::Seconds(30));
  auto after = channel->Call("after", "", absl::Now() + kWait);
  ASSERT_TRUE(after.ok()) << after.status();
}

// Calls whose deadlines pass while they wait for, hold or are handed the
// reading must never leave the connection without a reader.
TEST_F(FramedChannelTest, ShortDeadlinesNeverStrandTheReading) {
  auto channel = Connect();
  ASSERT_NE(channel, nullptr);
  const absl::Time stop = absl::Now() + absl::Seconds(2);
  std::vector<std::thread> threads;
  for (int i = 0; i < 6; ++i) {
    threads.emplace_back([&, i] {
      for (int n = 0; absl::Now() < stop; ++n) {
        const bool park = (n + i) % 2 == 0;
        auto r = channel->Call(
            park ? "park" : "echo", "",
            absl::Now() + absl::Microseconds(park ? 300 + 100 * i : 1000));
        if (!park && r.ok()) EXPECT_EQ(r->body, "echo");
      }
    });
  }
  for (std::thread& t : threads) t.join();
  auto probe = channel->Call("probe", "", absl::Now() + kWait);
  ASSERT_TRUE(probe.ok()) << probe.status();
  EXPECT_EQ(probe->body, "probe");
  Outcome async;
  channel->Start("async probe", "", absl::Now() + kWait, async.Done());
  ASSERT_TRUE(async.ended.WaitForNotificationWithTimeout(kWait));
  ASSERT_TRUE(async.result.ok()) << async.result.status();
  EXPECT_EQ(async.result->body, "async probe");
}

TEST_F(FramedChannelTest, LostConnectionFailsEveryCallInFlight) {
  auto channel = Connect();
  ASSERT_NE(channel, nullptr);
  Outcome one, two;
  channel->Start("park", "", absl::InfiniteFuture(), one.Done());
  channel->Start("park", "", absl::InfiniteFuture(), two.Done());
  ASSERT_TRUE(handler_.WaitParked(2));
  handler_.CloseAll();
  for (Outcome* o : {&one, &two}) {
    ASSERT_TRUE(o->ended.WaitForNotificationWithTimeout(kWait));
    EXPECT_EQ(o->result.status().code(), absl::StatusCode::kUnavailable);
    EXPECT_THAT(o->result.status().message(), HasSubstr(server_->address()));
  }
  EXPECT_TRUE(channel->broken());
  // A call on a broken channel ends at once, inline.
  Outcome after;
  channel->Start("x", "", absl::InfiniteFuture(), after.Done());
  ASSERT_TRUE(after.ended.HasBeenNotified());
  EXPECT_EQ(after.result.status().code(), absl::StatusCode::kUnavailable);
}

TEST_F(FramedChannelTest, OversizedReplyBreaksTheChannel) {
  auto channel = Connect(/*max_frame=*/4096);
  ASSERT_NE(channel, nullptr);
  auto r = channel->Call("big:100000", "", absl::Now() + kWait);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(r.status().message(), HasSubstr("100005 bytes"));
  EXPECT_TRUE(channel->broken());
}

TEST_F(FramedChannelTest, WrongTokenIsRefused) {
  auto channel = FramedChannel::Connect(server_->address(), "wrong token",
                                        absl::Now() + kWait);
  EXPECT_EQ(channel.status().code(), absl::StatusCode::kUnauthenticated);
}

TEST_F(FramedChannelTest, CallbackMayDestroyTheChannel) {
  auto channel = Connect();
  ASSERT_NE(channel, nullptr);
  FramedChannel* raw = channel.release();
  absl::Notification destroyed;
  raw->Start("bye", "", absl::InfiniteFuture(),
             [raw, &destroyed](absl::StatusOr<TaggedReply> r) {
               EXPECT_TRUE(r.ok()) << r.status();
               delete raw;  // on the reader thread
               destroyed.Notify();
             });
  EXPECT_TRUE(destroyed.WaitForNotificationWithTimeout(kWait));
}

}  // namespace
}  // namespace cohort::rpc
