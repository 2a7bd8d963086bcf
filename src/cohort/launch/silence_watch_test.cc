#include "cohort/launch/silence_watch.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "cohort/base/fake_env.h"
#include "cohort/coord/callback_slot_testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort::launch {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

const coord::TaskId kL0{"launcher", 0};
const coord::TaskId kL1{"launcher", 1};

class SilenceWatchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    coord::CoordinationServiceOptions options;
    options.jobs = {{"launcher", 2}};
    // The service itself declares a task lost only at silent + grace.
    options.heartbeat_timeout = absl::Seconds(70);
    options.env = &env_;
    auto service = coord::CoordinationService::Create(options);
    ASSERT_TRUE(service.ok()) << service.status();
    service_ = std::move(*service);
    for (const coord::TaskId& t : {kL0, kL1}) {
      coord::Slot<absl::StatusOr<uint64_t>> slot;
      service_->RegisterTaskAsync(t, t.index + 1, slot.Callback());
      ASSERT_TRUE(slot.Wait().ok());
    }
    watch_ = std::make_unique<SilenceWatch>(
        &env_,
        std::vector<SilenceWatch::Watched>{
            {service_.get(),
             {{kL0, "launcher:0 on 10.77.0.1"},
              {kL1, "launcher:1 on 10.77.0.2"}}}},
        absl::Seconds(10), absl::Seconds(70), [this](const std::string& l) {
          absl::MutexLock lock(&mu_);
          lines_.push_back(l);
        });
  }

  std::vector<std::string> Lines() {
    absl::MutexLock lock(&mu_);
    std::vector<std::string> out = std::move(lines_);
    lines_.clear();
    return out;
  }
  void Beat(const coord::TaskId& t) {
    ASSERT_TRUE(service_->Heartbeat(t, t.index + 1, 0).ok());
  }

  FakeEnv env_;
  std::unique_ptr<coord::CoordinationService> service_;
  // Before the watch: its thread's callback uses them until it is joined.
  absl::Mutex mu_;
  std::vector<std::string> lines_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<SilenceWatch> watch_;
};

TEST_F(SilenceWatchTest, NamesASilentTaskOnceWithItsHostAndWhenItIsLost) {
  env_.AdvanceTime(absl::Seconds(9));
  Beat(kL0);
  watch_->Check();
  EXPECT_THAT(Lines(), IsEmpty());  // 9 s of silence is not yet silent
  env_.AdvanceTime(absl::Seconds(1));
  Beat(kL0);
  watch_->Check();
  std::vector<std::string> lines = Lines();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_THAT(lines[0], HasSubstr("launcher:1 on 10.77.0.2 has sent no "
                                  "heartbeat for 10s"));
  EXPECT_THAT(lines[0], HasSubstr("declared lost 1m10s after its last"));
  env_.AdvanceTime(absl::Seconds(5));
  Beat(kL0);
  watch_->Check();
  EXPECT_THAT(Lines(), IsEmpty());  // named once, not every check
}

TEST_F(SilenceWatchTest, NamesATaskHeardFromAgainWithTheLengthOfItsSilence) {
  env_.AdvanceTime(absl::Seconds(12));
  Beat(kL0);
  watch_->Check();
  ASSERT_EQ(Lines().size(), 1u);
  env_.AdvanceTime(absl::Seconds(11));  // healed 23 s after its last beat
  Beat(kL0);
  Beat(kL1);
  watch_->Check();
  EXPECT_THAT(Lines(), ElementsAre("launcher:1 on 10.77.0.2 is heard from "
                                   "again after 23s of silence"));
  // Silent again later: named again.
  env_.AdvanceTime(absl::Seconds(10));
  Beat(kL0);
  watch_->Check();
  EXPECT_THAT(Lines(), ElementsAre(HasSubstr("launcher:1 on 10.77.0.2 has "
                                             "sent no heartbeat for 10s")));
}

TEST_F(SilenceWatchTest, ATaskDeclaredLostIsLeftToTheServicesError) {
  env_.AdvanceTime(absl::Seconds(10));
  Beat(kL0);
  watch_->Check();
  ASSERT_EQ(Lines().size(), 1u);
  // Declared lost (here: it reported its own failure), launcher:1 is in
  // ERROR: the service's error names it; the watch adds no "heard from
  // again".
  ASSERT_TRUE(service_
                  ->ReportErrorToService(
                      kL1, absl::UnavailableError("lost its host"), 2)
                  .ok());
  watch_->Check();
  EXPECT_THAT(Lines(), IsEmpty());
}

TEST_F(SilenceWatchTest, ItsThreadChecksOnTheInjectedClock) {
  const absl::Time t0 = env_.Now();
  watch_->Start();
  // The thread checks every second of fake time (silent_after / 4, at most
  // 1 s); the clock moves only once it is parked, so each check sees the
  // time the test set.
  for (int i = 1; i <= 10; ++i) {
    env_.BlockUntilAwaiting(t0 + absl::Seconds(i));
    EXPECT_THAT(Lines(), IsEmpty()) << "after " << i - 1 << " s";
    env_.AdvanceTime(absl::Seconds(1));
    Beat(kL0);
  }
  env_.BlockUntilAwaiting(t0 + absl::Seconds(11));  // checked at 10 s
  EXPECT_THAT(Lines(), ElementsAre(HasSubstr("launcher:1 on 10.77.0.2 has "
                                             "sent no heartbeat for 10s")));
}

}  // namespace
}  // namespace cohort::launch
