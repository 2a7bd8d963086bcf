#include "cohort/cluster/resolvers/slurm_hostlist.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

std::vector<std::string> Expand(absl::string_view s) {
  auto r = ExpandHostlist(s);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : std::vector<std::string>{};
}

TEST(SlurmHostlistTest, PlainAndRanges) {
  EXPECT_THAT(Expand("n1"), ElementsAre("n1"));
  EXPECT_THAT(Expand("n[1-3]"), ElementsAre("n1", "n2", "n3"));
  EXPECT_THAT(
      Expand("n[1-2],m5,o[3-4,6,7-9]"),
      ElementsAre("n1", "n2", "m5", "o3", "o4", "o6", "o7", "o8", "o9"));
  EXPECT_THAT(Expand(""), IsEmpty());
  EXPECT_THAT(Expand("[1-2]"), ElementsAre("1", "2"));
}

TEST(SlurmHostlistTest, ZeroPaddingFollowsTheLowerBound) {
  EXPECT_THAT(
      Expand("n[0001-0003],m5,o[009-011]"),
      ElementsAre("n0001", "n0002", "n0003", "m5", "o009", "o010", "o011"));
  EXPECT_THAT(Expand("n[8-11]"), ElementsAre("n8", "n9", "n10", "n11"));
  EXPECT_THAT(Expand("n[01-10]").back(), "n10");
  EXPECT_THAT(Expand("n[007]"), ElementsAre("n007"));
}

TEST(SlurmHostlistTest, KeepsOrderAndDuplicates) {
  EXPECT_THAT(Expand("b,a,b,c[2,1,2]"),
              ElementsAre("b", "a", "b", "c2", "c1", "c2"));
}

TEST(SlurmHostlistTest, MalformedListsNameTheValueAndGrammar) {
  for (const char* bad :
       {"n[1-2]a", "r[1-2]n[1-2]", "a,,b", "a[1-2[3]]", ",a", "a,", "n[1-2",
        "n[]", "n[a-b]", "n[1-2-3]", "n]1", "n[3-1]", "n[-1]", "n[1,]"}) {
    auto r = ExpandHostlist(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(r.status().message(), HasSubstr("Invalid hostlist format"));
    EXPECT_THAT(r.status().message(), HasSubstr(bad));
    EXPECT_THAT(r.status().message(), HasSubstr("expected"));
  }
}

TEST(SlurmHostlistTest, HugeRangesAreRejectedNotExpanded) {
  auto r = ExpandHostlist("n[0-99999999999]");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("more than"));
  EXPECT_FALSE(ExpandHostlist("n[0-9999999999999999999999]").ok());
}

TEST(SlurmTasksPerNodeTest, Expands) {
  EXPECT_THAT(*ExpandTasksPerNode("3(x2),2,1"), ElementsAre(3, 3, 2, 1));
  EXPECT_THAT(*ExpandTasksPerNode("13(x10)"),
              ElementsAre(13, 13, 13, 13, 13, 13, 13, 13, 13, 13));
  EXPECT_THAT(*ExpandTasksPerNode("1"), ElementsAre(1));
  EXPECT_THAT(*ExpandTasksPerNode("2(x1),0"), ElementsAre(2, 0));
  EXPECT_THAT(*ExpandTasksPerNode("3(x0),1"), ElementsAre(1));
}

TEST(SlurmTasksPerNodeTest, MalformedListsNameTheValueAndGrammar) {
  for (const char* bad : {"abc", "", "3(x)", "3(2)", "3x2", "(x2)", "1,,2",
                          "3(x2", "-1", "3(x2)a", "99999999999999999999"}) {
    auto r = ExpandTasksPerNode(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(r.status().message(),
                HasSubstr("Invalid tasks-per-node list format"));
    EXPECT_THAT(r.status().message(), HasSubstr("C(xR)"));
  }
  EXPECT_FALSE(ExpandTasksPerNode("1(x99999999999)").ok());
}

}  // namespace
}  // namespace cohort
