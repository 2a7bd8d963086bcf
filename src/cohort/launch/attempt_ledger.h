// Where the outcome of one attempt of a launched job is recorded and read:
// its first failure (first writer wins, Spark's rule) or its success (every
// chief, worker and evaluator task exited 0). The attempt supervisor
// (attempt_supervisor.h) writes what its own tasks did and stops them when
// the verdict is in, whoever wrote it.
//
//   LocalAttemptLedger ledger(/*must_finish=*/3, [&] { events.Changed(); });
//   ledger.RecordDone(0);                   // worker:0 exited 0
//   ledger.RecordFailure(record);           // worker:1 exited 3
//   std::optional<AttemptVerdict> v = ledger.Verdict();   // the failure
//
// Two ledgers exist: LocalAttemptLedger, in memory, for `cohort launch -n N`
// where one launcher runs every task; ControlPlaneLedger, keys in the job's
// control plane, for `cohort launch --engine ...` where each launcher runs
// one task and every launcher must reach the same verdict.
//
// Thread safety: thread-safe. `changed` runs on the thread that recorded
// the verdict (or the ledger's watch thread), with no ledger lock held, and
// must not block.
#ifndef COHORT_LAUNCH_ATTEMPT_LEDGER_H_
#define COHORT_LAUNCH_ATTEMPT_LEDGER_H_

#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "cohort/coord/coordination_agent.h"

namespace cohort::launch {

// The first failure of an attempt, as every launcher reads it.
struct FailureRecord {
  std::string task;    // "worker:1"
  int job_task = 0;    // its index among the job's tasks
  std::string where;   // "pid 123" or "pid 123 on node-2"
  std::string reason;  // "exited with code 3"
  int code = 1;        // the exit code `cohort launch` returns for it
  // A launcher was interrupted (SIGINT, SIGTERM): the job stops, no retry.
  bool interrupted = false;
  absl::Time when;
  absl::Duration after_start;
  std::string log_path;
  std::vector<std::string> tail;  // the task's last output lines

  std::string Encode() const;
  // Anything in the control plane may have been written by any holder of
  // the job token: text that is not a record becomes "unreadable" (code 1),
  // and every field is bounded (`job_task` to [0, num_tasks), at most
  // `tail_lines` lines, codes outside 1..255 become 1).
  static FailureRecord Decode(const std::string& text, int num_tasks,
                              int tail_lines);
};

struct AttemptVerdict {
  bool succeeded = false;
  FailureRecord failure;  // when !succeeded
};

class AttemptLedger {
 public:
  virtual ~AttemptLedger() = default;
  // Records `record` as the attempt's failure unless it has a verdict
  // already (then OK: the first writer won). An error means it could not be
  // written: nobody may ever learn of the failure, so the caller treats the
  // ledger as lost rather than wait for a verdict that may never come.
  virtual absl::Status RecordFailure(const FailureRecord& record) = 0;
  // Records that job task `job_task`, a chief, worker or evaluator, exited
  // 0; the last of them makes the verdict "succeeded". An error means the
  // record could not be written (the caller then fails the attempt, since
  // nobody would otherwise learn that the task finished).
  virtual absl::Status RecordDone(int job_task) = 0;
  // The verdict, once any launcher of the job recorded one.
  virtual std::optional<AttemptVerdict> Verdict() = 0;
};

// In memory: one launcher runs every task of the job.
class LocalAttemptLedger : public AttemptLedger {
 public:
  LocalAttemptLedger(int must_finish, std::function<void()> changed);

  absl::Status RecordFailure(const FailureRecord& record) override;
  absl::Status RecordDone(int job_task) override;
  std::optional<AttemptVerdict> Verdict() override;

 private:
  const int must_finish_;
  const std::function<void()> changed_;
  absl::Mutex mu_;
  std::vector<int> done_ ABSL_GUARDED_BY(mu_);
  std::optional<AttemptVerdict> verdict_ ABSL_GUARDED_BY(mu_);
};

// In the job's control plane, under "cohort/launch/<attempt>/":
//   verdict      "succeeded" or a FailureRecord; written once (insert
//                without overwrite, so the first writer wins)
//   done/<k>     job task k exited 0; whoever writes the last one (and
//                lists them all) writes the "succeeded" verdict
// One thread per ledger watches the verdict key (a blocking watch, not a
// poll) and calls `changed` when it appears.
class ControlPlaneLedger : public AttemptLedger {
 public:
  struct Options {
    coord::CoordinationAgent* agent = nullptr;  // must outlive the ledger
    int attempt = 0;
    int num_tasks = 0;    // for decoding records
    int must_finish = 0;  // chief, worker and evaluator tasks
    int tail_lines = 10;
    std::function<void()> changed;
  };
  explicit ControlPlaneLedger(Options options);
  // Stops and joins the watch thread (within about a second).
  ~ControlPlaneLedger() override;

  absl::Status RecordFailure(const FailureRecord& record) override;
  absl::Status RecordDone(int job_task) override;
  std::optional<AttemptVerdict> Verdict() override;

  // The control-plane key of `name` for `attempt` ("cohort/launch/3/name").
  static std::string Key(int attempt, const std::string& name);

 private:
  void Watch();
  // Stores the verdict read from the control plane (once).
  void Learn(const std::string& value);

  const Options options_;
  absl::Mutex mu_;
  std::optional<AttemptVerdict> verdict_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread watcher_;
};

}  // namespace cohort::launch

#endif  // COHORT_LAUNCH_ATTEMPT_LEDGER_H_
