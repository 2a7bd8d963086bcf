#include "cohort/collective/collective_group.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "cohort/base/status.h"
#include "cohort/collective/local_exchange.h"
#include "cohort/collective/ring_communicator.h"
#include "cohort/collective/shm_communicator.h"
#include "cohort/coord/in_process_cluster.h"
#include "cohort/rpc/coding.h"
#include "cohort/rpc/framed_client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort::collective {
namespace {

using ::testing::HasSubstr;

absl::Time Soon() { return absl::Now() + absl::Seconds(60); }

// Runs fn(rank, group) on `size` threads, each with its own group.
struct Gang {
  static std::vector<absl::Status> Run(
      int size, Transport transport,
      const std::function<absl::Status(int, CollectiveGroup&)>& fn,
      GroupOptions base = {}) {
    LocalExchange exchange(size);
    std::vector<absl::Status> results(size);
    std::vector<std::thread> threads;
    for (int r = 0; r < size; ++r) {
      threads.emplace_back([&, r] {
        GroupOptions o = base;
        o.rank = r;
        o.size = size;
        o.task = absl::StrCat("worker:", r);
        o.transport = transport;
        o.job_token = "collective-test-token";
        o.setup_timeout = absl::Seconds(30);
        absl::StatusOr<std::unique_ptr<CollectiveGroup>> g =
            CollectiveGroup::Create(o, exchange.For(r));
        results[r] = g.ok() ? fn(r, **g) : g.status();
      });
    }
    for (auto& t : threads) t.join();
    return results;
  }
};

void ExpectAllOk(const std::vector<absl::Status>& results) {
  for (size_t r = 0; r < results.size(); ++r) {
    EXPECT_TRUE(results[r].ok()) << "rank " << r << ": " << results[r];
  }
}

class CollectiveTest : public ::testing::TestWithParam<Transport> {
 protected:
  // Small slots and pieces, so modest sizes take many rounds and pieces.
  GroupOptions Small() {
    GroupOptions o;
    o.shm_slot_bytes = 4096;
    o.tcp_chunk_bytes = 4096;
    return o;
  }
};

TEST_P(CollectiveTest, ChoosesTheTransportItWasAskedFor) {
  ExpectAllOk(Gang::Run(2, GetParam(), [](int, CollectiveGroup& g) {
    EXPECT_STREQ(g.transport(), GetParam() == Transport::kTcp ? "tcp" : "shm");
    EXPECT_THAT(g.tasks(), ::testing::ElementsAre("worker:0", "worker:1"));
    return absl::OkStatus();
  }));
}

TEST_P(CollectiveTest, AllReduceSumsExactlyForEveryWorldAndSize) {
  for (int world : {1, 2, 3, 4}) {
    for (size_t count : {size_t{0}, size_t{1}, size_t{17}, size_t{5000}}) {
      std::vector<std::vector<float>> out(world);
      ExpectAllOk(Gang::Run(
          world, GetParam(),
          [&](int r, CollectiveGroup& g) {
            // Small integers: every summation order gives the exact sum.
            std::vector<float> v(count);
            for (size_t i = 0; i < count; ++i) v[i] = (r + 1) * (i % 97);
            absl::Status s =
                g.AllReduce(v.data(), v.size(), ReduceOp::kSum, Soon());
            out[r] = std::move(v);
            return s;
          },
          Small()));
      const float ranks_sum = world * (world + 1) / 2.0f;
      for (int r = 0; r < world; ++r) {
        ASSERT_EQ(out[r].size(), count);
        for (size_t i = 0; i < count; ++i) {
          ASSERT_EQ(out[r][i], ranks_sum * (i % 97))
              << "world " << world << " count " << count << " rank " << r
              << " element " << i;
        }
      }
    }
  }
}

TEST_P(CollectiveTest, MeanOfRandomDoublesIsBitIdenticalOnEveryMember) {
  constexpr int kWorld = 3;
  constexpr size_t kCount = 3001;
  std::vector<std::vector<double>> in(kWorld), out(kWorld);
  std::mt19937_64 rng(7);
  std::normal_distribution<double> normal;
  for (auto& v : in) {
    for (size_t i = 0; i < kCount; ++i) v.push_back(normal(rng));
  }
  ExpectAllOk(Gang::Run(
      kWorld, GetParam(),
      [&](int r, CollectiveGroup& g) {
        out[r] = in[r];
        return g.AllReduce(out[r].data(), kCount, ReduceOp::kMean, Soon());
      },
      Small()));
  for (size_t i = 0; i < kCount; ++i) {
    double mean = (in[0][i] + in[1][i] + in[2][i]) / kWorld;
    ASSERT_NEAR(out[0][i], mean, 1e-12) << i;
  }
  EXPECT_EQ(std::memcmp(out[0].data(), out[1].data(), kCount * 8), 0);
  EXPECT_EQ(std::memcmp(out[0].data(), out[2].data(), kCount * 8), 0);
}

TEST_P(CollectiveTest, BroadcastCopiesTheRootsBytesToEveryone) {
  constexpr int kWorld = 3;
  for (size_t bytes : {size_t{0}, size_t{5}, size_t{20000}}) {
    std::vector<std::string> out(kWorld);
    ExpectAllOk(Gang::Run(
        kWorld, GetParam(),
        [&](int r, CollectiveGroup& g) {
          std::string data(bytes, static_cast<char>('a' + r));
          absl::Status s = g.Broadcast(data.data(), bytes, 2, Soon());
          out[r] = data;
          return s;
        },
        Small()));
    for (int r = 0; r < kWorld; ++r) {
      EXPECT_EQ(out[r], std::string(bytes, 'c')) << "rank " << r;
    }
  }
}

TEST_P(CollectiveTest, AllGatherPutsEachMembersBytesAtItsRank) {
  constexpr int kWorld = 4;
  constexpr size_t kBytes = 9999;
  std::vector<std::string> out(kWorld);
  ExpectAllOk(Gang::Run(
      kWorld, GetParam(),
      [&](int r, CollectiveGroup& g) {
        std::string mine(kBytes, static_cast<char>('a' + r));
        out[r].resize(kWorld * kBytes);
        return g.AllGather(mine.data(), kBytes, out[r].data(), Soon());
      },
      Small()));
  std::string want;
  for (int q = 0; q < kWorld; ++q) want += std::string(kBytes, 'a' + q);
  for (int r = 0; r < kWorld; ++r) EXPECT_EQ(out[r], want) << "rank " << r;
}

TEST_P(CollectiveTest, ManyCallsInARowStayInStep) {
  // Alternating kinds and sizes exercise the banks' and descriptors'
  // parity across calls.
  ExpectAllOk(Gang::Run(
      3, GetParam(),
      [&](int r, CollectiveGroup& g) -> absl::Status {
        for (int i = 0; i < 50; ++i) {
          std::vector<float> v(1 + i * 37, r + i);
          COHORT_RETURN_IF_ERROR(
              g.AllReduce(v.data(), v.size(), ReduceOp::kSum, Soon()));
          for (float x : v) {
            if (x != 3 * i + 3) {
              return absl::InternalError(absl::StrCat("call ", i, ": ", x));
            }
          }
          int word = r == i % 3 ? i : -1;
          COHORT_RETURN_IF_ERROR(
              g.Broadcast(&word, sizeof(word), i % 3, Soon()));
          if (word != i) return absl::InternalError("broadcast");
        }
        return absl::OkStatus();
      },
      Small()));
}

TEST_P(CollectiveTest, MembersThatDisagreeAllFailAndOneNamesBothCalls) {
  std::vector<absl::Status> results = Gang::Run(
      2, GetParam(),
      [](int r, CollectiveGroup& g) -> absl::Status {
        std::vector<float> v(r == 0 ? 100 : 200, 1.0f);
        absl::Status s = g.AllReduce(v.data(), v.size(), ReduceOp::kSum,
                                     absl::Now() + absl::Seconds(20));
        if (s.ok()) return s;
        // Broken for good.
        absl::Status again = g.AllReduce(v.data(), v.size(), ReduceOp::kSum,
                                         absl::Now() + absl::Seconds(20));
        EXPECT_EQ(again.code(), absl::StatusCode::kFailedPrecondition) << again;
        return s;
      },
      Small());
  EXPECT_FALSE(results[0].ok());
  EXPECT_FALSE(results[1].ok());
  bool named = false;
  for (const absl::Status& s : results) {
    if (s.code() == absl::StatusCode::kInvalidArgument) {
      named = true;
      EXPECT_THAT(s.message(), HasSubstr("worker:"));
      EXPECT_THAT(s.message(), HasSubstr("same"));
    }
  }
  EXPECT_TRUE(named) << results[0] << " / " << results[1];
}

TEST_P(CollectiveTest, CallsThatDifferOnlyInOperationOrKindAreRefused) {
  // The same bytes and instance, but SUM against MEAN, and an all-reduce
  // against an all-gather of as many bytes: refused, never mixed.
  using Call = std::function<absl::Status(CollectiveGroup&, float*)>;
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  const std::vector<std::pair<Call, Call>> pairs = {
      {[&](CollectiveGroup& g, float* v) {
         return g.AllReduce(v, 32, ReduceOp::kSum, deadline, 1);
       },
       [&](CollectiveGroup& g, float* v) {
         return g.AllReduce(v, 32, ReduceOp::kMean, deadline, 1);
       }},
      {[&](CollectiveGroup& g, float* v) {
         return g.AllReduce(v, 32, ReduceOp::kSum, deadline, 1);
       },
       [&](CollectiveGroup& g, float* v) {
         std::vector<float> out(64);
         return g.AllGather(v, 32 * sizeof(float), out.data(), deadline, 1);
       }},
  };
  for (size_t k = 0; k < pairs.size(); ++k) {
    const Call& first = pairs[k].first;
    const Call& second = pairs[k].second;
    const char* other = k == 0 ? "AllReduce MEAN" : "AllGather";
    std::vector<absl::Status> results = Gang::Run(
        2, GetParam(), [&](int r, CollectiveGroup& g) -> absl::Status {
          std::vector<float> v(32, 1.0f);
          return r == 0 ? first(g, v.data()) : second(g, v.data());
        });
    EXPECT_FALSE(results[0].ok());
    EXPECT_FALSE(results[1].ok());
    bool named = false;
    for (const absl::Status& s : results) {
      named = named || (s.code() == absl::StatusCode::kInvalidArgument &&
                        absl::StrContains(s.message(), "AllReduce SUM") &&
                        absl::StrContains(s.message(), other));
    }
    EXPECT_TRUE(named) << results[0] << " / " << results[1];
  }
}

TEST_P(CollectiveTest, AMemberThatLeavesFailsTheOthersAtOnceNamingIt) {
  // Rank 1 joins, then leaves without calling (its group is destroyed, its
  // thread lives on until Run returns). The others must fail with it named
  // long before their 60 s deadline: not DeadlineExceeded.
  std::vector<absl::Status> results =
      Gang::Run(3, GetParam(), [](int r, CollectiveGroup& g) -> absl::Status {
        if (r == 1) return absl::OkStatus();
        std::vector<float> v(1000, 1.0f);
        return g.AllReduce(v.data(), v.size(), ReduceOp::kSum,
                           absl::Now() + absl::Seconds(60));
      });
  int naming = 0;
  for (int r : {0, 2}) {
    EXPECT_FALSE(results[r].ok()) << "rank " << r;
    EXPECT_NE(results[r].code(), absl::StatusCode::kDeadlineExceeded)
        << results[r];
    naming += absl::StrContains(results[r].message(), "worker:1");
  }
  // Shared memory sees who left. Over TCP, rank 0 finds rank 1 gone; rank
  // 2 may first see rank 0 hang up on it (true, and what it can see).
  EXPECT_GE(naming, GetParam() == Transport::kTcp ? 1 : 2)
      << results[0] << " / " << results[2];
}

TEST_P(CollectiveTest, DifferentInstancesOfTheSameShapeAreRefused) {
  // Same sizes, different calls (two graph ops run in different orders):
  // refused, not silently mixed.
  std::vector<absl::Status> results =
      Gang::Run(2, GetParam(), [](int r, CollectiveGroup& g) -> absl::Status {
        std::vector<float> v(64, 1.0f);
        return g.AllReduce(v.data(), v.size(), ReduceOp::kSum,
                           absl::Now() + absl::Seconds(20), r == 0 ? 7 : 8);
      });
  EXPECT_FALSE(results[0].ok());
  EXPECT_FALSE(results[1].ok());
  bool named = false;
  for (const absl::Status& s : results) {
    if (s.code() == absl::StatusCode::kInvalidArgument) {
      named = true;
      EXPECT_THAT(s.message(), HasSubstr("instance 7"));
      EXPECT_THAT(s.message(), HasSubstr("instance 8"));
    }
  }
  EXPECT_TRUE(named) << results[0] << " / " << results[1];
}

TEST_P(CollectiveTest, AMemberThatNeverComesIsNamedAtTheDeadline) {
  absl::Notification rank0_done;
  std::vector<absl::Status> results =
      Gang::Run(2, GetParam(), [&](int r, CollectiveGroup& g) -> absl::Status {
        if (r == 1) {
          // Alive, with its group open, but never calls.
          rank0_done.WaitForNotification();
          return absl::OkStatus();
        }
        float x = 1;
        absl::Status s = g.AllReduce(&x, 1, ReduceOp::kSum,
                                     absl::Now() + absl::Milliseconds(300));
        rank0_done.Notify();
        return s;
      });
  EXPECT_EQ(results[0].code(), absl::StatusCode::kDeadlineExceeded)
      << results[0];
  EXPECT_THAT(results[0].message(), HasSubstr("worker:1"));
}

// Cancel() from another thread ends a collective that waits for a member
// alive but silent (rank 1 never calls; its endpoint still takes pieces, so
// nothing on the wire breaks) with the given reason, long before the
// deadline; whether it lands before or during the call, the call fails the
// same way, and so does every later one.
TEST_P(CollectiveTest, CancelEndsACallWaitingForASilentMember) {
  absl::Notification done;
  absl::Status later;
  std::vector<absl::Status> results =
      Gang::Run(2, GetParam(), [&](int r, CollectiveGroup& g) -> absl::Status {
        if (r == 1) {
          done.WaitForNotification();
          return absl::OkStatus();
        }
        std::thread canceller([&g] {
          g.Cancel(absl::UnavailableError("the membership changed"));
        });
        float x = 1;
        absl::Status s =
            g.AllReduce(&x, 1, ReduceOp::kSum, absl::Now() + absl::Seconds(60));
        canceller.join();
        later =
            g.AllReduce(&x, 1, ReduceOp::kSum, absl::Now() + absl::Seconds(60));
        done.Notify();
        return s;
      });
  EXPECT_EQ(results[0].code(), absl::StatusCode::kUnavailable) << results[0];
  EXPECT_THAT(results[0].message(), HasSubstr("the membership changed"));
  EXPECT_EQ(later.code(), absl::StatusCode::kFailedPrecondition) << later;
}

INSTANTIATE_TEST_SUITE_P(Transports, CollectiveTest,
                         ::testing::Values(Transport::kSharedMemory,
                                           Transport::kTcp),
                         [](const auto& info) {
                           return info.param == Transport::kTcp ? "Tcp" : "Shm";
                         });

TEST(CollectiveGroupTest, AutoPicksSharedMemoryOnOneHost) {
  ExpectAllOk(Gang::Run(2, Transport::kAuto, [](int, CollectiveGroup& g) {
    EXPECT_STREQ(g.transport(), "shm");
    return absl::OkStatus();
  }));
}

TEST(CollectiveGroupTest, SharedMemoryIsRefusedAcrossHosts) {
  // Rank 1 claims another host.
  LocalExchange exchange(2);
  std::vector<absl::Status> results(2);
  std::thread other([&] {
    Exchange e = exchange.For(1);
    results[1] = e("worker:1\nanother-host", Soon()).status();
  });
  GroupOptions o;
  o.rank = 0;
  o.size = 2;
  o.transport = Transport::kSharedMemory;
  absl::StatusOr<std::unique_ptr<CollectiveGroup>> g =
      CollectiveGroup::Create(o, exchange.For(0));
  other.join();
  EXPECT_EQ(g.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(g.status().message(), HasSubstr("not all on this host"));
}

TEST(ShmCommunicatorTest, AMemberProcessThatExitsIsNamedWithItsPid) {
  ShmOptions o;
  o.group = "g";
  o.tasks = {"worker:0", "worker:1"};
  absl::StatusOr<std::unique_ptr<ShmCommunicator>> c0 =
      ShmCommunicator::Create(o);
  ASSERT_TRUE(c0.ok()) << c0.status();
  const std::string name = (*c0)->segment_name();
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // The other member: attach, take part in the first barrier, vanish.
    ShmOptions mine = o;
    mine.rank = 1;
    auto c1 = ShmCommunicator::Attach(mine, name);
    if (!c1.ok()) _exit(2);
    _exit((*c1)->WaitAllAttached(absl::Now() + absl::Seconds(30)).ok() ? 0 : 3);
  }
  ASSERT_TRUE((*c0)->WaitAllAttached(absl::Now() + absl::Seconds(30)).ok());
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  float x = 1;
  absl::Status s =
      (*c0)->AllReduce(&x, 1, ElementType::kFloat32, ReduceOp::kSum, 0,
                       absl::Now() + absl::Seconds(60));
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_THAT(s.message(), HasSubstr(absl::StrCat("worker:1) pid ", child)));
  EXPECT_THAT(s.message(), HasSubstr("exited"));
}

TEST(ShmCommunicatorTest, TheNameIsGoneOnceEveryoneAttached) {
  ShmOptions o;
  o.group = "g";
  o.tasks = {"worker:0", "worker:1"};
  auto c0 = ShmCommunicator::Create(o);
  ASSERT_TRUE(c0.ok()) << c0.status();
  ShmOptions o1 = o;
  o1.rank = 1;
  auto c1 = ShmCommunicator::Attach(o1, (*c0)->segment_name());
  ASSERT_TRUE(c1.ok()) << c1.status();
  std::thread t([&] {
    EXPECT_TRUE((*c1)->WaitAllAttached(absl::Now() + absl::Seconds(30)).ok());
  });
  EXPECT_TRUE((*c0)->WaitAllAttached(absl::Now() + absl::Seconds(30)).ok());
  t.join();
  auto late = ShmCommunicator::Attach(o1, (*c0)->segment_name());
  EXPECT_FALSE(late.ok());
  EXPECT_THAT(late.status().message(), HasSubstr("worker:0"));
  // And a name that is not ours is refused before anything is opened.
  auto foreign = ShmCommunicator::Attach(o1, "/etc-passwd");
  EXPECT_EQ(foreign.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(RingCommunicatorTest, EndpointRefusesWrongTokenAndStrangers) {
  RingOptions o;
  o.group = "g";
  o.rank = 0;
  o.tasks = {"worker:0", "worker:1", "worker:2"};
  o.job_token = "right";
  auto c = RingCommunicator::Start(o, "127.0.0.1");
  ASSERT_TRUE(c.ok()) << c.status();
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  const std::string me = (*c)->Identity(0);
  auto wrong = rpc::FramedClient::Connect((*c)->address(), "wrong", deadline,
                                          rpc::kDefaultMaxFrame, me);
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kUnauthenticated);
  // The right token, but meant for another member's endpoint (as a
  // handshake relayed from a dead member's port would be): refused.
  auto relayed =
      rpc::FramedClient::Connect((*c)->address(), "right", deadline,
                                 rpc::kDefaultMaxFrame, (*c)->Identity(1));
  EXPECT_EQ(relayed.status().code(), absl::StatusCode::kUnauthenticated);
  // The right token but not the previous member (rank 2 is): cut off.
  auto stranger = rpc::FramedClient::Connect((*c)->address(), "right", deadline,
                                             rpc::kDefaultMaxFrame, me);
  ASSERT_TRUE(stranger.ok()) << stranger.status();
  std::string hello;
  rpc::PutFixed32(&hello, 1);
  EXPECT_FALSE((*stranger)->Call(hello, deadline).ok());
  // A piece before any hello is not a hello either.
  auto rude = rpc::FramedClient::Connect((*c)->address(), "right", deadline,
                                         rpc::kDefaultMaxFrame, me);
  ASSERT_TRUE(rude.ok());
  EXPECT_FALSE((*rude)->Call(std::string(4096, 'x'), deadline).ok());
}

TEST(ExchangeThroughCoordinationTest, GroupsResolveThroughTheService) {
  coord::CoordinationServiceOptions service;
  service.jobs = {{"worker", 3}};
  auto cluster = coord::InProcessCluster::Create(service);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  std::vector<std::string> transports(3);
  std::vector<absl::Status> statuses = (*cluster)->RunTasks(
      3, [&](coord::CoordinationAgent& agent, int i) -> absl::Status {
        GroupOptions o;
        o.name = "grads";
        o.rank = i;
        o.size = 3;
        o.task = absl::StrCat("worker:", i);
        o.transport = Transport::kTcp;
        COHORT_ASSIGN_OR_RETURN(
            auto g,
            CollectiveGroup::Create(o, ExchangeThroughCoordination(
                                           &agent, "collective/grads", i, 3)));
        double v = i;
        COHORT_RETURN_IF_ERROR(g->AllReduce(&v, 1, ReduceOp::kSum, Soon()));
        if (v != 3) return absl::InternalError(absl::StrCat("sum ", v));
        transports[i] = g->transport();
        return absl::OkStatus();
      });
  ExpectAllOk(statuses);
  EXPECT_THAT(transports, ::testing::Each("tcp"));
}

}  // namespace
}  // namespace cohort::collective
