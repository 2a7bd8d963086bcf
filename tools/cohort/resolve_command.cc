// `cohort resolve`: resolves the cluster this process belongs to and prints
// it: the cluster spec, this task's type and index, the master URL, the rpc
// layer and the accelerators.
//
//   cohort resolve [--resolver
//   auto|tf_config|slurm|sagemaker|kubernetes|gce|tpu]
//                  [--format text|json]
//
// `auto` (the default) asks each registered resolver's detector in priority
// order (TF_CONFIG, Slurm, SageMaker, Kubernetes in-cluster) and says which it
// picked. `--format json` prints one JSON object on one line with the keys
// cluster, task_type, task_id, master, rpc_layer, num_accelerators and
// resolver. Errors go to stderr and the exit code is 1.
#include <iostream>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cohort/base/env.h"
#include "cohort/base/json.h"
#include "cohort/cluster/cluster_resolver.h"
#include "cohort/cluster/resolve_report.h"
#include "cohort/cluster/resolver_registry.h"
#include "tools/cohort/commands.h"

namespace cohort::tools {
namespace {

struct ResolveOptions {
  std::string resolver = "auto";
  std::string format = "text";
};

std::string TextOf(const std::optional<std::string>& v) {
  return v.has_value() ? (v->empty() ? "\"\"" : *v) : "(none)";
}

void PrintText(const std::string& resolver, const std::string& how,
               const ClusterSpec& spec, const Json& result) {
  std::cout << "resolver:          " << resolver << how << "\n";
  std::cout << "cluster:";
  if (spec.empty()) std::cout << "           (empty: no jobs)";
  std::cout << "\n";
  for (const std::string& job : spec.jobs()) {
    const ClusterSpec::TaskMap& tasks = *spec.tasks(job);
    std::vector<std::string> items;
    for (const auto& [index, address] : tasks) {
      items.push_back(absl::StrCat(index, "=", address));
    }
    std::cout << "  " << job << ": "
              << (items.empty() ? "(no tasks)" : absl::StrJoin(items, " "))
              << "\n";
  }
  const Json& type = result["task_type"];
  const Json& id = result["task_id"];
  std::cout << "task:              "
            << (type.is_null() ? std::string("(none)")
                               : type.get<std::string>())
            << (id.is_null() ? std::string()
                             : absl::StrCat(" ", id.get<int64_t>()))
            << "\n";
  const Json& master = result["master"];
  std::cout << "master:            "
            << (master.is_null() ? std::string("(unknown)")
                : master.get<std::string>().empty()
                    ? std::string("\"\" (in-process)")
                    : master.get<std::string>())
            << "\n";
  const Json& rpc = result["rpc_layer"];
  std::cout << "rpc_layer:         "
            << (rpc.is_null() ? std::string("(none)")
                              : TextOf(rpc.get<std::string>()))
            << "\n";
  const Json& accel = result["num_accelerators"];
  std::vector<std::string> counts;
  if (accel.is_object()) {
    for (const auto& [type_name, count] : accel.items()) {
      counts.push_back(absl::StrCat(type_name, "=", count.dump()));
    }
  }
  std::cout << "num_accelerators:  "
            << (accel.is_null()  ? std::string("(unknown)")
                : counts.empty() ? std::string("none")
                                 : absl::StrJoin(counts, " "))
            << "\n";
}

int RunResolve(const ResolveOptions& options) {
  absl::StatusOr<ResolveReport> report = ResolveCluster(
      BuiltinResolverRegistry(), options.resolver, Env::Default());
  if (!report.ok()) {
    std::cerr << "cohort resolve: " << report.status().message() << "\n";
    return 1;
  }
  std::string how;
  if (!report->detected_from.empty()) {
    how = absl::StrCat(" (auto-detected: ", report->detected_from, ")");
    if (options.format == "json") {
      std::cerr << "cohort resolve: auto-detected " << report->resolver
                << " from " << report->detected_from << "\n";
    }
  }
  for (const std::string& warning : report->warnings) {
    std::cerr << "cohort resolve: warning: " << warning << "\n";
  }
  if (options.format == "json") {
    std::cout << report->json.dump() << std::endl;
  } else {
    PrintText(report->resolver, how, report->cluster, report->json);
    std::cout.flush();
  }
  return 0;
}

}  // namespace

void RegisterResolveCommand(CLI::App& app, int& exit_code) {
  auto options = std::make_shared<ResolveOptions>();
  CLI::App* cmd = app.add_subcommand(
      "resolve",
      "print the cluster this process belongs to (spec, task, master, rpc "
      "layer, accelerators)");
  cmd->add_option("--resolver", options->resolver,
                  "auto (detect), tf_config, slurm, sagemaker, kubernetes, "
                  "gce or tpu")
      ->capture_default_str();
  cmd->add_option("--format", options->format, "text or json")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
  cmd->callback([options, &exit_code] { exit_code = RunResolve(*options); });
}

}  // namespace cohort::tools
