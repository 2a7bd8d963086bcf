#include "cohort/launch/engine.h"

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace cohort::launch {

absl::StatusOr<std::pair<std::string, int>> SplitHostPort(
    absl::string_view address, absl::string_view what) {
  const size_t colon = address.rfind(':');
  int port = 0;
  if (colon == absl::string_view::npos ||
      !absl::SimpleAtoi(address.substr(colon + 1), &port) || port <= 0 ||
      port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " \"", address, "\" is not HOST:PORT with a port in 1..65535"));
  }
  std::string host(address.substr(0, colon));
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  return std::make_pair(host, port);
}

absl::StatusOr<std::string> ApplyRendezvousFlag(const std::string& engine_host,
                                                int engine_port,
                                                const std::string& flag) {
  if (flag.empty()) return absl::StrCat(engine_host, ":", engine_port);
  if (absl::StartsWith(flag, ":")) {
    absl::StatusOr<std::pair<std::string, int>> hp =
        SplitHostPort(absl::StrCat("h", flag), "--rendezvous");
    if (!hp.ok()) return hp.status();
    return absl::StrCat(engine_host, ":", hp->second);
  }
  absl::StatusOr<std::pair<std::string, int>> hp =
      SplitHostPort(flag, "--rendezvous");
  if (!hp.ok()) return hp.status();
  if (hp->first.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--rendezvous \"", flag, "\" has no host"));
  }
  return flag;
}

absl::StatusOr<EngineTask> ResolveEngineTask(Env* env,
                                             const std::string& engine,
                                             const EngineFlags& flags) {
  if (engine == "slurm") return ResolveSlurmTask(env, flags);
  if (engine == "kubernetes") return ResolveKubernetesTask(env, flags);
  if (engine == "tf_config") return ResolveTfConfigTask(env, flags);
  if (engine != "auto") {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown --engine \"", engine,
                     "\"; use slurm, kubernetes, tf_config or auto"));
  }
  if (env->GetVar("SLURM_PROCID").has_value()) {
    return ResolveSlurmTask(env, flags);
  }
  if (env->GetVar("JOB_COMPLETION_INDEX").has_value()) {
    return ResolveKubernetesTask(env, flags);
  }
  if (env->GetVar("TF_CONFIG").has_value()) {
    return ResolveTfConfigTask(env, flags);
  }
  return absl::FailedPreconditionError(
      "--engine auto found no cluster engine: none of SLURM_PROCID (Slurm), "
      "JOB_COMPLETION_INDEX (a Kubernetes Indexed Job) or TF_CONFIG is set; "
      "run under srun or in an Indexed Job's pod, or use `cohort launch -n N` "
      "on one machine");
}

}  // namespace cohort::launch
