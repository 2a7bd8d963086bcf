// FakeEnv: an Env for tests with a manual clock, an in-memory environment,
// in-memory files and scripted command output.
//
//   FakeEnv env;                          // time starts at a fixed instant
//   env.SetVar("TF_CONFIG", "{...}");
//   env.AdvanceTime(absl::Seconds(11));   // wakes sleepers and waiters
//
// SleepFor blocks until another thread advances the clock far enough.
// AwaitWithDeadline wakes when its condition holds (re-checked each
// millisecond of real time) or when the fake clock passes the deadline.
//
// Thread safety: thread-safe.
#ifndef COHORT_BASE_FAKE_ENV_H_
#define COHORT_BASE_FAKE_ENV_H_

#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "cohort/base/env.h"

namespace cohort {

class FakeEnv : public Env {
 public:
  FakeEnv();

  void AdvanceTime(absl::Duration d);
  void SetTime(absl::Time t);
  // Blocks until at least `n` threads are inside SleepFor, so a test can
  // advance the clock knowing where the sleepers' wake-up times lie.
  void BlockUntilSleepers(int n);
  // Blocks until some thread is parked in AwaitWithDeadline with exactly
  // `deadline`, so a test advances the clock only once the code under test
  // waits on it.
  void BlockUntilAwaiting(absl::Time deadline);
  // Waits (at most `limit` of real time) until at least `n` threads are
  // parked on the fake clock: inside SleepFor or AwaitWithDeadline with a
  // wake-up time still in the future. A thread whose time has come counts
  // again only once it parks anew, so a test that advances the clock after
  // this call knows the code under test has reacted to the previous step.
  // False on the real-time limit.
  bool BlockUntilParked(int n, absl::Duration limit = absl::Seconds(10));

  void SetFile(const std::string& path, std::string contents);
  // Scripts the output of RunCommand for a program (argv[0]). A non-OK
  // status is returned as is.
  void SetCommandOutput(const std::string& program,
                        absl::StatusOr<std::string> output);

  absl::Time Now() override;
  void SleepFor(absl::Duration d) override;
  bool AwaitWithDeadline(absl::Mutex* mu, const absl::Condition& cond,
                         absl::Time deadline) override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  std::optional<std::string> GetVar(absl::string_view name) override;
  void SetVar(absl::string_view name, absl::string_view value) override;
  void UnsetVar(absl::string_view name) override;
  absl::StatusOr<std::string> ReadFile(const std::string& path) override;
  absl::StatusOr<std::string> RunCommand(
      const std::vector<std::string>& argv) override;

 private:
  absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_);
  int sleepers_ ABSL_GUARDED_BY(mu_) = 0;
  // Wake-up times of the threads inside SleepFor.
  std::multiset<absl::Time> sleep_until_ ABSL_GUARDED_BY(mu_);
  // Deadlines of the threads inside AwaitWithDeadline.
  std::multiset<absl::Time> await_deadlines_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::string, std::less<>> vars_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::string> files_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, absl::StatusOr<std::string>> commands_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace cohort

#endif  // COHORT_BASE_FAKE_ENV_H_
