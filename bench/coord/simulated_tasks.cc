#include "bench/coord/simulated_tasks.h"

#include <time.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "cohort/base/status.h"
#include "cohort/coord/coordination_rpc_handler.h"
#include "cohort/coord/framed_coordination.h"

namespace cohort::bench {
namespace {

using coord::BarrierRequest;
using coord::BarrierResponse;
using coord::CallOptions;
using coord::CoordinatedTask;
using coord::CoordinationClient;
using coord::HeartbeatRequest;
using coord::HeartbeatResponse;
using coord::PollForErrorRequest;
using coord::PollForErrorResponse;
using coord::RegisterTaskRequest;
using coord::RegisterTaskResponse;

int64_t MonoNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// Runs one asynchronous call with a response that lives as long as the call;
// `then(status, response)` runs on the client's completion thread.
template <typename Request, typename Response, typename Then>
void Async(CoordinationClient& client,
           void (CoordinationClient::*method)(const Request&, Response*,
                                              const CallOptions&,
                                              coord::StatusCallback),
           const Request& request, absl::Duration timeout, Then then) {
  auto response = std::make_shared<Response>();
  CallOptions options;
  options.timeout = timeout;
  options.wait_for_ready = true;
  (client.*method)(request, response.get(), options,
                   [response, then = std::move(then)](absl::Status s) mutable {
                     then(s, *response);
                   });
}

// What the tasks of this process have done so far.
class Progress {
 public:
  explicit Progress(int tasks) : left_(tasks) {}

  void Passed() {
    absl::MutexLock lock(&mu_);
    passed_ns_ = std::max(passed_ns_, MonoNs());
    --left_;
  }
  void Failed(absl::Status s) {
    absl::MutexLock lock(&mu_);
    if (error_.ok()) error_ = std::move(s);
  }
  // Until every task passed, an error, or `deadline`.
  absl::StatusOr<int64_t> Wait(absl::Time deadline, int tasks) {
    absl::MutexLock lock(&mu_);
    auto done = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      return left_ == 0 || !error_.ok();
    };
    mu_.AwaitWithDeadline(absl::Condition(&done), deadline);
    if (!error_.ok()) return error_;
    if (left_ > 0) {
      return absl::DeadlineExceededError(
          absl::StrCat(left_, " of ", tasks,
                       " simulated tasks had not passed the barrier in time"));
    }
    return passed_ns_;
  }
  absl::Status error() {
    absl::MutexLock lock(&mu_);
    return error_;
  }

 private:
  absl::Mutex mu_;
  int left_ ABSL_GUARDED_BY(mu_);
  int64_t passed_ns_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
};

struct Task {
  CoordinatedTask proto;
  uint64_t incarnation = 0;
  std::atomic<uint64_t> service_incarnation{0};  // 0: not registered yet
};

}  // namespace

absl::StatusOr<SimulatedTasksResult> RunSimulatedTasks(
    const SimulatedTasksOptions& options,
    const std::function<void(int64_t passed_ns)>& on_passed) {
  const int n = options.num_tasks;
  // Declared before the client, so that they outlive it: destroying the
  // client ends the calls in flight, whose callbacks use them.
  std::vector<Task> tasks(n);
  auto progress = std::make_shared<Progress>(n);
  std::atomic<int64_t> beats{0};
  COHORT_ASSIGN_OR_RETURN(
      std::unique_ptr<CoordinationClient> owned_client,
      coord::NewCoordinationClient(options.target, options.security));
  CoordinationClient* client = owned_client.get();
  const absl::Time deadline = absl::Now() + options.timeout;
  for (int i = 0; i < n; ++i) {
    Task& task = tasks[i];
    task.proto =
        coord::ToProto(coord::TaskId{options.job, options.first_task + i});
    task.incarnation = (uint64_t{0x5eed} << 32) + options.first_task + i;
    RegisterTaskRequest reg;
    *reg.mutable_source_task() = task.proto;
    reg.set_incarnation(task.incarnation);
    Async(*client, &CoordinationClient::RegisterTaskAsync, reg, options.timeout,
          [client, &task, progress, &options](const absl::Status& s,
                                              const RegisterTaskResponse& r) {
            if (!s.ok()) {
              progress->Failed(Annotate(
                  s, absl::StrCat("registering task ", task.proto.job_name(),
                                  ":", task.proto.task_id())));
              return;
            }
            task.service_incarnation.store(r.service_incarnation());
            // The agent's error poll stays parked for the whole run.
            PollForErrorRequest poll;
            *poll.mutable_source_task() = task.proto;
            poll.set_incarnation(task.incarnation);
            poll.set_service_incarnation(r.service_incarnation());
            Async(*client, &CoordinationClient::PollForErrorAsync, poll,
                  absl::InfiniteDuration(),
                  [](const absl::Status&, const PollForErrorResponse&) {});
            BarrierRequest barrier;
            barrier.set_barrier_id(options.barrier);
            barrier.set_timeout_ms(absl::ToInt64Milliseconds(options.timeout));
            *barrier.mutable_source_task() = task.proto;
            Async(*client, &CoordinationClient::BarrierAsync, barrier,
                  options.timeout + absl::Seconds(5),
                  [&task, progress](const absl::Status& s,
                                    const BarrierResponse&) {
                    if (s.ok()) {
                      progress->Passed();
                    } else {
                      progress->Failed(Annotate(
                          s, absl::StrCat("task ", task.proto.job_name(), ":",
                                          task.proto.task_id(),
                                          " at the barrier")));
                    }
                  });
          });
  }

  // Heartbeats, paced so that each registered task beats once per interval
  // (the beats of all tasks spread over it), from the start.
  SimulatedTasksResult result;
  constexpr absl::Duration kTick = absl::Milliseconds(20);
  const double per_tick = static_cast<double>(n) *
                          absl::FDivDuration(kTick, options.heartbeat_interval);
  double owed = 0;
  int next = 0;
  absl::Time hold_until = absl::InfiniteFuture();
  bool passed = false;
  for (absl::Time tick = absl::Now();; tick += kTick) {
    if (!passed) {
      absl::StatusOr<int64_t> at = progress->Wait(std::min(tick, deadline), n);
      if (at.ok()) {
        passed = true;
        result.passed_ns = *at;
        on_passed(*at);
        hold_until = absl::Now() + options.hold;
      } else if (!absl::IsDeadlineExceeded(at.status()) ||
                 absl::Now() >= deadline) {
        return at.status();
      }
    } else {
      COHORT_RETURN_IF_ERROR(progress->error());
      if (absl::Now() >= hold_until) break;
      absl::SleepFor(tick - absl::Now());
    }
    for (owed += per_tick; owed >= 1; owed -= 1) {
      Task& task = tasks[next];
      next = (next + 1) % n;
      const uint64_t service = task.service_incarnation.load();
      if (service == 0) continue;  // not registered yet
      HeartbeatRequest beat;
      *beat.mutable_source_task() = task.proto;
      beat.set_incarnation(task.incarnation);
      beat.set_service_incarnation(service);
      Async(*client, &CoordinationClient::HeartbeatAsync, beat,
            options.heartbeat_interval,
            [&beats, &task, progress](const absl::Status& s,
                                      const HeartbeatResponse&) {
              if (s.ok()) {
                beats.fetch_add(1);
                return;
              }
              progress->Failed(Annotate(
                  s, absl::StrCat("heartbeat of task ", task.proto.job_name(),
                                  ":", task.proto.task_id())));
            });
    }
  }
  result.heartbeats = beats.load();
  return result;
}

}  // namespace cohort::bench
