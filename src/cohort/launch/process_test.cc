// Subprocess (process.h): what the program sees (its argv, exactly the
// given environment, one pipe for its output), how spawning fails, and that
// the program never outlives the thread that started it.
#include "cohort/launch/process.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort::launch {
namespace {

using ::testing::HasSubstr;

// The program's whole output, read until it closes the pipe.
std::string ReadAll(Subprocess& p) {
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = read(p.output_fd(), buf, sizeof(buf))) > 0;) {
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

std::string TempPath(const std::string& name) {
  return absl::StrCat(::testing::TempDir(), "/process_test.", getpid(), ".",
                      name);
}

TEST(SubprocessTest, RunsWithArgvExactEnvironmentAndOnePipe) {
  auto p = Subprocess::Spawn(
      {"sh", "-c", "echo out $1 $COHORT_X; echo err >&2; exit 3", "sh", "arg"},
      {"COHORT_X=x", "PATH=/usr/bin:/bin"});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(ReadAll(**p), "out arg x\nerr\n");
  const ExitInfo exit = (*p)->Wait();
  EXPECT_FALSE(exit.signaled);
  EXPECT_EQ(exit.value, 3);
}

TEST(SubprocessTest, EnvironmentIsExactlyTheOneGiven) {
  auto p = Subprocess::Spawn({"/usr/bin/env"}, {"ONLY=1"});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(ReadAll(**p), "ONLY=1\n");
  EXPECT_TRUE((*p)->Wait().ok());
}

TEST(SubprocessTest, MissingProgramIsNotFoundAndNamed) {
  for (const std::string name :
       {std::string("/nonexistent/cohort-program"),
        std::string("cohort-no-such-program-in-path")}) {
    auto p = Subprocess::Spawn({name}, {});
    EXPECT_EQ(p.status().code(), absl::StatusCode::kNotFound) << p.status();
    EXPECT_THAT(p.status().message(), HasSubstr(name));
    EXPECT_THAT(p.status().message(), HasSubstr("PATH"));
  }
}

TEST(SubprocessTest, FileThatIsNotExecutableIsAnError) {
  const std::string path = TempPath("not-executable");
  std::ofstream(path) << "echo never\n";
  chmod(path.c_str(), 0600);
  auto p = Subprocess::Spawn({path}, {});
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInternal) << p.status();
  EXPECT_THAT(p.status().message(), HasSubstr(path));
  EXPECT_THAT(p.status().message(), HasSubstr("Permission denied"));
  unlink(path.c_str());
}

TEST(SubprocessTest, ScriptWithoutInterpreterLineRunsUnderSh) {
  const std::string path = TempPath("script");
  std::ofstream(path) << "echo script $1\n";
  chmod(path.c_str(), 0700);
  auto p = Subprocess::Spawn({path, "ran"}, {});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(ReadAll(**p), "script ran\n");
  EXPECT_TRUE((*p)->Wait().ok());
  unlink(path.c_str());
}

// A launcher killed outright (SIGKILL, the OOM killer) cannot stop its
// tasks; the kernel does, when the thread that spawned them goes. Here that
// thread simply returns. A broken tie would let sleep exit 0 after 60 s.
TEST(SubprocessTest, ProgramDiesWithTheThreadThatSpawnedIt) {
  std::unique_ptr<Subprocess> p;
  std::thread spawner([&p] {
    auto spawned = Subprocess::Spawn({"sleep", "60"}, {"PATH=/usr/bin:/bin"});
    ASSERT_TRUE(spawned.ok()) << spawned.status();
    p = std::move(spawned).value();
  });
  spawner.join();
  ASSERT_NE(p, nullptr);
  const ExitInfo exit = p->Wait();
  EXPECT_TRUE(exit.signaled) << exit.Describe();
  EXPECT_EQ(exit.value, SIGKILL) << exit.Describe();
}

// SignalGroup reaches what the program started in its group.
TEST(SubprocessTest, SignalGroupReachesTheProgramsChildren) {
  const std::string pid_file = TempPath("grandchild");
  auto p = Subprocess::Spawn(
      {"sh", "-c", absl::StrCat("sleep 60 & echo $! > ", pid_file, "; wait")},
      {"PATH=/usr/bin:/bin"});
  ASSERT_TRUE(p.ok()) << p.status();
  int grandchild = 0;
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (grandchild == 0 && absl::Now() < deadline) {
    std::ifstream in(pid_file);
    if (!(in >> grandchild)) absl::SleepFor(absl::Milliseconds(5));
  }
  ASSERT_GT(grandchild, 0) << "the shell never wrote " << pid_file;
  (*p)->SignalGroup(SIGKILL);
  EXPECT_EQ((*p)->Wait().value, SIGKILL);
  // The orphaned sleep is reparented and reaped (or left a zombie): either
  // way it no longer runs.
  auto running = [grandchild] {
    std::ifstream stat(absl::StrCat("/proc/", grandchild, "/stat"));
    std::string pid, comm, state;
    return static_cast<bool>(stat >> pid >> comm >> state) && state != "Z";
  };
  const absl::Time gone_by = absl::Now() + absl::Seconds(10);
  while (running() && absl::Now() < gone_by)
    absl::SleepFor(absl::Milliseconds(5));
  EXPECT_FALSE(running()) << "pid " << grandchild << " survived";
  unlink(pid_file.c_str());
}

}  // namespace
}  // namespace cohort::launch
