// Env: the process's view of the outside world (time, environment variables,
// files, child commands), behind an interface so tests can replace it.
//
// Every module that reads the clock, sleeps, waits with a deadline, or reads
// an environment variable takes an Env*. Env::Default() is the real one;
// FakeEnv (fake_env.h) gives tests a manual clock and an in-memory
// environment, so heartbeat and barrier timeouts run in milliseconds.
//
// Thread safety: implementations are thread-safe.
#ifndef COHORT_BASE_ENV_H_
#define COHORT_BASE_ENV_H_

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace cohort {

// How long Env::RunCommand lets a command run.
inline constexpr absl::Duration kRunCommandDeadline = absl::Seconds(30);
// The most stdout Env::RunCommand takes from a command: the tools it asks
// answer in a few lines, so more is a runaway, not an answer.
inline constexpr size_t kRunCommandMaxOutput = size_t{16} << 20;  // 16 MiB

class Env {
 public:
  virtual ~Env() = default;

  // The process-wide real environment. Never null; never destroyed.
  static Env* Default();

  // --- Time ---------------------------------------------------------------
  virtual absl::Time Now() = 0;
  // Blocks the caller for `d` of this Env's time.
  virtual void SleepFor(absl::Duration d) = 0;
  // With `mu` held, waits until `cond` holds or Now() reaches `deadline`,
  // releasing `mu` while waiting (like absl::Mutex::AwaitWithDeadline, but on
  // this Env's clock). Returns whether `cond` holds. absl::InfiniteFuture()
  // waits for `cond` alone.
  virtual bool AwaitWithDeadline(absl::Mutex* mu, const absl::Condition& cond,
                                 absl::Time deadline)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) = 0;

  // --- Environment variables ---------------------------------------------
  // nullopt when unset; an empty string when set to "".
  virtual std::optional<std::string> GetVar(absl::string_view name) = 0;
  virtual void SetVar(absl::string_view name, absl::string_view value) = 0;
  virtual void UnsetVar(absl::string_view name) = 0;

  // --- Files and commands -------------------------------------------------
  // NotFound when the file does not exist; other failures name the path.
  virtual absl::StatusOr<std::string> ReadFile(const std::string& path) = 0;
  // Runs argv[0] (searched in PATH, no shell) and returns its standard
  // output (stderr is discarded). NotFound when the program does not exist,
  // Internal when it exits non-zero or is killed, DeadlineExceeded when it
  // still runs after kRunCommandDeadline (its process group is then
  // killed), ResourceExhausted when it writes more than
  // kRunCommandMaxOutput bytes (a cut answer is never returned as a whole
  // one); each names the command.
  virtual absl::StatusOr<std::string> RunCommand(
      const std::vector<std::string>& argv) = 0;
};

}  // namespace cohort

#endif  // COHORT_BASE_ENV_H_
