// Who this launcher is inside a cluster engine's job: `cohort launch
// --engine slurm|kubernetes|tf_config|auto` runs once per engine task, and
// each engine's resolver says which task this is, how many there are, on
// which host each runs, and where task 0's launcher (the rendezvous) is.
// One file per engine: slurm_engine.cc, kubernetes_engine.cc,
// tf_config_engine.cc.
//
// Thread safety: functions are thread-compatible (they read the
// environment through `env`).
#ifndef COHORT_LAUNCH_ENGINE_H_
#define COHORT_LAUNCH_ENGINE_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "cohort/base/env.h"

namespace cohort::launch {

// The port of task 0's launcher when neither the engine nor --rendezvous
// gives one (TensorFlow's Slurm resolver's port base).
inline constexpr int kDefaultRendezvousPort = 8888;

struct EngineTask {
  std::string engine;  // "slurm", "kubernetes", "tf_config"
  int index = 0;       // this launcher's task, 0..count-1
  int count = 0;
  // The host other tasks dial to reach engine task k ("node-2", "10.4.1.7").
  std::vector<std::string> hosts;
  // "host:port" of engine task 0's launcher.
  std::string rendezvous;
  // Job name -> task count when the engine itself defines the roles
  // (tf_config); empty otherwise.
  std::map<std::string, int> jobs;
  // What the engine read, for messages: "SLURM_PROCID=2 of 4,
  // SLURM_STEP_NODELIST=node[1-2]".
  std::string source;
};

struct EngineFlags {
  // --rendezvous: "host:port" replaces the engine's; ":port" keeps its host.
  std::string rendezvous;
  // --num-tasks: the job's task count where the engine's environment does
  // not say (Kubernetes); 0 = unset.
  int num_tasks = 0;
  // How long an engine that waits for its peers to appear (Kubernetes pods
  // still starting) keeps trying.
  absl::Duration timeout = absl::Minutes(5);
};

// `engine` is "slurm", "kubernetes", "tf_config" or "auto" (the first whose
// environment is present, in that order). Errors name the engine, the
// variable or API that failed and what to check; InvalidArgument for an
// unknown engine name or a malformed --rendezvous.
absl::StatusOr<EngineTask> ResolveEngineTask(Env* env,
                                             const std::string& engine,
                                             const EngineFlags& flags);

// The engines, one per file.
absl::StatusOr<EngineTask> ResolveSlurmTask(Env* env, const EngineFlags& flags);
absl::StatusOr<EngineTask> ResolveKubernetesTask(Env* env,
                                                 const EngineFlags& flags);
absl::StatusOr<EngineTask> ResolveTfConfigTask(Env* env,
                                               const EngineFlags& flags);

// "host:port" -> {host, port} for host names, IPv4 and "[v6]"; the port
// must be 1..65535. InvalidArgument naming `what` and the text.
absl::StatusOr<std::pair<std::string, int>> SplitHostPort(
    absl::string_view address, absl::string_view what);

// Applies --rendezvous to the engine's choice `host:port` of task 0.
absl::StatusOr<std::string> ApplyRendezvousFlag(const std::string& engine_host,
                                                int engine_port,
                                                const std::string& flag);

}  // namespace cohort::launch

#endif  // COHORT_LAUNCH_ENGINE_H_
