#include "cohort/base/status.h"

#include "gtest/gtest.h"

namespace cohort {
namespace {

absl::StatusOr<int> Half(int x) {
  if (x % 2 != 0) return absl::InvalidArgumentError("odd");
  return x / 2;
}

absl::Status QuarterInto(int x, int* out) {
  COHORT_ASSIGN_OR_RETURN(int half, Half(x));
  COHORT_ASSIGN_OR_RETURN(*out, Half(half));
  return absl::OkStatus();
}

absl::Status FailIfNegative(int x) {
  COHORT_RETURN_IF_ERROR(x < 0 ? absl::OutOfRangeError("negative")
                               : absl::OkStatus());
  return absl::OkStatus();
}

TEST(StatusMacros, AssignOrReturnPassesValuesAndErrors) {
  int out = 0;
  EXPECT_TRUE(QuarterInto(8, &out).ok());
  EXPECT_EQ(out, 2);
  absl::Status odd = QuarterInto(6, &out);
  EXPECT_EQ(odd.code(), absl::StatusCode::kInvalidArgument);
}

TEST(StatusMacros, ReturnIfErrorReturnsTheError) {
  EXPECT_TRUE(FailIfNegative(1).ok());
  EXPECT_EQ(FailIfNegative(-1).code(), absl::StatusCode::kOutOfRange);
}

TEST(Annotate, PrefixesMessageAndKeepsCode) {
  absl::Status s = Annotate(absl::NotFoundError("no key"), "worker:1");
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "worker:1: no key");
  EXPECT_TRUE(Annotate(absl::OkStatus(), "x").ok());
}

TEST(StatusCodeName, RoundTrips) {
  absl::StatusCode code;
  ASSERT_TRUE(
      StatusCodeFromName(StatusCodeName(absl::StatusCode::kAborted), &code));
  EXPECT_EQ(code, absl::StatusCode::kAborted);
  ASSERT_TRUE(StatusCodeFromName("DEADLINE_EXCEEDED", &code));
  EXPECT_EQ(code, absl::StatusCode::kDeadlineExceeded);
  EXPECT_FALSE(StatusCodeFromName("bogus", &code));
}

}  // namespace
}  // namespace cohort
