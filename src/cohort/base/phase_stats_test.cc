#include "cohort/base/phase_stats.h"

#include "gtest/gtest.h"

namespace cohort {
namespace {

class PhaseStatsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    PhaseStats::Enable(false);
    PhaseStats::Reset();
  }
  void TearDown() override {
    PhaseStats::Enable(false);
    PhaseStats::Reset();
  }
};

TEST_F(PhaseStatsTest, DisabledRecordsNothing) {
  PhaseStats::Add(Phase::kKernelCompute, absl::Milliseconds(3), 10);
  const PhaseStats::Totals t = PhaseStats::Get(Phase::kKernelCompute);
  EXPECT_EQ(t.count, 0);
  EXPECT_EQ(t.nanos, 0);
  EXPECT_EQ(t.bytes, 0);
  EXPECT_EQ(PhaseStats::Summary(1), "");
}

TEST_F(PhaseStatsTest, EnabledSumsCountDurationAndBytesPerPhase) {
  PhaseStats::Enable(true);
  PhaseStats::Add(Phase::kRecvTensorCall, absl::Milliseconds(2), 1000);
  PhaseStats::Add(Phase::kRecvTensorCall, absl::Milliseconds(4), 3000);
  PhaseStats::Add(Phase::kServeWrite, absl::Microseconds(5));
  const PhaseStats::Totals recv = PhaseStats::Get(Phase::kRecvTensorCall);
  EXPECT_EQ(recv.count, 2);
  EXPECT_EQ(recv.nanos, 6'000'000);
  EXPECT_EQ(recv.bytes, 4000);
  EXPECT_EQ(PhaseStats::Get(Phase::kServeWrite).nanos, 5000);
  EXPECT_EQ(PhaseStats::Get(Phase::kMasterStep).count, 0);
}

TEST_F(PhaseStatsTest, SummaryIsPerStepAndListsOnlyPhasesWithEvents) {
  PhaseStats::Enable(true);
  PhaseStats::Add(Phase::kKernelCompute, absl::Milliseconds(6), 0);
  PhaseStats::Add(Phase::kKernelCompute, absl::Milliseconds(2), 0);
  const std::string s = PhaseStats::Summary(2);
  // Two events over two steps, 8 ms in all: 1/step, 4 ms/step, 4 ms each.
  EXPECT_EQ(s,
            "kernel_compute             1.00/step    4.000 ms/step    0.000 "
            "MB/step    4.000 ms each\n");
}

TEST_F(PhaseStatsTest, ResetZeroesButKeepsRecording) {
  PhaseStats::Enable(true);
  PhaseStats::Add(Phase::kRunGraph, absl::Milliseconds(1));
  PhaseStats::Reset();
  EXPECT_EQ(PhaseStats::Get(Phase::kRunGraph).count, 0);
  PhaseStats::Add(Phase::kRunGraph, absl::Milliseconds(1));
  EXPECT_EQ(PhaseStats::Get(Phase::kRunGraph).count, 1);
}

TEST(PhaseNameTest, EveryPhaseHasItsOwnName) {
  EXPECT_STREQ(PhaseName(Phase::kMasterStep), "master_step");
  EXPECT_STREQ(PhaseName(Phase::kServeWait), "serve_wait");
  EXPECT_STREQ(PhaseName(Phase::kNumPhases), "unknown");
}

}  // namespace
}  // namespace cohort
