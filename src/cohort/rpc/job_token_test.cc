// The checks on a job token handed in by a user: strength, and the token
// file's type, owner and mode.
#include "cohort/rpc/job_token.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort::rpc {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

class JobTokenFileTest : public ::testing::Test {
 protected:
  std::string Write(const std::string& name, const std::string& text,
                    mode_t mode = 0600) {
    const std::string path = absl::StrCat(
        ::testing::TempDir(), "/job_token_test.", getpid(), ".", name);
    std::remove(path.c_str());
    FILE* f = fopen(path.c_str(), "w");
    EXPECT_NE(f, nullptr);
    fputs(text.c_str(), f);
    fclose(f);
    EXPECT_EQ(chmod(path.c_str(), mode), 0);
    made_.push_back(path);
    return path;
  }
  ~JobTokenFileTest() override {
    for (const std::string& p : made_) std::remove(p.c_str());
  }
  std::vector<std::string> made_;
};

TEST(JobTokenTest, StrengthNeedsSixteenPrintableCharacters) {
  EXPECT_TRUE(CheckJobTokenStrength("0123456789abcdef", "--token").ok());
  absl::Status weak = CheckJobTokenStrength("s3cret-tok", "--token");
  EXPECT_TRUE(absl::IsInvalidArgument(weak));
  EXPECT_THAT(weak.message(), HasSubstr("--token"));
  EXPECT_THAT(weak.message(), HasSubstr("10 characters"));
  EXPECT_THAT(weak.message(), Not(HasSubstr("s3cret-tok")));
  EXPECT_TRUE(absl::IsInvalidArgument(
      CheckJobTokenStrength("0123456789 abcdef", "--token")));
  EXPECT_TRUE(absl::IsInvalidArgument(
      CheckJobTokenStrength(std::string("0123456789abcdef\0", 17), "x")));
}

TEST_F(JobTokenFileTest, ReadsThePrivateFilesFirstLine) {
  const std::string path = Write("good", "0123456789abcdef0123\nsecond\n");
  absl::StatusOr<std::string> token = ReadJobTokenFile(path);
  ASSERT_TRUE(token.ok()) << token.status();
  EXPECT_EQ(*token, "0123456789abcdef0123");
  // Trailing white space (a CRLF file) is not part of the token.
  EXPECT_EQ(*ReadJobTokenFile(Write("crlf", "0123456789abcdef0123\r\n")),
            "0123456789abcdef0123");
}

TEST_F(JobTokenFileTest, RefusesFilesOthersCanReadOrWrite) {
  for (mode_t mode : {0644, 0640, 0604, 0620, 0602}) {
    const std::string path =
        Write(absl::StrCat("mode", mode), "0123456789abcdef0123\n", mode);
    absl::StatusOr<std::string> token = ReadJobTokenFile(path);
    EXPECT_TRUE(absl::IsPermissionDenied(token.status())) << mode;
    EXPECT_THAT(token.status().message(), HasSubstr("chmod 600 " + path));
    EXPECT_THAT(token.status().message(), Not(HasSubstr("0123456789abcdef")));
  }
}

TEST_F(JobTokenFileTest, RefusesLinksDevicesEmptyAndWeakTokens) {
  const std::string target = Write("target", "0123456789abcdef0123\n");
  const std::string link = target + ".link";
  std::remove(link.c_str());
  ASSERT_EQ(symlink(target.c_str(), link.c_str()), 0);
  made_.push_back(link);
  EXPECT_THAT(ReadJobTokenFile(link).status().message(),
              HasSubstr("symbolic link"));
  EXPECT_TRUE(absl::IsInvalidArgument(ReadJobTokenFile("/dev/zero").status()));
  EXPECT_THAT(ReadJobTokenFile(Write("empty", "\n")).status().message(),
              HasSubstr("is empty"));
  EXPECT_THAT(ReadJobTokenFile(Write("weak", "abc\n")).status().message(),
              HasSubstr("3 characters"));
  EXPECT_TRUE(absl::IsFailedPrecondition(
      ReadJobTokenFile("/nonexistent/job-token").status()));
  // A first line longer than the cap is refused, not cut to a token.
  EXPECT_THAT(ReadJobTokenFile(Write("huge", std::string(1 << 20, 'a')))
                  .status()
                  .message(),
              HasSubstr("first line of more than 4096 bytes"));
  const std::string fits(kMaxJobTokenFileBytes, 'a');
  EXPECT_EQ(*ReadJobTokenFile(Write("fits", fits + "\nmore")), fits);
  // A FIFO is refused without blocking on it.
  const std::string fifo = target + ".fifo";
  std::remove(fifo.c_str());
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  made_.push_back(fifo);
  EXPECT_THAT(ReadJobTokenFile(fifo).status().message(),
              HasSubstr("not a regular file"));
}

}  // namespace
}  // namespace cohort::rpc
