// One running task of a launched job: the child process (process.h), a
// thread that copies its output to a sink and a log file and keeps its last
// lines for a failure summary, and a thread that waits for its exit.
//
//   TaskProcess::Options o;
//   o.spec = {"worker", 1};
//   o.command = {"./train"};
//   o.env = EnvironmentWith(TaskEnvironment(...));
//   o.log_path = "/tmp/logs/worker-1.attempt-0.log";
//   o.output = [](const std::string& line) { ... };   // "[worker:1] ..."
//   o.on_exit = [](ExitInfo exit, absl::Time when) { ... };
//   auto task = TaskProcess::Start(env, std::move(o));
//   ...
//   (*task)->SignalGroup(SIGTERM);
//   (*task)->Finish(env->Now() + absl::Seconds(2));
//
// Thread safety: SignalGroup() and Tail() may be called from any thread;
// Finish() once, from the owner. `output` and `on_exit` run on the task's
// threads.
#ifndef COHORT_LAUNCH_TASK_PROCESS_H_
#define COHORT_LAUNCH_TASK_PROCESS_H_

#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "cohort/base/env.h"
#include "cohort/launch/job_plan.h"
#include "cohort/launch/process.h"

namespace cohort::launch {

class TaskProcess {
 public:
  struct Options {
    TaskSpec spec;
    std::vector<std::string> command;
    // The child's whole environment ("KEY=VALUE").
    std::vector<std::string> env;
    // Every output line is appended here; when the file cannot be opened the
    // output goes only to `output`, and `messages` says so.
    std::string log_path;
    // Lines kept for Tail().
    int tail_lines = 10;
    // Each output line, prefixed with "[job:index] ".
    std::function<void(const std::string&)> output;
    std::function<void(const std::string&)> messages;
    // Called once, from the waiting thread, when the process exited.
    std::function<void(ExitInfo, absl::Time)> on_exit;
  };

  // Spawns the program (errors as Subprocess::Spawn, annotated with the
  // task's name) and starts the two threads. `env` must outlive the task.
  static absl::StatusOr<std::unique_ptr<TaskProcess>> Start(Env* env,
                                                            Options options);

  // Finish()es if the owner did not.
  ~TaskProcess();
  TaskProcess(const TaskProcess&) = delete;
  TaskProcess& operator=(const TaskProcess&) = delete;

  const TaskSpec& spec() const { return options_.spec; }
  const std::string& log_path() const { return options_.log_path; }
  pid_t pid() const { return process_->pid(); }
  absl::Time started() const { return started_; }

  // Signals the task's process group. Never blocks.
  void SignalGroup(int sig) { process_->SignalGroup(sig); }

  // The last `tail_lines` output lines.
  std::vector<std::string> Tail();

  // Kills what is left of the process group, waits for the exit, then reads
  // the output until EOF or until `drain_until` (a descendant that left the
  // group can hold the pipe open). Idempotent.
  void Finish(absl::Time drain_until);

 private:
  TaskProcess(Env* env, Options options, std::unique_ptr<Subprocess> process);
  void ReadOutput();

  Env* const env_;
  const Options options_;
  const std::unique_ptr<Subprocess> process_;
  const absl::Time started_;
  // Unix nanos after which the reader stops waiting for EOF.
  std::atomic<int64_t> abandon_at_{INT64_MAX};
  std::thread reader_;
  std::thread waiter_;
  bool finished_ = false;

  absl::Mutex mu_;
  std::deque<std::string> tail_ ABSL_GUARDED_BY(mu_);
};

}  // namespace cohort::launch

#endif  // COHORT_LAUNCH_TASK_PROCESS_H_
