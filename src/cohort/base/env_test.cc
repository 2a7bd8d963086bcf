#include "cohort/base/env.h"

#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "cohort/base/fake_env.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort {
namespace {

TEST(RealEnv, VariablesRoundTrip) {
  Env* env = Env::Default();
  env->SetVar("COHORT_ENV_TEST_VAR", "value");
  EXPECT_EQ(env->GetVar("COHORT_ENV_TEST_VAR"), "value");
  env->SetVar("COHORT_ENV_TEST_VAR", "");
  EXPECT_EQ(env->GetVar("COHORT_ENV_TEST_VAR"), "");
  env->UnsetVar("COHORT_ENV_TEST_VAR");
  EXPECT_EQ(env->GetVar("COHORT_ENV_TEST_VAR"), std::nullopt);
}

TEST(RealEnv, ReadMissingFileIsNotFound) {
  auto contents = Env::Default()->ReadFile("/nonexistent/cohort/file");
  EXPECT_EQ(contents.status().code(), absl::StatusCode::kNotFound);
}

TEST(RealEnv, RunCommandCapturesOutputAndMissingProgram) {
  auto out = Env::Default()->RunCommand({"echo", "it's"});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, "it's\n");
  auto missing = Env::Default()->RunCommand({"cohort-no-such-program"});
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(),
              testing::HasSubstr("cohort-no-such-program"));
}

// Only stdout is the answer; a failure names the command and its exit.
TEST(RealEnv, RunCommandDropsStderrAndNamesAFailedCommand) {
  auto out =
      Env::Default()->RunCommand({"sh", "-c", "echo out; echo warn >&2"});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, "out\n");
  auto failed = Env::Default()->RunCommand({"sh", "-c", "exit 4"});
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(failed.status().message(),
              testing::HasSubstr("`sh -c 'exit 4'` exited with code 4"));
}

// An answer is all of stdout or an error: exactly the cap is an answer,
// one byte more is ResourceExhausted naming the command and the cap (a GPU
// list cut short must not parse as a shorter one).
TEST(RealEnv, RunCommandOutputPastTheCapIsAnError) {
  const std::string cap = absl::StrCat(kRunCommandMaxOutput);
  auto whole = Env::Default()->RunCommand({"head", "-c", cap, "/dev/zero"});
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_EQ(whole->size(), kRunCommandMaxOutput);
  const std::string over = absl::StrCat(kRunCommandMaxOutput + 1);
  auto cut = Env::Default()->RunCommand({"head", "-c", over, "/dev/zero"});
  EXPECT_EQ(cut.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(cut.status().message(),
              testing::HasSubstr(absl::StrCat("`head -c ", over,
                                              " /dev/zero` wrote more than ",
                                              cap, " bytes to stdout")));
}

TEST(FakeEnv, SleepForWaitsForAdvance) {
  FakeEnv env;
  absl::Notification woke;
  std::thread sleeper([&] {
    env.SleepFor(absl::Seconds(10));
    woke.Notify();
  });
  env.BlockUntilSleepers(1);
  env.AdvanceTime(absl::Seconds(5));
  EXPECT_FALSE(woke.WaitForNotificationWithTimeout(absl::Milliseconds(20)));
  env.AdvanceTime(absl::Seconds(5));
  EXPECT_TRUE(woke.WaitForNotificationWithTimeout(absl::Seconds(10)));
  sleeper.join();
}

TEST(FakeEnv, AwaitWithDeadlineTimesOutOnFakeClock) {
  FakeEnv env;
  absl::Mutex mu;
  bool flag = false;
  const absl::Time deadline = env.Now() + absl::Seconds(30);
  std::thread advancer([&] { env.AdvanceTime(absl::Seconds(31)); });
  bool result;
  {
    absl::MutexLock lock(&mu);
    result = env.AwaitWithDeadline(&mu, absl::Condition(&flag), deadline);
  }
  advancer.join();
  EXPECT_FALSE(result);
}

TEST(FakeEnv, AwaitWithDeadlineWakesOnCondition) {
  FakeEnv env;
  absl::Mutex mu;
  bool flag = false;
  std::thread setter([&] {
    absl::MutexLock lock(&mu);
    flag = true;
  });
  absl::MutexLock lock(&mu);
  EXPECT_TRUE(env.AwaitWithDeadline(&mu, absl::Condition(&flag),
                                    env.Now() + absl::Seconds(1)));
  setter.join();
}

TEST(FakeEnv, EnvironmentAndCommandsAreInMemory) {
  FakeEnv env;
  EXPECT_EQ(env.GetVar("HOME"), std::nullopt);
  env.SetVar("X", "1");
  EXPECT_EQ(env.GetVar("X"), "1");
  env.SetCommandOutput("nvidia-smi", std::string("GPU 0: A\n"));
  EXPECT_EQ(*env.RunCommand({"nvidia-smi", "--list-gpus"}), "GPU 0: A\n");
  EXPECT_EQ(env.RunCommand({"other"}).status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace cohort
