// distribute_context: the smallest program run by the distribute
// coordinator. Each worker_fn / eval_fn call prints what its task gets from
// the coordinator as one JSON line, then waits at the worker barrier twice
// and prints "barrier passed" when there is one (docs/distribute.md).
//
//   cohort launch --chief --workers 2 --ps 1 -- \
//       build/bin/distribute_context --mode independent_worker --between-graph
//   TF_CONFIG='{"cluster": {"worker": ["a:1", "b:1"]}}' \
//       build/bin/distribute_context --mode standalone_client
//
// Tasks that only serve (ps; non-chief workers in-graph) would join their
// server forever. Here they leave once the chief is done: the chief writes
// the key "distribute_context/done" to the job's coordination service and
// the serving tasks, waiting for it through their server's agent, stop
// their server. (Under `cohort launch` the ps tasks would otherwise be
// stopped by the launcher once every chief and worker exited 0.)
#include <iostream>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "cohort/base/json.h"
#include "cohort/coord/coordination_agent.h"
#include "cohort/distribute/distribute_coordinator.h"

namespace {

using cohort::distribute::CurrentWorkerContext;
using cohort::distribute::StdServer;
using cohort::distribute::Strategy;
using cohort::distribute::WorkerContext;

constexpr char kDoneKey[] = "distribute_context/done";

// In-graph replication: the parameter-server strategy's configuration with
// one client for every worker.
class InGraphStrategy : public cohort::distribute::ParameterServerStrategy {
 public:
  std::unique_ptr<Strategy> Clone() const override {
    return std::make_unique<InGraphStrategy>(*this);
  }
  bool between_graph() const override { return false; }
};

absl::Mutex output_mu;

void PrintLine(const std::string& line) {
  absl::MutexLock lock(&output_mu);
  std::cout << line << std::endl;
}

// The standard server of this task (set by the coordinator's hook).
absl::Mutex server_mu;
StdServer* server = nullptr;

StdServer* Server() {
  absl::MutexLock lock(&server_mu);
  return server;
}

// Held while this task uses its agent, and by the stopper while it stops
// the server (which destroys the agent): the chief's own stopper wakes on
// the key the chief is still writing.
absl::Mutex agent_use_mu;

// This task's agent (its server's), waiting for it to register; null
// without one. Never blocks under server_mu.
cohort::coord::CoordinationAgent* Agent() {
  StdServer* s = Server();
  if (s == nullptr) return nullptr;
  auto agent = s->WaitForCoordinationAgent(absl::Seconds(30));
  return agent.ok() ? *agent : nullptr;
}

absl::Status WorkerFn(const Strategy*) {
  const WorkerContext* c = CurrentWorkerContext();
  cohort::Json line = {
      {"task_type", c->task_type().empty() ? cohort::Json(nullptr)
                                           : cohort::Json(c->task_type())},
      {"task_id",
       c->task_id() < 0 ? cohort::Json(nullptr) : cohort::Json(c->task_id())},
      {"master_target", c->master_target()},
      {"num_workers", c->num_workers()},
      {"is_chief", c->is_chief()},
      {"distributed_mode", c->distributed_mode()},
      {"has_barrier", c->has_barrier()}};
  PrintLine(line.dump());
  {
    // The barrier uses this task's agent, which the stopper destroys with
    // the server as soon as any task writes kDoneKey (a task that finished
    // first does): keep it until the barriers returned.
    absl::MutexLock lock(&agent_use_mu);
    for (int i = 0; i < 2; ++i) {
      absl::Status s = c->WaitForOtherWorkers();
      if (!s.ok()) return s;
    }
  }
  if (c->has_barrier()) PrintLine("barrier passed");
  if (c->is_chief() && c->distributed_mode()) {
    // Tell the tasks that only serve that the job is done.
    absl::MutexLock lock(&agent_use_mu);
    if (cohort::coord::CoordinationAgent* agent = Agent()) {
      (void)agent->InsertKeyValue(kDoneKey, "1", /*allow_overwrite=*/true);
    }
  }
  return absl::OkStatus();
}

// For a task that will join its server: stops the server once the chief
// wrote kDoneKey.
void StopWhenDone() {
  cohort::coord::CoordinationAgent* agent = Agent();
  if (agent == nullptr) return;  // no coordination service: serve forever
  if (agent->GetKeyValue(kDoneKey, absl::Hours(24)).ok()) {
    absl::MutexLock lock(&agent_use_mu);
    Server()->Stop();
  }
}

int Usage(const char* argv0) {
  std::cerr << "usage: " << argv0
            << " [--mode independent_worker|standalone_client]"
               " [--between-graph|--in-graph] [--barrier-timeout SECONDS]\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode_name = "independent_worker";
  bool between_graph = true;
  double barrier_timeout = 60;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--mode" && i + 1 < argc) {
      mode_name = argv[++i];
    } else if (arg == "--between-graph") {
      between_graph = true;
    } else if (arg == "--in-graph") {
      between_graph = false;
    } else if (arg == "--barrier-timeout" && i + 1 < argc) {
      barrier_timeout = std::atof(argv[++i]);
    } else {
      return Usage(argv[0]);
    }
  }
  auto mode = cohort::distribute::ParseCoordinatorMode(mode_name);
  if (!mode.ok()) {
    std::cerr << "distribute_context: " << mode.status().message() << "\n";
    return 2;
  }
  cohort::distribute::ParameterServerStrategy between;
  InGraphStrategy in_graph;
  cohort::distribute::DistributeCoordinatorOptions options;
  options.worker_fn = WorkerFn;
  // The evaluator (`--evaluator`) prints its context the same way.
  options.eval_fn = WorkerFn;
  options.eval_strategy = &between;
  options.strategy = between_graph ? static_cast<const Strategy*>(&between)
                                   : static_cast<const Strategy*>(&in_graph);
  options.mode = *mode;
  options.barrier_timeout = absl::Seconds(barrier_timeout);
  std::thread stopper;
  options.on_std_server = [&stopper](StdServer* s) {
    {
      absl::MutexLock lock(&server_mu);
      server = s;
    }
    if (!stopper.joinable()) stopper = std::thread(StopWhenDone);
  };
  absl::Status status = RunDistributeCoordinator(options);
  if (stopper.joinable()) {
    {
      // A task that ran worker_fn does not wait for the key: unblock it.
      absl::MutexLock lock(&agent_use_mu);
      if (cohort::coord::CoordinationAgent* agent = Agent()) {
        (void)agent->InsertKeyValue(kDoneKey, "1", /*allow_overwrite=*/true);
      }
    }
    stopper.join();
  }
  if (!status.ok()) {
    std::cerr << "distribute_context: " << status << "\n";
    return 1;
  }
  return 0;
}
