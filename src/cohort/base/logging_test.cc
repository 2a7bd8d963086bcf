#include "cohort/base/logging.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort {
namespace {

std::vector<std::string>* captured = nullptr;
void Capture(LogLevel, const std::string& line) { captured->push_back(line); }

TEST(Logging, PrefixAndLevelFilter) {
  std::vector<std::string> lines;
  captured = &lines;
  SetLogSinkForTest(&Capture);
  SetLogTaskPrefix("worker:1");
  SetMinLogLevel(LogLevel::kInfo);
  COHORT_LOG(DEBUG) << "hidden";
  COHORT_LOG(INFO) << "shown " << 42;
  SetLogSinkForTest(nullptr);
  SetLogTaskPrefix("");
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_THAT(lines[0], ::testing::StartsWith("I"));
  EXPECT_THAT(lines[0], ::testing::HasSubstr(" worker:1] shown 42\n"));
}

TEST(Logging, ParseLogLevel) {
  LogLevel level;
  ASSERT_TRUE(ParseLogLevel("WARNING", &level));
  EXPECT_EQ(level, LogLevel::kWarning);
  EXPECT_FALSE(ParseLogLevel("loud", &level));
}

TEST(LoggingDeathTest, CheckAborts) {
  EXPECT_DEATH(COHORT_CHECK(1 + 1 == 3) << "math",
               "Check failed: 1 \\+ 1 == 3 math");
}

}  // namespace
}  // namespace cohort
