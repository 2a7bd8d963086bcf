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

// What a peer sent, quoted in a log line, cannot drive the terminal.
TEST(Logging, ControlCharactersAreEscaped) {
  std::vector<std::string> lines;
  captured = &lines;
  SetLogSinkForTest(&Capture);
  SetMinLogLevel(LogLevel::kInfo);
  COHORT_LOG(INFO) << "key \x1b[2J\rE1126 forged] line\x7f";
  SetLogSinkForTest(nullptr);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_THAT(lines[0], ::testing::HasSubstr(
                            "key \\x1b[2J\\x0dE1126 forged] line\\x7f\n"));
  EXPECT_EQ(lines[0].find('\x1b'), std::string::npos);
  EXPECT_EQ(lines[0].find('\r'), std::string::npos);
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
