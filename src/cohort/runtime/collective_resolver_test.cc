// The members' resolver against a scripted leader: a leader that is not up
// yet is asked again until the deadline.
#include "cohort/runtime/collective_resolver.h"

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "cohort/runtime/worker_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort::runtime {
namespace {

using ::testing::HasSubstr;

constexpr char kTask[] = "/job:worker/replica:0/task:0";
constexpr char kLeader[] = "/job:chief/replica:0/task:0";

// A leader whose first `unavailable` CompleteGroup calls fail as a server
// that is not listening yet would; then it forms a group of this task alone
// and echoes every set-up round.
class ScriptedLeader : public testing::UnimplementedWorker {
 public:
  explicit ScriptedLeader(int unavailable) : unavailable_(unavailable) {}

  void CompleteGroupAsync(CallOptions*, const CompleteGroupRequest* request,
                          CompleteGroupResponse* response,
                          StatusCallback done) override {
    if (calls_++ < unavailable_) {
      return done(absl::UnavailableError(
          "/job:chief/replica:0/task:0 (127.0.0.1:1) is unavailable: "
          "Connection refused"));
    }
    response->set_group_key(request->group_key());
    response->set_group_size(1);
    response->add_task(request->task());
    done(absl::OkStatus());
  }
  void CompleteInstanceAsync(CallOptions*,
                             const CompleteInstanceRequest* request,
                             CompleteInstanceResponse* response,
                             StatusCallback done) override {
    response->add_payload(request->payload());
    done(absl::OkStatus());
  }

  int calls() const { return calls_.load(); }

 private:
  const int unavailable_;
  std::atomic<int> calls_{0};
};

class OneWorkerCache : public WorkerCache {
 public:
  explicit OneWorkerCache(WorkerInterface* leader) : leader_(leader) {}
  std::vector<std::string> ListTasks() const override { return {kLeader}; }
  absl::StatusOr<WorkerInterface*> GetWorker(const std::string&) override {
    return leader_;
  }
  std::string TaskAddress(const std::string&) const override { return ""; }

 private:
  WorkerInterface* const leader_;
};

GroupResolverOptions Options(WorkerCache* cache) {
  GroupResolverOptions o;
  o.task = kTask;
  o.incarnation = 7;
  o.leader = kLeader;
  o.workers = cache;
  o.job_token = "resolver-test-token";
  return o;
}

TEST(CollectiveResolverTest, ALeaderNotUpYetIsAskedAgain) {
  ScriptedLeader leader(/*unavailable=*/3);
  OneWorkerCache cache(&leader);
  auto resolve = MakeGroupResolver(Options(&cache));
  auto group = resolve(4, 1, "auto", absl::Now() + absl::Seconds(30));
  ASSERT_TRUE(group.ok()) << group.status();
  EXPECT_EQ((*group)->size(), 1);
  EXPECT_EQ(leader.calls(), 4);
}

TEST(CollectiveResolverTest, ALeaderThatNeverComesIsNamedAtTheDeadline) {
  ScriptedLeader leader(/*unavailable=*/1 << 30);
  OneWorkerCache cache(&leader);
  auto resolve = MakeGroupResolver(Options(&cache));
  auto group = resolve(4, 1, "auto", absl::Now() + absl::Milliseconds(300));
  EXPECT_EQ(group.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(group.status().message(),
              HasSubstr("resolving collective group 4 through the group leader "
                        "/job:chief/replica:0/task:0: "
                        "/job:chief/replica:0/task:0 (127.0.0.1:1) is "
                        "unavailable"));
  EXPECT_GT(leader.calls(), 1);
}

}  // namespace
}  // namespace cohort::runtime
