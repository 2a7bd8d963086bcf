// Simulated tasks for `cohort bench coord`'s scale measurement: one process
// speaks for many tasks of a job, making exactly the calls each task's
// CoordinationAgent makes (RegisterTask, the parked PollForError, Barrier,
// a Heartbeat every interval) but without an agent's two threads per task,
// which 16,384 tasks cannot have here (pid_max is 32,768 on this machine).
// Every call is asynchronous on the process's one client connection.
//
//   SimulatedTasksOptions options;
//   options.target = server.framed_target();
//   options.first_task = 0; options.num_tasks = 1024;
//   auto done = RunSimulatedTasks(options, [](int64_t passed_ns) { ... });
//
// Thread safety: RunSimulatedTasks is reentrant; it blocks its caller.
#ifndef COHORT_BENCH_COORD_SIMULATED_TASKS_H_
#define COHORT_BENCH_COORD_SIMULATED_TASKS_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cohort/rpc/transport.h"

namespace cohort::bench {

struct SimulatedTasksOptions {
  std::string target;  // "framed:host:port" or a gRPC "host:port"
  rpc::TransportSecurity security;
  std::string job = "worker";
  int first_task = 0;
  int num_tasks = 0;
  // Each task heartbeats this often, the beats of all tasks spread evenly.
  absl::Duration heartbeat_interval = absl::Seconds(10);
  // How long the tasks keep heartbeating after all passed the barrier.
  absl::Duration hold = absl::ZeroDuration();
  std::string barrier = "all";
  // For registration and the barrier together.
  absl::Duration timeout = absl::Seconds(120);
};

struct SimulatedTasksResult {
  int64_t passed_ns = 0;  // CLOCK_MONOTONIC: the last task past the barrier
  int64_t heartbeats = 0;
};

// Registers every task, parks its error poll, sends it to the barrier and
// heartbeats all of them; calls `on_passed` (on the caller's thread) once
// all passed, then heartbeats for `hold`. Errors: the first failed call,
// naming the task (a refused heartbeat included: the service declared the
// task dead), or DeadlineExceeded naming how many tasks had not passed.
absl::StatusOr<SimulatedTasksResult> RunSimulatedTasks(
    const SimulatedTasksOptions& options,
    const std::function<void(int64_t passed_ns)>& on_passed);

}  // namespace cohort::bench

#endif  // COHORT_BENCH_COORD_SIMULATED_TASKS_H_
