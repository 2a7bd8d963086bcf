// ElasticGang between threads of this process: one real coordination
// service (in process), each member its own agent and TCP group.
#include "cohort/training/elastic_gang.h"

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "cohort/coord/in_process_cluster.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort::training {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

class ElasticGangTest : public ::testing::Test {
 protected:
  void SetUp() override {
    coord::CoordinationServiceOptions service;
    service.jobs = {{"worker", 4}};
    absl::StatusOr<std::unique_ptr<coord::InProcessCluster>> cluster =
        coord::InProcessCluster::Create(service);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = *std::move(cluster);
    store_ = coord::ElasticStoreOf(cluster_->service());
  }

  // An agent for `task` (not registered: the gang needs only the store).
  coord::CoordinationAgent* Agent(int task) {
    coord::CoordinationAgentOptions o;
    o.task = {"worker", task};
    absl::StatusOr<std::unique_ptr<coord::CoordinationAgent>> agent =
        cluster_->NewAgent(o);
    EXPECT_TRUE(agent.ok()) << agent.status();
    agents_.push_back(*std::move(agent));
    return agents_.back().get();
  }

  ElasticGangOptions Options(int task, int min, int max, bool restarted) {
    ElasticGangOptions o;
    o.task = absl::StrCat("worker:", task);
    o.range = {min, max};
    o.wait = absl::Seconds(20);
    o.timeout = absl::Seconds(20);
    o.restarted = restarted;
    o.poll_interval = absl::ZeroDuration();
    o.group.transport = collective::Transport::kTcp;
    o.group.job_token = "elastic-gang-test-token";
    return o;
  }

  std::unique_ptr<coord::InProcessCluster> cluster_;
  coord::ElasticStore store_;
  std::vector<std::unique_ptr<coord::CoordinationAgent>> agents_;
};

// worker:2 is lost before generation 0 formed: the two others give up on
// generation 0 once generation 1 (without it) is written and form that.
// They step; worker:2's replacement joins. Both members see the change at
// the same step (the flag is all-reduced), move together, and all three
// then reduce to the same mean.
TEST_F(ElasticGangTest, AJoiningTaskIsTakenInAtTheSameStepByEveryMember) {
  ASSERT_TRUE(coord::WriteInitialMembership(
                  store_, {"worker:0", "worker:1", "worker:2"})
                  .ok());
  ASSERT_TRUE(coord::ChangeMembership(store_, [](auto members) {
                return coord::WithoutMember(members, "worker:2");
              }).ok());
  std::atomic<bool> joining{false};
  int changed_at[2] = {-1, -1};
  float after[3] = {0, 0, 0};
  std::vector<std::thread> members;
  for (int t = 0; t < 2; ++t) {
    coord::CoordinationAgent* agent = Agent(t);
    members.emplace_back([&, t, agent] {
      absl::StatusOr<std::unique_ptr<ElasticGang>> gang =
          ElasticGang::Join(Options(t, 2, 3, false), agent);
      ASSERT_TRUE(gang.ok()) << gang.status();
      EXPECT_EQ((*gang)->rank(), t);
      EXPECT_EQ((*gang)->membership().generation, 1);
      // Steps until the change is agreed (bounded in time, not steps: a
      // sanitizer build steps slowly).
      const absl::Time give_up = absl::Now() + absl::Seconds(60);
      for (int step = 0; changed_at[t] < 0 && absl::Now() < give_up; ++step) {
        float v = 1.f + t;
        ASSERT_TRUE((*gang)->AllReduceMean(&v, 1).ok());
        EXPECT_EQ(v, 1.5f);
        if (step == 5) joining = true;
        absl::StatusOr<bool> change = (*gang)->ChangeAgreed();
        ASSERT_TRUE(change.ok()) << change.status();
        if (*change) changed_at[t] = step;
      }
      ASSERT_TRUE((*gang)->Reform(absl::OkStatus()).ok());
      EXPECT_EQ((*gang)->size(), 3);
      EXPECT_EQ((*gang)->membership().generation, 2);
      after[t] = 3.f * t;
      ASSERT_TRUE((*gang)->AllReduceMean(&after[t], 1).ok());
    });
  }
  coord::CoordinationAgent* third = Agent(2);
  std::thread joiner([&] {
    const absl::Time give_up = absl::Now() + absl::Seconds(60);
    while (!joining && absl::Now() < give_up) std::this_thread::yield();
    ASSERT_TRUE(joining) << "the members never stepped";
    absl::StatusOr<std::unique_ptr<ElasticGang>> gang =
        ElasticGang::Join(Options(2, 2, 3, true), third);
    ASSERT_TRUE(gang.ok()) << gang.status();
    EXPECT_EQ((*gang)->rank(), 2);
    EXPECT_THAT((*gang)->membership().members,
                ElementsAre("worker:0", "worker:1", "worker:2"));
    after[2] = 6.f;
    ASSERT_TRUE((*gang)->AllReduceMean(&after[2], 1).ok());
  });
  for (auto& m : members) m.join();
  joiner.join();
  EXPECT_GE(changed_at[0], 5);
  EXPECT_EQ(changed_at[0], changed_at[1]);
  EXPECT_EQ(after[0], 3.f);  // (0 + 3 + 6) / 3
  EXPECT_EQ(after[1], 3.f);
  EXPECT_EQ(after[2], 3.f);
}

// A member leaves (its group closes); once the launcher writes the next
// generation without it, the survivors' failed collective leads them into
// it.
TEST_F(ElasticGangTest, SurvivorsReformWithoutALostMember) {
  ASSERT_TRUE(coord::WriteInitialMembership(
                  store_, {"worker:0", "worker:1", "worker:2"})
                  .ok());
  std::atomic<int> formed{0};
  std::vector<std::thread> threads;
  float after[2] = {0, 0};
  for (int t = 0; t < 3; ++t) {
    coord::CoordinationAgent* agent = Agent(t);
    threads.emplace_back([&, t, agent] {
      absl::StatusOr<std::unique_ptr<ElasticGang>> gang =
          ElasticGang::Join(Options(t, 2, 3, false), agent);
      ASSERT_TRUE(gang.ok()) << gang.status();
      ++formed;
      if (t == 1) {
        const absl::Time give_up = absl::Now() + absl::Seconds(60);
        while (formed < 3 && absl::Now() < give_up) std::this_thread::yield();
        return;  // lost: its group's sockets close
      }
      float v = 1;
      absl::Status lost = (*gang)->AllReduceMean(&v, 1);
      ASSERT_FALSE(lost.ok());
      // What the launcher does when it sees the task exit.
      ASSERT_TRUE(coord::ChangeMembership(store_, [](auto members) {
                    return coord::WithoutMember(members, "worker:1");
                  }).ok());
      ASSERT_TRUE((*gang)->Reform(lost).ok());
      EXPECT_THAT((*gang)->membership().members,
                  ElementsAre("worker:0", "worker:2"));
      EXPECT_EQ((*gang)->rank(), t == 0 ? 0 : 1);
      after[t / 2] = 2.f * t;
      ASSERT_TRUE((*gang)->AllReduceMean(&after[t / 2], 1).ok());
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(after[0], 2.f);
  EXPECT_EQ(after[1], 2.f);
}

// A member alive but silent (its group stays open, its endpoint answers,
// it never calls): the survivors' collective waits on it until the
// launcher removes it (what task 0's launcher does when the coordination
// service misses its heartbeats). worker:0's watch then cancels its group,
// long before the collective's 20 s deadline; worker:1, whose watch is made
// to look only after an hour, learns it from worker:0 hanging up (the ring
// runs 0 -> 1 -> 2 -> 0) without the abort message a failing member sends
// (a cancelled member hangs up first). Both re-form without worker:2.
TEST_F(ElasticGangTest, ASilentMemberRemovedByTheLauncherEndsTheWait) {
  ASSERT_TRUE(coord::WriteInitialMembership(
                  store_, {"worker:0", "worker:1", "worker:2"})
                  .ok());
  std::atomic<int> formed{0};
  absl::Notification survivors_done;
  std::vector<std::thread> threads;
  float after[2] = {0, 0};
  for (int t = 0; t < 3; ++t) {
    coord::CoordinationAgent* agent = Agent(t);
    threads.emplace_back([&, t, agent] {
      ElasticGangOptions o = Options(t, 2, 3, false);
      // worker:2 is silent, its watch too; worker:1's looks too late.
      if (t != 0) o.poll_interval = absl::Hours(1);
      absl::StatusOr<std::unique_ptr<ElasticGang>> gang =
          ElasticGang::Join(o, agent);
      ASSERT_TRUE(gang.ok()) << gang.status();
      if (++formed == 3) {
        // Every member formed generation 0: the launcher removes worker:2.
        ASSERT_TRUE(coord::ChangeMembership(store_, [](auto members) {
                      return coord::WithoutMember(members, "worker:2");
                    }).ok());
      }
      if (t == 2) {
        survivors_done.WaitForNotification();  // silent, not gone
        return;
      }
      float v = 1;
      absl::Status cut = (*gang)->AllReduceMean(&v, 1);
      ASSERT_TRUE(absl::IsUnavailable(cut)) << cut;
      EXPECT_THAT(
          cut.message(),
          HasSubstr(t == 0 ? "worker:0: elastic generation 1 removed "
                             "worker:2 from the group of generation 0"
                           : "rank 0 (worker:0) closed its connection"));
      ASSERT_TRUE((*gang)->Reform(cut).ok());
      EXPECT_THAT((*gang)->membership().members,
                  ElementsAre("worker:0", "worker:1"));
      after[t] = 2.f * t;
      ASSERT_TRUE((*gang)->AllReduceMean(&after[t], 1).ok());
    });
  }
  threads[0].join();
  threads[1].join();
  survivors_done.Notify();
  threads[2].join();
  EXPECT_EQ(after[0], 1.f);
  EXPECT_EQ(after[1], 1.f);
}

TEST_F(ElasticGangTest, BelowMinAMemberWaitsThenNamesTheMissingTasks) {
  ASSERT_TRUE(coord::WriteInitialMembership(
                  store_, {"worker:0", "worker:1", "worker:2"})
                  .ok());
  ASSERT_TRUE(coord::ChangeMembership(store_, [](auto members) {
                return coord::WithoutMember(
                    coord::WithoutMember(members, "worker:1"), "worker:2");
              }).ok());
  // A restarted worker:0 (a first process would form generation 0 first).
  ElasticGangOptions o = Options(0, 2, 3, true);
  o.wait = absl::Milliseconds(100);
  o.replacement_wait = absl::Milliseconds(300);
  absl::Status s = ElasticGang::Join(o, Agent(0)).status();
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_THAT(s.message(),
              HasSubstr("the elastic job has 1 task(s) (worker:0), "
                        "fewer than its minimum 2"));
  EXPECT_THAT(s.message(), HasSubstr("missing: worker:1, worker:2"));
}

TEST_F(ElasticGangTest, ATaskThatIsNotAMemberIsRefused) {
  ASSERT_TRUE(coord::WriteInitialMembership(store_, {"worker:0"}).ok());
  absl::Status s =
      ElasticGang::Join(Options(1, 1, 2, false), Agent(1)).status();
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_THAT(s.message(),
              HasSubstr("worker:1 is not a member of elastic generation 0: "
                        "worker:0"));
}

// Anyone with the job token can write the store: a generation that is not a
// set of the job's tasks is refused, not formed.
TEST_F(ElasticGangTest, AForeignGenerationIsRefused) {
  ASSERT_TRUE(
      coord::WriteInitialMembership(store_, {"worker:0", "worker:1"}).ok());
  ASSERT_TRUE(cluster_->service()
                  ->InsertKeyValue(coord::GenerationKey(1),
                                   "worker:0,worker:0,worker:7", false)
                  .ok());
  absl::Status s = ElasticGang::Join(Options(0, 1, 2, true), Agent(0)).status();
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_THAT(s.message(),
              HasSubstr("is not a set of the job's tasks (generation 0: "
                        "worker:0, worker:1)"));
}

// A replacement whose job trained to its end meanwhile learns it instead of
// waiting for members that will never come.
TEST_F(ElasticGangTest, AReplacementAfterTheEndFindsTheJobFinished) {
  ASSERT_TRUE(
      coord::WriteInitialMembership(store_, {"worker:0", "worker:1"}).ok());
  ASSERT_TRUE(cluster_->service()
                  ->InsertKeyValue("cohort/elastic/finished", "1", true)
                  .ok());
  absl::StatusOr<std::unique_ptr<ElasticGang>> gang =
      ElasticGang::Join(Options(1, 1, 2, true), Agent(1));
  ASSERT_TRUE(gang.ok()) << gang.status();
  EXPECT_TRUE((*gang)->job_finished());
}

}  // namespace
}  // namespace cohort::training
