// Subprocess (subprocess.h): what the program sees (its argv, exactly the
// given environment, one pipe for its output), how spawning fails, and that
// the program never outlives the thread that started it.
#include "cohort/base/subprocess.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <optional>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort {
namespace {

using ::testing::HasSubstr;

std::string TempPath(const std::string& name) {
  return absl::StrCat(::testing::TempDir(), "/process_test.", getpid(), ".",
                      name);
}

TEST(SubprocessTest, RunsWithArgvExactEnvironmentAndOnePipe) {
  auto p = Subprocess::Spawn(
      {"sh", "-c", "echo out $1 $COHORT_X; echo err >&2; exit 3", "sh", "arg"},
      {"COHORT_X=x", "PATH=/usr/bin:/bin"});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ((*p)->ReadOutputToEnd(), "out arg x\nerr\n");
  const ExitInfo exit = (*p)->Wait();
  EXPECT_FALSE(exit.signaled);
  EXPECT_EQ(exit.value, 3);
}

TEST(SubprocessTest, EnvironmentIsExactlyTheOneGiven) {
  auto p = Subprocess::Spawn({"/usr/bin/env"}, {"ONLY=1"});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ((*p)->ReadOutputToEnd(), "ONLY=1\n");
  EXPECT_TRUE((*p)->Wait().ok());
}

TEST(SubprocessTest, MissingProgramIsNotFoundAndNamed) {
  for (const std::string& name :
       {std::string("/nonexistent/cohort-program"),
        std::string("cohort-no-such-program-in-path")}) {
    auto p = Subprocess::Spawn({name}, {});
    EXPECT_EQ(p.status().code(), absl::StatusCode::kNotFound) << p.status();
    EXPECT_THAT(p.status().message(), HasSubstr(name));
    EXPECT_THAT(p.status().message(), HasSubstr("PATH"));
  }
}

TEST(SubprocessTest, FileThatIsNotExecutableIsPermissionDenied) {
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
  EXPECT_EQ((*p)->ReadOutputToEnd(), "script ran\n");
  EXPECT_TRUE((*p)->Wait().ok());
  unlink(path.c_str());
}

// PATH is searched as execvp does: past a directory of the program's name
// and past a file that may not run (remembered: Permission denied when
// nothing else is found).
class PathSearchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* path = getenv("PATH");
    saved_path_ = path != nullptr ? path : "";
    root_ = TempPath("path");
    // a/prog is a directory, b/prog a file that may not run, c/prog runs.
    for (const char* dir : {"/a/prog", "/b", "/c"}) {
      ASSERT_TRUE(std::filesystem::create_directories(root_ + dir)) << dir;
    }
    std::ofstream(root_ + "/b/prog") << "echo b\n";
    chmod((root_ + "/b/prog").c_str(), 0600);
    std::ofstream(root_ + "/c/prog") << "#!/bin/sh\necho c\n";
    chmod((root_ + "/c/prog").c_str(), 0700);
  }
  void TearDown() override {
    setenv("PATH", saved_path_.c_str(), 1);
    std::error_code error;
    std::filesystem::remove_all(root_, error);
    EXPECT_FALSE(error) << root_ << ": " << error.message();
  }
  std::string saved_path_;
  std::string root_;
};

TEST_F(PathSearchTest, SkipsWhatCannotRunAndFindsTheProgram) {
  setenv("PATH", absl::StrCat(root_, "/a:", root_, "/b:", root_, "/c").c_str(),
         1);
  auto p = Subprocess::Spawn({"prog"}, {});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ((*p)->ReadOutputToEnd(), "c\n");
  EXPECT_TRUE((*p)->Wait().ok());
}

TEST_F(PathSearchTest, OnlyAFileThatMayNotRunIsPermissionDenied) {
  setenv("PATH", absl::StrCat(root_, "/a:", root_, "/b").c_str(), 1);
  auto p = Subprocess::Spawn({"prog"}, {});
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInternal) << p.status();
  EXPECT_THAT(p.status().message(), HasSubstr("Permission denied"));
}

// What the program inherits: ignored signals stay ignored except the six
// that start at their defaults, handled ones are reset, nothing is blocked,
// and stdin is /dev/null.
TEST(SubprocessTest, ProgramStartsWithDefaultSignalsAndNullStdin) {
  struct sigaction ignore = {}, old_usr1, old_pipe, old_usr2;
  ignore.sa_handler = SIG_IGN;
  sigaction(SIGUSR1, &ignore, &old_usr1);
  sigaction(SIGPIPE, &ignore, &old_pipe);
  struct sigaction handled = {};
  handled.sa_handler = [](int) {};
  sigaction(SIGUSR2, &handled, &old_usr2);
  sigset_t hup, old_mask;
  sigemptyset(&hup);
  sigaddset(&hup, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &hup, &old_mask);

  // cat catches nothing of its own: its status shows what it was given.
  auto status =
      Subprocess::Spawn({"cat", "/proc/self/status"}, {"PATH=/usr/bin:/bin"});
  auto stdin_link = Subprocess::Spawn({"readlink", "/proc/self/fd/0"},
                                      {"PATH=/usr/bin:/bin"});

  pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
  sigaction(SIGUSR1, &old_usr1, nullptr);
  sigaction(SIGPIPE, &old_pipe, nullptr);
  sigaction(SIGUSR2, &old_usr2, nullptr);
  ASSERT_TRUE(status.ok()) << status.status();
  ASSERT_TRUE(stdin_link.ok()) << stdin_link.status();
  std::string signals;
  for (absl::string_view line :
       absl::StrSplit((*status)->ReadOutputToEnd(), '\n')) {
    if (absl::StartsWith(line, "SigBlk") || absl::StartsWith(line, "SigIgn") ||
        absl::StartsWith(line, "SigCgt")) {
      absl::StrAppend(&signals, line, "\n");
    }
  }
  // Bit N-1 is signal N: SIGUSR1 (10) is 0x200.
  EXPECT_EQ(signals,
            "SigBlk:\t0000000000000000\n"
            "SigIgn:\t0000000000000200\n"
            "SigCgt:\t0000000000000000\n");
  EXPECT_EQ((*stdin_link)->ReadOutputToEnd(), "/dev/null\n");
  EXPECT_TRUE((*status)->Wait().ok());
  EXPECT_TRUE((*stdin_link)->Wait().ok());
}

// Waits up to 10 s for child `pid` of this process to end; on timeout kills
// it. The wait status, or nullopt when it had to be killed.
std::optional<int> ReapWithin10s(pid_t pid) {
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  int status = 0;
  while (absl::Now() < deadline) {
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) return status;
    if (r < 0 && errno != EINTR) return std::nullopt;
    absl::SleepFor(absl::Milliseconds(5));
  }
  kill(pid, SIGKILL);
  waitpid(pid, &status, 0);
  return std::nullopt;
}

// A launcher killed outright (SIGKILL, the OOM killer) cannot stop its
// tasks; the kernel does, when the thread that spawned them goes. Here that
// thread simply returns.
TEST(SubprocessTest, ProgramDiesWithTheThreadThatSpawnedIt) {
  std::unique_ptr<Subprocess> p;
  std::thread spawner([&p] {
    auto spawned = Subprocess::Spawn({"sleep", "60"}, {"PATH=/usr/bin:/bin"});
    ASSERT_TRUE(spawned.ok()) << spawned.status();
    p = std::move(spawned).value();
  });
  spawner.join();
  ASSERT_NE(p, nullptr);
  const std::optional<int> status = ReapWithin10s(p->pid());
  ASSERT_TRUE(status.has_value()) << "sleep outlived its spawning thread";
  EXPECT_TRUE(WIFSIGNALED(*status));
  EXPECT_EQ(WTERMSIG(*status), SIGKILL);
}

// SignalGroup reaches what the program started in its group. This process
// adopts the orphaned grandchild (a subreaper), so it can wait for exactly
// that process.
TEST(SubprocessTest, SignalGroupReachesTheProgramsChildren) {
  ASSERT_EQ(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
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
  const std::optional<int> status = ReapWithin10s(grandchild);
  prctl(PR_SET_CHILD_SUBREAPER, 0);
  ASSERT_TRUE(status.has_value()) << "pid " << grandchild << " survived";
  EXPECT_EQ(WTERMSIG(*status), SIGKILL);
  unlink(pid_file.c_str());
}

// With an input pipe the program reads what is written and then end of
// file; WaitFor gives nothing while it still runs (here it cannot end
// before its input closes) and the exit after.
TEST(SubprocessTest, InputPipeFeedsStdinAndWaitForTimesOut) {
  Subprocess::SpawnOptions options;
  options.input_pipe = true;
  auto p = Subprocess::Spawn(
      {"sh", "-c", "read line; echo got $line; cat >/dev/null; echo eof"},
      {"PATH=/usr/bin:/bin"}, options);
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_GE((*p)->input_fd(), 0);
  const std::string line = "hello\n";
  ASSERT_EQ(write((*p)->input_fd(), line.data(), line.size()),
            static_cast<ssize_t>(line.size()));
  EXPECT_FALSE((*p)->WaitFor(absl::Milliseconds(20)).has_value());
  (*p)->CloseInput();
  EXPECT_EQ((*p)->input_fd(), -1);
  EXPECT_EQ((*p)->ReadOutputToEnd(), "got hello\neof\n");
  const std::optional<ExitInfo> exit = (*p)->WaitFor(absl::Seconds(30));
  ASSERT_TRUE(exit.has_value());
  EXPECT_TRUE(exit->ok());
  EXPECT_TRUE((*p)->Wait().ok());  // reaped once, reported again
}

TEST(SubprocessTest, WithoutAnInputPipeStdinIsEmpty) {
  auto p =
      Subprocess::Spawn({"sh", "-c", "cat; echo done"}, {"PATH=/usr/bin:/bin"});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ((*p)->input_fd(), -1);
  EXPECT_EQ((*p)->ReadOutputToEnd(), "done\n");
  EXPECT_TRUE((*p)->Wait().ok());
}

TEST(ExecutablePathTest, IsThisTestBinary) {
  const std::string path = ExecutablePath();
  EXPECT_TRUE(absl::EndsWith(path, "/base_test")) << path;
  EXPECT_EQ(path[0], '/') << path;
}

// RunProgram: the output of a program that exits 0, and for every other
// ending a status that names the command and says how it ended.
TEST(RunProgramTest, CollectsOutputOfASuccessfulRun) {
  RunProgramOptions options;
  options.env_overrides = {"COHORT_RUN_PROGRAM_TEST=seen"};
  ProgramRun run = RunProgram(
      {"sh", "-c", "echo out $COHORT_RUN_PROGRAM_TEST; echo err >&2"}, options);
  ASSERT_TRUE(run.status.ok()) << run.status;
  ASSERT_TRUE(run.exit.has_value());
  EXPECT_TRUE(run.exit->ok());
  EXPECT_EQ(run.output, "out seen\nerr\n");
  EXPECT_FALSE(run.truncated);

  options.stderr_to = Subprocess::Stderr::kDiscard;
  run = RunProgram({"sh", "-c", "echo out; echo err >&2"}, options);
  ASSERT_TRUE(run.status.ok()) << run.status;
  EXPECT_EQ(run.output, "out\n");
}

TEST(RunProgramTest, NonZeroExitNamesTheCommandCodeAndOutput) {
  ProgramRun run = RunProgram({"sh", "-c", "echo the reason >&2; exit 3"});
  EXPECT_EQ(run.status.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(run.status.message(), HasSubstr("`sh -c 'echo the reason >&2; "
                                              "exit 3'` exited with code 3"));
  EXPECT_THAT(run.status.message(), HasSubstr("output: the reason"));
  ASSERT_TRUE(run.exit.has_value());
  EXPECT_EQ(run.exit->ShellCode(), 3);
}

TEST(RunProgramTest, SignalNamesTheSignal) {
  ProgramRun run = RunProgram({"sh", "-c", "kill -TERM $$"});
  EXPECT_EQ(run.status.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(run.status.message(),
              HasSubstr("killed by signal 15 (SIGTERM) (no output)"));
  ASSERT_TRUE(run.exit.has_value());
  EXPECT_EQ(run.exit->ShellCode(), 128 + SIGTERM);
}

TEST(RunProgramTest, MissingProgramIsNotFoundNamingIt) {
  ProgramRun run = RunProgram({"cohort-no-such-program", "--flag"});
  EXPECT_EQ(run.status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(run.status.message(),
              HasSubstr("cannot run `cohort-no-such-program --flag`"));
  EXPECT_FALSE(run.exit.has_value());
}

// A program still running at the deadline is killed and reaped. Here a
// background sleep holds the pipe open, so no end of file ever comes: only
// the deadline ends the read. The program writes nothing, so what is
// asserted holds however far the shell got before the deadline.
TEST(RunProgramTest, DeadlineEndsAReadThatNoEndOfFileWouldEnd) {
  RunProgramOptions options;
  options.deadline = absl::Milliseconds(300);
  ProgramRun run = RunProgram({"sh", "-c", "sleep 600 & wait"}, options);
  EXPECT_EQ(run.status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(run.status.message(),
            "`sh -c 'sleep 600 & wait'` was still running after 300ms and "
            "was killed; check why it hangs (no output)");
  EXPECT_FALSE(run.exit.has_value());
  EXPECT_EQ(run.output, "");
}

// The deadline bounds the wait for the exit too: a program that closes its
// output (end of file) and keeps running is killed at the deadline, its
// group with it. Its output, all written before the end of file, is kept.
TEST(RunProgramTest, DeadlineCoversAProgramThatClosedItsOutput) {
  RunProgramOptions options;
  options.deadline = absl::Seconds(1);
  const std::string script = "echo $$; exec >&- 2>&-; exec sleep 600";
  ProgramRun run = RunProgram({"sh", "-c", script}, options);
  EXPECT_EQ(run.status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(run.status.message(),
              HasSubstr(absl::StrCat(DescribeCommand({"sh", "-c", script}),
                                     " was still running after 1s, with its "
                                     "output closed, and was killed")));
  EXPECT_FALSE(run.exit.has_value());
  // The shell's pid, which is its group's id: the group must be gone.
  int pid = 0;
  ASSERT_TRUE(absl::SimpleAtoi(absl::StripSuffix(run.output, "\n"), &pid))
      << run.output;
  ASSERT_GT(pid, 0);
  EXPECT_THAT(run.status.message(), HasSubstr(absl::StrCat("output: ", pid)));
  errno = 0;
  EXPECT_EQ(kill(-pid, 0), -1) << "process group " << pid << " survived";
  EXPECT_EQ(errno, ESRCH);
}

TEST(RunProgramTest, OutputPastTheCapIsDroppedAndFlagged) {
  RunProgramOptions options;
  options.max_output_bytes = 10;
  ProgramRun run = RunProgram({"sh", "-c", "printf 0123456789abcdef"}, options);
  ASSERT_TRUE(run.status.ok()) << run.status;
  EXPECT_EQ(run.output, "0123456789");
  EXPECT_TRUE(run.truncated);
}

TEST(DescribeCommandTest, QuotesWordsTheShellWouldSplit) {
  EXPECT_EQ(DescribeCommand({"nvidia-smi", "--list-gpus"}),
            "`nvidia-smi --list-gpus`");
  EXPECT_EQ(DescribeCommand({"sh", "-c", "a b", ""}), "`sh -c 'a b' ''`");
}

}  // namespace
}  // namespace cohort
