// FlagReader (flags.h): both flag spellings, each reader's checks, and
// errors that name the flag and the value given.
#include "bench/common/flags.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort::bench {
namespace {

using ::testing::ElementsAre;

struct Parsed {
  int reps = 3;
  double seconds = 1;
  bool quick = false;
  std::vector<int> sizes;
  std::string transport;
  std::set<std::string> only;
};

// The reading loop of a suite.
std::string Parse(std::vector<std::string> args, Parsed& p) {
  FlagReader flags(std::move(args), "flags: --reps N");
  while (flags.Next()) {
    if (flags.Is("--reps")) {
      flags.PositiveInt(p.reps);
    } else if (flags.Is("--seconds")) {
      flags.PositiveNumber(p.seconds);
    } else if (flags.Is("--quick")) {
      flags.Switch(p.quick);
    } else if (flags.Is("--sizes")) {
      flags.PositiveIntList(p.sizes);
    } else if (flags.Is("--transport")) {
      flags.OneOf({"shm", "tcp"}, p.transport);
    } else if (flags.Is("--only")) {
      flags.SubsetOf({"rtt", "barrier"}, p.only);
    } else {
      flags.Unknown();
    }
  }
  return flags.error();
}

TEST(FlagReaderTest, ReadsBothSpellingsInOrder) {
  Parsed p;
  EXPECT_EQ(
      Parse({"--reps", "5", "--seconds=0.5", "--quick", "--sizes", "2,8,32",
             "--transport=tcp", "--only", "barrier,rtt", "--reps=7"},
            p),
      "");
  EXPECT_EQ(p.reps, 7);  // the last one given
  EXPECT_EQ(p.seconds, 0.5);
  EXPECT_TRUE(p.quick);
  EXPECT_THAT(p.sizes, ElementsAre(2, 8, 32));
  EXPECT_EQ(p.transport, "tcp");
  EXPECT_EQ(p.only, (std::set<std::string>{"barrier", "rtt"}));
}

TEST(FlagReaderTest, ErrorsNameTheFlagAndTheValue) {
  struct Case {
    std::vector<std::string> args;
    std::string error;
  };
  for (const Case& c : std::vector<Case>{
           {{"--reps", "0"}, "--reps must be a positive integer, got \"0\""},
           {{"--reps=x"}, "--reps must be a positive integer, got \"x\""},
           {{"--reps"}, "--reps needs a value"},
           {{"--seconds", "-1"},
            "--seconds must be a positive number, got \"-1\""},
           {{"--sizes", "2,,x"},
            "--sizes must be positive integers separated by commas, got "
            "\"2,,x\""},
           {{"--sizes", ","},
            "--sizes must be positive integers separated by commas, got "
            "\",\""},
           {{"--transport", "udp"},
            "--transport is one of shm, tcp, got \"udp\""},
           {{"--only", "rtt,transfer"},
            "--only takes some of rtt,barrier separated by commas, got "
            "\"rtt,transfer\""},
           {{"--quick=1"}, "--quick takes no value"},
           {{"--bogus", "1"}, "unknown flag \"--bogus\"; flags: --reps N"},
       }) {
    Parsed p;
    EXPECT_EQ(Parse(c.args, p), c.error) << c.args[0];
  }
}

TEST(FlagReaderTest, TheFirstErrorEndsTheReading) {
  Parsed p;
  EXPECT_EQ(Parse({"--reps", "0", "--bogus", "--seconds", "2"}, p),
            "--reps must be a positive integer, got \"0\"");
  EXPECT_EQ(p.seconds, 1);  // not read after the error
}

TEST(FlagReaderTest, HasLooksAnywhereAndRangesAreChecked) {
  FlagReader flags({"--a", "--quick", "--mib", "5000"}, "");
  EXPECT_TRUE(flags.Has("--quick"));
  EXPECT_FALSE(flags.Has("--slow"));
  int mib = 0;
  ASSERT_TRUE(flags.Next());
  ASSERT_TRUE(flags.Next());
  ASSERT_TRUE(flags.Next());
  EXPECT_FALSE(flags.IntInRange(4096, mib));
  EXPECT_EQ(flags.error(),
            "--mib must be an integer from 1 to 4096, got \"5000\"");
  EXPECT_FALSE(flags.Next());
}

}  // namespace
}  // namespace cohort::bench
