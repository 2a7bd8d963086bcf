// Fuzzes the TF_CONFIG parser and the TF_CONFIG resolver on top of it: any
// input must give a value or an InvalidArgument, never a crash, and a parsed
// cluster must survive its JSON and ClusterDef round trips.
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "cohort/base/fake_env.h"
#include "cohort/base/logging.h"
#include "cohort/cluster/cluster_spec.h"
#include "cohort/cluster/resolvers/tf_config_cluster_resolver.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto config = cohort::ParseTfConfig(text, "TF_CONFIG");
  if (!config.ok()) {
    COHORT_CHECK(config.status().code() == absl::StatusCode::kInvalidArgument)
        << config.status();
    COHORT_CHECK(config.status().message().find("TF_CONFIG") !=
                 absl::string_view::npos)
        << config.status();
    return 0;
  }
  const cohort::ClusterSpec& spec = config->cluster;
  auto from_json = cohort::ClusterSpec::FromJson(spec.ToJson(), "round trip");
  COHORT_CHECK(from_json.ok() && *from_json == spec) << spec.DebugString();
  auto from_def = cohort::ClusterSpec::FromClusterDef(spec.ToClusterDef());
  COHORT_CHECK(from_def.ok() && *from_def == spec) << spec.DebugString();
  (void)cohort::MakeServerDef(
      spec, config->task_type,
      config->task_index.has_value()
          ? std::optional<int>(static_cast<int>(*config->task_index))
          : std::nullopt);

  cohort::FakeEnv env;
  env.SetVar("TF_CONFIG", text);
  cohort::TFConfigClusterResolver resolver(&env);
  auto resolved = resolver.cluster_spec();
  COHORT_CHECK(resolved.ok() && *resolved == spec);
  (void)resolver.master();
  (void)resolver.task_type();
  (void)resolver.task_id();
  (void)resolver.rpc_layer();
  return 0;
}
