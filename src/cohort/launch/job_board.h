// What a launcher knows about its job beyond the coordination service,
// kept for the job's page (docs/ui.md): each task's process (host, pid,
// restarts, log, how it ended) and each attempt's outcome with its root
// cause. The attempt supervisor writes it as tasks start and exit; the page
// reads it from its own threads.
//
//   JobBoard board;
//   plan.board = &board;                      // the supervisor records
//   Json tasks = board.TasksJson();           // the page reads
//
// Thread safety: thread-safe.
#ifndef COHORT_LAUNCH_JOB_BOARD_H_
#define COHORT_LAUNCH_JOB_BOARD_H_

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "cohort/base/json.h"

namespace cohort::launch {

class JobBoard {
 public:
  // At most this many attempts are kept (the oldest go first).
  static constexpr size_t kMaxAttempts = 100;

  void TaskStarted(const std::string& task, const std::string& host, int pid,
                   int attempt, int restart, const std::string& log_path,
                   absl::Time when);
  // `how`: "exited with code 0", "killed by signal 9 (SIGKILL)".
  void TaskExited(const std::string& task, int pid, bool ok,
                  const std::string& how, absl::Time when);
  // `outcome`: "succeeded", "failed", "stopped", "lost"; `cause`: the root
  // cause's one-line description (empty on success).
  void AttemptEnded(int attempt, const std::string& outcome,
                    const std::string& cause, absl::Time when);

  // {"task": {"host", "pid", "attempt", "restarts", "process" ("running",
  // "exited", "failed"), "exit" (how it ended; absent while running),
  // "started_unix_ms"}} for every task that started.
  Json TasksJson() const;
  // [{"attempt", "outcome" ("running" for the current one), "cause",
  // "ended_unix_ms"}], oldest first.
  Json AttemptsJson() const;
  // The task's log file. NotFound naming the task when it never started.
  absl::StatusOr<std::string> LogPath(const std::string& task) const;

 private:
  struct Attempt;
  static Attempt* AttemptEntry(std::vector<Attempt>& attempts, int attempt);
  struct Task {
    std::string host;
    int pid = 0;
    int attempt = 0;
    int restarts = 0;
    std::string process = "running";
    std::string exit;
    std::string log_path;
    absl::Time started;
  };
  struct Attempt {
    int attempt = 0;
    std::string outcome = "running";
    std::string cause;
    std::optional<absl::Time> ended;
  };
  mutable absl::Mutex mu_;
  std::map<std::string, Task> tasks_ ABSL_GUARDED_BY(mu_);
  std::vector<Attempt> attempts_ ABSL_GUARDED_BY(mu_);
};

// The last `max_lines` lines of the file at `path`, reading at most its last
// `max_bytes` (a log can be large): NotFound naming the path when missing.
absl::StatusOr<std::string> TailOfFile(const std::string& path,
                                       size_t max_lines, size_t max_bytes);

}  // namespace cohort::launch

#endif  // COHORT_LAUNCH_JOB_BOARD_H_
