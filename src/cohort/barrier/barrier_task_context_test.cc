// BarrierTaskContext against a real coordinator served the way a job serves
// it: on a coordination server started with ServeBarriers (one gRPC port,
// one framed port, one job token), on 127.0.0.1, with the gang's tasks as
// threads of this process (Spark's BarrierTaskContextSuite scenarios through
// the C++ API, over gRPC and over the framed path).
#include "cohort/barrier/barrier_task_context.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "cohort/barrier/barrier_control_plane.h"
#include "cohort/barrier/barrier_coordinator.h"
#include "cohort/base/fake_env.h"
#include "cohort/coord/coordination_server.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort::barrier {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr char kToken[] = "gang-token";

// The job's control plane for a gang of `num_tasks`: a coordination server
// on 127.0.0.1 (jobs {worker: num_tasks}) serving `coordinator`'s barriers
// on both its transports, with kToken required of every caller.
std::unique_ptr<coord::CoordinationServer> StartServer(
    const std::shared_ptr<BarrierCoordinator>& coordinator, int num_tasks) {
  coord::CoordinationServerOptions options;
  options.security.job_token = kToken;
  options.service.jobs = {{"worker", num_tasks}};
  absl::Status served = ServeBarriers(coordinator, options);
  EXPECT_TRUE(served.ok()) << served;
  auto server = coord::CoordinationServer::Start(std::move(options));
  EXPECT_TRUE(server.ok()) << server.status();
  if (!server.ok()) return nullptr;
  // Without TLS the framed path is always there: the TCP tests need it.
  EXPECT_FALSE(BarrierEndpointsOf(**server).tcp.empty());
  return std::move(server).value();
}

class Gang {
 public:
  explicit Gang(int num_tasks, absl::Duration timeout = absl::Seconds(30),
                bool tcp = false, const std::string& token = kToken)
      : num_tasks_(num_tasks),
        coordinator_(
            std::make_shared<BarrierCoordinator>(Env::Default(), timeout)) {
    EXPECT_TRUE(coordinator_->OpenGang(0, 0, num_tasks).ok());
    server_ = StartServer(coordinator_, num_tasks);
    if (server_ == nullptr) return;  // StartServer reported why
    const BarrierEndpoints at = BarrierEndpointsOf(*server_);
    for (int p = 0; p < num_tasks; ++p) {
      BarrierTaskContext::Options o;
      o.job_token = token;
      o.coordinator_address = at.grpc;
      if (tcp) o.tcp_address = at.tcp;
      o.partition_id = p;
      o.num_tasks = num_tasks;
      o.task_attempt_id = 100 + p;
      o.sync_timeout = timeout;
      for (int i = 0; i < num_tasks; ++i) {
        o.task_addresses.push_back(absl::StrCat("127.0.0.1:", 9000 + i));
      }
      auto ctx = BarrierTaskContext::Create(o);
      EXPECT_TRUE(ctx.ok()) << ctx.status();
      contexts_.push_back(std::move(ctx).value());
    }
  }

  // As the launcher does: the gang is closed before the server stops, so
  // nothing is left parked at its shutdown.
  ~Gang() {
    contexts_.clear();
    coordinator_->CloseGang(0, 0, "test ended");
    server_.reset();
  }

  BarrierTaskContext& task(int p) { return *contexts_[p]; }
  BarrierCoordinator& coordinator() { return *coordinator_; }

  // Runs `body(partition, context)` on one thread per task and joins them.
  void Run(const std::function<void(int, BarrierTaskContext&)>& body) {
    std::vector<std::thread> threads;
    for (int p = 0; p < num_tasks_; ++p) {
      threads.emplace_back([&, p] { body(p, *contexts_[p]); });
    }
    for (auto& t : threads) t.join();
  }

 private:
  const int num_tasks_;
  std::shared_ptr<BarrierCoordinator> coordinator_;
  std::unique_ptr<coord::CoordinationServer> server_;
  std::vector<std::unique_ptr<BarrierTaskContext>> contexts_;
};

// Waits (bounded) until the coordinator shows `waiting` for attempt 0.
bool WaitForWaiting(BarrierCoordinator& c, std::vector<int> waiting) {
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (absl::Now() < deadline) {
    auto s = c.Snapshot(0, 0);
    if (s.has_value() && s->waiting == waiting) return true;
    absl::SleepFor(absl::Milliseconds(2));
  }
  return false;
}

// Makes the partitions of `gang.Run` arrive at the next sync in `order`:
// each waits until every partition before it is parked at the coordinator
// (the polling waits on the coordinator's state; no pause decides).
bool ArriveInOrder(Gang& gang, const std::vector<int>& order, int p) {
  std::vector<int> before;
  for (int q : order) {
    if (q == p) break;
    before.push_back(q);
  }
  std::sort(before.begin(), before.end());
  return WaitForWaiting(gang.coordinator(), before);
}

// Spark #1: tasks arrive one by one in a shuffled order; nobody leaves
// before the last one has arrived. The last one finds all the others still
// parked at the coordinator, and every one leaves after it arrived.
void ExpectReleasedTogether(Gang& gang, int num_tasks) {
  std::vector<int> order(num_tasks);
  for (int p = 0; p < num_tasks; ++p) order[p] = p;
  std::shuffle(order.begin(), order.end(), std::mt19937(num_tasks));
  std::vector<absl::Time> arrived(num_tasks), left(num_tasks);
  gang.Run([&](int p, BarrierTaskContext& ctx) {
    EXPECT_TRUE(ArriveInOrder(gang, order, p))
        << "partition " << p << ": the partitions before it never all waited";
    arrived[p] = absl::Now();
    EXPECT_TRUE(ctx.Barrier().ok());
    left[p] = absl::Now();
  });
  const absl::Time last_arrival = arrived[order.back()];
  for (int p = 0; p < num_tasks; ++p) {
    EXPECT_GE(left[p], last_arrival) << "partition " << p << " left early";
  }
}

TEST(BarrierTaskContextTest, GlobalSyncReleasesEveryoneTogether) {
  Gang gang(4);
  ExpectReleasedTogether(gang, 4);
}

TEST(BarrierTaskContextTcpTest, GlobalSyncReleasesEveryoneTogether) {
  Gang gang(4, absl::Seconds(30), /*tcp=*/true);
  ExpectReleasedTogether(gang, 4);
}

// Both transports of the one server refuse a task without the job's token
// before the coordinator sees its request.
TEST(BarrierTaskContextTest, WrongTokenIsUnauthenticatedOnBothTransports) {
  for (bool tcp : {false, true}) {
    Gang gang(2, absl::Seconds(30), tcp, /*token=*/"not-the-token");
    absl::Status status = gang.task(0).Barrier();
    EXPECT_EQ(status.code(), absl::StatusCode::kUnauthenticated)
        << (tcp ? "tcp: " : "grpc: ") << status;
    EXPECT_THAT(status.message(), HasSubstr("partition 0"));
    auto snapshot = gang.coordinator().Snapshot(0, 0);
    ASSERT_TRUE(snapshot.has_value());
    EXPECT_TRUE(snapshot->waiting.empty());
    EXPECT_EQ(snapshot->epoch, 0);
  }
}

// Spark #2: allGather returns every message ordered by partition id.
TEST(BarrierTaskContextTest, AllGatherOrderedByPartition) {
  Gang gang(4);
  gang.Run([&](int p, BarrierTaskContext& ctx) {
    ASSERT_TRUE(ArriveInOrder(gang, {3, 2, 1, 0}, p));  // reverse arrival
    auto all = ctx.AllGather(std::to_string(p));
    ASSERT_TRUE(all.ok()) << all.status();
    EXPECT_THAT(*all, ElementsAre("0", "1", "2", "3"));
  });
}

// Spark #3: mixing barrier() and allGather() in one sync fails the job.
TEST(BarrierTaskContextTest, MixedMethodsFail) {
  Gang gang(3);
  gang.Run([&](int p, BarrierTaskContext& ctx) {
    absl::Status status = p == 0 ? ctx.Barrier() : ctx.AllGather("x").status();
    // Whoever arrives after the state was cleared gets Aborted with the
    // same reason; everyone sees the reason.
    EXPECT_FALSE(status.ok());
    EXPECT_THAT(status.message(), HasSubstr("Different barrier sync types"));
  });
}

// Spark #4 and #5: barrier, barrier, allGather in sequence; the epoch
// advances 0 -> 1 -> 2 -> 3.
TEST(BarrierTaskContextTest, SeveralSyncsInSequence) {
  Gang gang(3);
  gang.Run([&](int p, BarrierTaskContext& ctx) {
    EXPECT_EQ(ctx.epoch(), 0);
    ASSERT_TRUE(ctx.Barrier().ok());
    EXPECT_EQ(ctx.epoch(), 1);
    ASSERT_TRUE(ctx.Barrier().ok());
    EXPECT_EQ(ctx.epoch(), 2);
    auto all = ctx.AllGather(absl::StrCat("p", p));
    ASSERT_TRUE(all.ok()) << all.status();
    EXPECT_THAT(*all, ElementsAre("p0", "p1", "p2"));
    EXPECT_EQ(ctx.epoch(), 3);
  });
}

// Spark #12 (SPARK-40932): a later barrier() does not change the result of
// an earlier allGather().
TEST(BarrierTaskContextTest, AllGatherResultSurvivesLaterBarrier) {
  Gang gang(2);
  gang.Run([&](int p, BarrierTaskContext& ctx) {
    auto all = ctx.AllGather(std::to_string(p));
    ASSERT_TRUE(all.ok());
    ASSERT_TRUE(ctx.Barrier().ok());
    EXPECT_THAT(*all, ElementsAre("0", "1"));
  });
}

// Spark #6/#7: a task never calls barrier(); the others fail after the
// coordinator's timeout with Spark's message naming the missing partition.
TEST(BarrierTaskContextTest, TaskThatNeverCallsBarrierTimesOut) {
  Gang gang(3, absl::Seconds(1));
  const absl::Time start = absl::Now();
  gang.Run([&](int p, BarrierTaskContext& ctx) {
    if (p == 1) return;
    absl::Status status = ctx.Barrier();
    EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded);
    EXPECT_THAT(status.message(),
                HasSubstr("The coordinator didn't get all barrier sync "
                          "requests for barrier epoch 0"));
    EXPECT_THAT(status.message(), HasSubstr("within 1 second(s)"));
    EXPECT_THAT(status.message(), HasSubstr("did not arrive: [1]"));
    EXPECT_EQ(ctx.epoch(), 0);  // the epoch advances only on success
  });
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
}

// Spark #8: one task skips its first barrier (an exception was caught), so
// the gang's second sync never completes and times out.
TEST(BarrierTaskContextTest, UnequalNumberOfBarrierCallsTimesOut) {
  Gang gang(3, absl::Seconds(1));
  gang.Run([&](int p, BarrierTaskContext& ctx) {
    if (p == 0) {
      // Skipped the first barrier; its one call joins sync 0.
      EXPECT_TRUE(ctx.Barrier().ok());
      return;
    }
    ASSERT_TRUE(ctx.Barrier().ok());
    absl::Status second = ctx.Barrier();
    EXPECT_EQ(second.code(), absl::StatusCode::kDeadlineExceeded);
    EXPECT_THAT(second.message(), HasSubstr("barrier epoch 1"));
    EXPECT_THAT(second.message(), HasSubstr("did not arrive: [0]"));
  });
}

// Spark #9: a task killed while waiting stops waiting at once, and the
// coordinator withdraws its request.
TEST(BarrierTaskContextTest, CancelStopsAWaitingTaskAtOnce) {
  Gang gang(2);
  absl::Status status;
  absl::Time returned;
  std::thread waiter([&] {
    status = gang.task(0).Barrier();
    returned = absl::Now();
  });
  ASSERT_TRUE(WaitForWaiting(gang.coordinator(), {0}));
  const absl::Time cancelled = absl::Now();
  gang.task(0).Cancel();
  waiter.join();
  EXPECT_EQ(status.code(), absl::StatusCode::kCancelled) << status;
  EXPECT_LT(returned - cancelled, absl::Milliseconds(500));
  EXPECT_TRUE(WaitForWaiting(gang.coordinator(), {}));
  // Every later sync of a cancelled task fails at once.
  EXPECT_EQ(gang.task(0).Barrier().code(), absl::StatusCode::kCancelled);
}

void CancelOnSignal(int) { BarrierTaskContext::CancelFromSignalHandler(); }

// The same through a signal handler and the context from the environment.
TEST(BarrierTaskContextTest, SignalHandlerCancelsTheProcessContext) {
  auto coordinator =
      std::make_shared<BarrierCoordinator>(Env::Default(), absl::Seconds(30));
  ASSERT_TRUE(coordinator->OpenGang(0, 0, 2).ok());
  std::unique_ptr<coord::CoordinationServer> server =
      StartServer(coordinator, 2);
  ASSERT_NE(server, nullptr);
  setenv(kEnvBarrierAddress, BarrierEndpointsOf(*server).grpc.c_str(), 1);
  setenv(rpc::kJobTokenEnvVar, kToken, 1);
  setenv(kEnvPartitionId, "1", 1);
  setenv(kEnvNumTasks, "2", 1);
  auto ctx = BarrierTaskContext::Get();
  ASSERT_TRUE(ctx.ok()) << ctx.status();
  EXPECT_EQ((*ctx)->partition_id(), 1);
  struct sigaction sa {};
  sa.sa_handler = CancelOnSignal;
  sigemptyset(&sa.sa_mask);
  ASSERT_EQ(sigaction(SIGUSR1, &sa, nullptr), 0);
  absl::Status status;
  std::thread waiter([&] { status = (*ctx)->Barrier(); });
  ASSERT_TRUE(WaitForWaiting(*coordinator, {1}));
  kill(getpid(), SIGUSR1);
  waiter.join();
  EXPECT_EQ(status.code(), absl::StatusCode::kCancelled) << status;
  EXPECT_TRUE(WaitForWaiting(*coordinator, {}));
  signal(SIGUSR1, SIG_DFL);
}

// The TCP transport: the same semantics as gRPC.
TEST(BarrierTaskContextTcpTest, SyncsInSequenceAndOrderedAllGather) {
  Gang gang(3, absl::Seconds(30), /*tcp=*/true);
  gang.Run([&](int p, BarrierTaskContext& ctx) {
    ASSERT_TRUE(ArriveInOrder(gang, {2, 1, 0}, p));  // reverse arrival
    ASSERT_TRUE(ctx.Barrier().ok());
    auto all = ctx.AllGather(std::to_string(p));
    ASSERT_TRUE(all.ok()) << all.status();
    EXPECT_THAT(*all, ElementsAre("0", "1", "2"));
    ASSERT_TRUE(ctx.Barrier().ok());
    EXPECT_THAT(*all, ElementsAre("0", "1", "2"));  // SPARK-40932
    EXPECT_EQ(ctx.epoch(), 3);
  });
}

TEST(BarrierTaskContextTcpTest, TimeoutAndMixedMethodsCarryTheMessages) {
  Gang gang(3, absl::Seconds(1), /*tcp=*/true);
  gang.Run([&](int p, BarrierTaskContext& ctx) {
    if (p == 1) return;
    absl::Status status = ctx.Barrier();
    EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
    EXPECT_THAT(status.message(), HasSubstr("within 1 second(s)"));
    EXPECT_THAT(status.message(), HasSubstr("did not arrive: [1]"));
  });
  Gang mixed(2, absl::Seconds(30), /*tcp=*/true);
  mixed.Run([&](int p, BarrierTaskContext& ctx) {
    absl::Status status = p == 0 ? ctx.Barrier() : ctx.AllGather("x").status();
    EXPECT_THAT(status.message(), HasSubstr("Different barrier sync types"));
  });
}

TEST(BarrierTaskContextTcpTest, CancelWithdrawsTheRequest) {
  Gang gang(2, absl::Seconds(30), /*tcp=*/true);
  absl::Status status;
  std::thread waiter([&] { status = gang.task(0).Barrier(); });
  ASSERT_TRUE(WaitForWaiting(gang.coordinator(), {0}));
  const absl::Time cancelled = absl::Now();
  gang.task(0).Cancel();
  waiter.join();
  EXPECT_EQ(status.code(), absl::StatusCode::kCancelled) << status;
  EXPECT_LT(absl::Now() - cancelled, absl::Milliseconds(500));
  EXPECT_TRUE(WaitForWaiting(gang.coordinator(), {}));
}

TEST(BarrierTaskContextTest, TaskInfosOrderedByPartition) {
  Gang gang(3);
  std::vector<TaskInfo> infos = gang.task(2).GetTaskInfos();
  ASSERT_EQ(infos.size(), 3u);
  EXPECT_EQ(infos[0].address, "127.0.0.1:9000");
  EXPECT_EQ(infos[2].address, "127.0.0.1:9002");
  EXPECT_EQ(gang.task(2).num_tasks(), 3);
  EXPECT_EQ(gang.task(2).partition_id(), 2);
}

TEST(BarrierTaskContextTest, FromEnvNamesMissingVariable) {
  FakeEnv env;
  auto ctx = BarrierTaskContext::FromEnv(&env);
  EXPECT_EQ(ctx.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(ctx.status().message(), HasSubstr("COHORT_BARRIER_ADDRESS"));
  env.SetVar(kEnvBarrierAddress, "127.0.0.1:1");
  env.SetVar(kEnvPartitionId, "x");
  ctx = BarrierTaskContext::FromEnv(&env);
  EXPECT_THAT(ctx.status().message(), HasSubstr("COHORT_PARTITION_ID"));
  env.SetVar(kEnvPartitionId, "3");
  env.SetVar(kEnvNumTasks, "3");
  ctx = BarrierTaskContext::FromEnv(&env);
  EXPECT_EQ(ctx.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(ctx.status().message(), HasSubstr("partition id 3"));
  env.SetVar(kEnvPartitionId, "2");
  env.SetVar(kEnvAttemptNumber, "4");
  env.SetVar(rpc::kJobTokenEnvVar, "from-env");
  ctx = BarrierTaskContext::FromEnv(&env);
  ASSERT_TRUE(ctx.ok()) << ctx.status();
  EXPECT_EQ((*ctx)->attempt_number(), 4);
  EXPECT_EQ((*ctx)->task_attempt_id(), 4 * 3 + 2);
}

// Successive processes of one task continue the epoch through the file.
TEST(BarrierTaskContextTest, EpochFileCarriesTheEpochAcrossContexts) {
  auto coordinator =
      std::make_shared<BarrierCoordinator>(Env::Default(), absl::Seconds(30));
  ASSERT_TRUE(coordinator->OpenGang(0, 0, 1).ok());
  std::unique_ptr<coord::CoordinationServer> server =
      StartServer(coordinator, 1);
  ASSERT_NE(server, nullptr);
  const std::string file =
      absl::StrCat(::testing::TempDir(), "/epoch-", getpid(), "-",
                   absl::ToUnixNanos(absl::Now()));
  BarrierTaskContext::Options o;
  o.coordinator_address = BarrierEndpointsOf(*server).grpc;
  o.job_token = kToken;
  o.num_tasks = 1;
  o.epoch_file = file;
  for (int round = 0; round < 3; ++round) {
    auto ctx = BarrierTaskContext::Create(o);
    ASSERT_TRUE(ctx.ok()) << ctx.status();
    EXPECT_EQ((*ctx)->epoch(), round);
    ASSERT_TRUE((*ctx)->Barrier().ok()) << "round " << round;
  }
  std::remove(file.c_str());
}

TEST(BarrierTaskContextTest, UnreachableCoordinatorIsUnavailable) {
  BarrierTaskContext::Options o;
  o.coordinator_address = "127.0.0.1:1";  // nothing listens on port 1
  o.num_tasks = 2;
  auto ctx = BarrierTaskContext::Create(o);
  ASSERT_TRUE(ctx.ok());
  absl::Status status = (*ctx)->Barrier();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
  EXPECT_THAT(status.message(), HasSubstr("127.0.0.1:1"));
  EXPECT_THAT(status.message(), HasSubstr("partition 0"));
}

}  // namespace
}  // namespace cohort::barrier
