// The INDEPENDENT_WORKER barrier over a real coordination service in this
// process (coord::InProcessCluster), through RunDistributeCoordinator with
// an injected agent per task; and the in-process barrier on its own.
#include "cohort/distribute/worker_barrier.h"

#include <atomic>
#include <map>
#include <memory>
#include <thread>
#include <vector>

#include "cohort/base/fake_env.h"
#include "cohort/base/status.h"
#include "cohort/coord/in_process_cluster.h"
#include "cohort/distribute/distribute_coordinator.h"
#include "cohort/distribute/testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort::distribute {
namespace {

using ::testing::HasSubstr;

class CoordinationBarrierTest : public ::testing::Test {
 protected:
  void SetUp() override {
    coord::CoordinationServiceOptions service;
    service.jobs = {{"chief", 1}, {"worker", 2}, {"ps", 1}};
    service.env = Env::Default();
    auto cluster = coord::InProcessCluster::Create(service);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = std::move(*cluster);
    for (const auto& [job, index] : kTasks) {
      coord::CoordinationAgentOptions options;
      options.task = {job, index};
      auto agent = cluster_->NewAgent(options);
      ASSERT_TRUE(agent.ok()) << agent.status();
      ASSERT_TRUE((*agent)->Connect().ok());
      agents_[options.task.ToString()] = std::move(*agent);
    }
    spec_.SetJob("chief", std::vector<std::string>{"c:1"});
    spec_.SetJob("worker", std::vector<std::string>{"w0:1", "w1:1"});
    spec_.SetJob("ps", std::vector<std::string>{"p:1"});
  }

  // Runs the coordinator for each task in `tasks` on its own thread; each
  // worker_fn waits `rounds` times. Returns each task's status.
  std::map<std::string, absl::Status> RunTasks(
      const std::vector<std::pair<std::string, int>>& tasks, int rounds,
      absl::Duration timeout) {
    std::map<std::string, absl::Status> results;
    absl::Mutex mu;
    std::vector<std::thread> threads;
    for (const auto& [job, index] : tasks) {
      threads.emplace_back([&, job = job, index = index] {
        const std::string name = coord::TaskId{job, index}.ToString();
        DistributeCoordinatorOptions o;
        o.worker_fn = [&](const Strategy*) -> absl::Status {
          const WorkerContext* c = CurrentWorkerContext();
          if (!c->has_barrier()) return absl::InternalError("no barrier");
          for (int i = 0; i < rounds; ++i) {
            arrivals_.fetch_add(1);
            COHORT_RETURN_IF_ERROR(c->WaitForOtherWorkers());
            if (arrivals_.load() < 3 * (i + 1)) out_of_step_ = true;
          }
          return absl::OkStatus();
        };
        o.strategy = &strategy_;
        o.mode = CoordinatorMode::kIndependentWorker;
        o.cluster_spec = spec_;
        o.task_type = job;
        o.task_id = index;
        o.server_factory = &factory_;
        o.coordination_agent = agents_.at(name).get();
        o.barrier_timeout = timeout;
        absl::Status s = RunDistributeCoordinator(o);
        absl::MutexLock lock(&mu);
        results[name] = s;
      });
    }
    for (auto& t : threads) t.join();
    return results;
  }

  static inline const std::vector<std::pair<std::string, int>> kTasks = {
      {"chief", 0}, {"worker", 0}, {"worker", 1}};
  std::unique_ptr<coord::InProcessCluster> cluster_;
  std::map<std::string, std::unique_ptr<coord::CoordinationAgent>> agents_;
  ClusterSpec spec_;
  ParameterServerStrategy strategy_;
  RecordingStdServerFactory factory_;
  std::atomic<int> arrivals_{0};
  std::atomic<bool> out_of_step_{false};
};

TEST_F(CoordinationBarrierTest, ChiefAndWorkersPassItManyTimes) {
  auto results = RunTasks(kTasks, 20, absl::Seconds(30));
  for (const auto& [task, s] : results)
    EXPECT_TRUE(s.ok()) << task << ": " << s;
  EXPECT_EQ(arrivals_.load(), 60);
  EXPECT_FALSE(out_of_step_.load());
}

TEST_F(CoordinationBarrierTest, TimeoutNamesTheMissingTask) {
  // worker:1 is connected but never calls the coordinator: it never
  // arrives, whatever the timing.
  auto results =
      RunTasks({{"chief", 0}, {"worker", 0}}, 1, absl::Milliseconds(300));
  for (const auto& [task, s] : results) {
    EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded)
        << task << ": " << s;
    EXPECT_THAT(s.message(), HasSubstr("worker:1")) << s;
    EXPECT_THAT(s.message(), HasSubstr("WaitForOtherWorkers"));
  }
  EXPECT_EQ(results.size(), 2u);
}

TEST(InProcessBarrierTest, ReusableAndLeaveReleasesWaiters) {
  InProcessBarrier barrier(3);
  std::atomic<int> passed{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 2; ++i) {
    threads.emplace_back([&] {
      for (int round = 0; round < 100; ++round) {
        ASSERT_TRUE(barrier.Wait().ok());
      }
      passed.fetch_add(1);
    });
  }
  threads.emplace_back([&] {
    for (int round = 0; round < 50; ++round) ASSERT_TRUE(barrier.Wait().ok());
    barrier.Leave();  // the other two go on as a barrier of two
  });
  for (auto& t : threads) t.join();
  EXPECT_EQ(passed.load(), 2);
}

// A worker thread that never arrives: the others get DeadlineExceeded after
// the timeout on the (fake) clock, saying how many arrived.
TEST(InProcessBarrierTest, TimesOutNamingHowManyArrived) {
  FakeEnv env;
  InProcessBarrier barrier(3, absl::Seconds(10), &env);
  absl::Status result;
  std::thread waiter([&] { result = barrier.Wait(); });
  ASSERT_TRUE(env.BlockUntilParked(1, absl::Seconds(10)));
  env.AdvanceTime(absl::Seconds(11));
  waiter.join();
  EXPECT_EQ(result.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(result.message(), HasSubstr("1 of 3 worker threads"));
}

}  // namespace
}  // namespace cohort::distribute
