#include "cohort/cluster/resolvers/tf_config_cluster_resolver.h"

#include <limits>
#include <memory>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cohort/base/json.h"
#include "cohort/base/status.h"
#include "cohort/cluster/resolver_registry.h"

namespace cohort {
namespace {

absl::Status FieldError(absl::string_view what, absl::string_view field,
                        const Json& value, absl::string_view expected) {
  return absl::InvalidArgumentError(
      absl::StrCat(what, ": \"", field, "\" must be ", expected, ", got ",
                   JsonTypeName(value), " ", JsonPreview(value)));
}

std::string DescribeTasks(const ClusterSpec::TaskMap& tasks) {
  if (tasks.empty()) return "no tasks";
  std::vector<std::string> indices;
  for (const auto& entry : tasks)
    indices.push_back(std::to_string(entry.first));
  return absl::StrCat("tasks ", absl::StrJoin(indices, ", "));
}

}  // namespace

absl::StatusOr<TfConfig> ParseTfConfig(absl::string_view text,
                                       absl::string_view what) {
  TfConfig config;
  if (absl::StripAsciiWhitespace(text).empty()) return config;
  COHORT_ASSIGN_OR_RETURN(Json json, ParseJson(text, what));
  if (!json.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(
        what,
        " must be a JSON object such as {\"cluster\": {\"worker\": "
        "[\"host:port\"]}, \"task\": {\"type\": \"worker\", \"index\": 0}}, "
        "got ",
        JsonTypeName(json), " ", JsonPreview(json)));
  }
  auto cluster = json.find("cluster");
  if (cluster != json.end() && !cluster->is_null()) {
    if (!cluster->is_object()) {
      return FieldError(what, "cluster", *cluster,
                        "an object mapping job names to address lists");
    }
    // Parsed once more keeping key order, so the jobs keep the order the
    // user wrote them in (the text is known to be valid JSON here).
    nlohmann::ordered_json ordered = nlohmann::ordered_json::parse(
        text.begin(), text.end(), /*cb=*/nullptr, /*allow_exceptions=*/false);
    COHORT_ASSIGN_OR_RETURN(
        config.cluster, ClusterSpec::FromJson(
                            ordered.is_object() ? ordered["cluster"] : ordered,
                            absl::StrCat(what, " \"cluster\"")));
  }
  auto task = json.find("task");
  if (task != json.end() && !task->is_null()) {
    if (!task->is_object()) {
      return FieldError(
          what, "task", *task,
          "an object such as {\"type\": \"worker\", \"index\": 0}");
    }
    auto type = task->find("type");
    if (type != task->end() && !type->is_null()) {
      // TensorFlow converts the type to text, so 123456 is job "123456".
      if (type->is_string()) {
        config.task_type = type->get<std::string>();
      } else if (type->is_number_integer()) {
        config.task_type = type->dump();
      } else {
        return FieldError(what, "task.type", *type,
                          "a job name such as \"worker\"");
      }
    }
    auto index = task->find("index");
    if (index != task->end() && !index->is_null()) {
      int64_t value = 0;
      // TensorFlow converts the index to an integer, so "1" is 1.
      if (index->is_number_integer()) {
        value = index->get<int64_t>();
      } else if (!index->is_string() ||
                 !absl::SimpleAtoi(index->get<std::string>(), &value)) {
        return FieldError(what, "task.index", *index,
                          "a task index (an integer such as 0)");
      }
      if (value < 0) {
        return FieldError(what, "task.index", *index,
                          "a non-negative task index");
      }
      config.task_index = value;
    }
  }
  COHORT_ASSIGN_OR_RETURN(
      config.rpc_layer,
      JsonOptionalString(json, "rpc_layer", what, "rpc_layer"));
  COHORT_ASSIGN_OR_RETURN(
      config.session_master,
      JsonOptionalString(json, "session_master", what, "session_master"));
  COHORT_ASSIGN_OR_RETURN(
      config.environment,
      JsonOptionalString(json, "environment", what, "environment"));

  // The task must be part of the cluster it names. An evaluator may sit
  // outside the cluster (TensorFlow's Estimator convention).
  if (config.task_type.has_value() && !config.cluster.empty()) {
    const ClusterSpec::TaskMap* tasks = config.cluster.tasks(*config.task_type);
    if (tasks == nullptr) {
      if (*config.task_type != "evaluator") {
        return absl::InvalidArgumentError(absl::StrCat(
            what, ": \"task.type\" is \"", *config.task_type,
            "\", which is not a job of \"cluster\"; expected one of: ",
            absl::StrJoin(config.cluster.jobs(), ", "), " (or \"evaluator\")"));
      }
    } else if (config.task_index.has_value() &&
               (*config.task_index > std::numeric_limits<int>::max() ||
                tasks->count(static_cast<int>(*config.task_index)) == 0)) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": \"task.index\" is ", *config.task_index, ", but job '",
          *config.task_type, "' in \"cluster\" has ", DescribeTasks(*tasks),
          "; expected the index of one of its tasks"));
    }
  }
  return config;
}

TFConfigClusterResolver::TFConfigClusterResolver(Env* env, Options options)
    : ClusterResolverWithTaskAttributes(std::move(options.task_type),
                                        options.task_id,
                                        std::move(options.rpc_layer)),
      env_(env),
      environment_(std::move(options.environment)) {}

absl::StatusOr<TfConfig> TFConfigClusterResolver::LoadConfig() {
  std::optional<std::string> text = env_->GetVar("TF_CONFIG");
  if (!text.has_value()) return TfConfig();
  return ParseTfConfig(*text, "TF_CONFIG");
}

absl::StatusOr<ClusterSpec> TFConfigClusterResolver::cluster_spec() {
  COHORT_ASSIGN_OR_RETURN(TfConfig config, LoadConfig());
  return std::move(config.cluster);
}

absl::StatusOr<std::string> TFConfigClusterResolver::master(
    std::optional<std::string> task_type, std::optional<int64_t> task_id,
    std::optional<std::string> rpc_layer) {
  COHORT_ASSIGN_OR_RETURN(TfConfig config, LoadConfig());
  if (config.session_master.has_value()) return *config.session_master;
  const ClusterSpec& spec = config.cluster;
  const std::vector<std::string> jobs = spec.jobs();
  if (jobs.empty() ||
      (jobs.size() == 1 && spec.job_tasks(jobs[0])->size() == 1)) {
    return std::string();
  }
  if (!task_type.has_value()) {
    task_type = task_type_.has_value() ? task_type_ : config.task_type;
  }
  if (!task_id.has_value()) {
    task_id = task_id_.has_value() ? task_id_ : config.task_index;
  }
  if (!rpc_layer.has_value()) {
    rpc_layer = rpc_layer_.has_value() ? rpc_layer_ : config.rpc_layer;
  }
  if (!task_type.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "No such job in cluster: None. The ", name(),
        " configuration names no task type and none was given; the cluster "
        "has several tasks (jobs: ",
        absl::StrJoin(jobs, ", "),
        "), so set the task (TF_CONFIG \"task\": {\"type\": ..., \"index\": "
        "...}) or pass task_type and task_id"));
  }
  if (!task_id.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "No task with index None in job '", *task_type, "'. The ", name(),
        " configuration names no task index and none was given"));
  }
  COHORT_ASSIGN_OR_RETURN(std::string address,
                          TaskAddress(spec, *task_type, *task_id));
  return FormatMasterUrl(address, rpc_layer);
}

std::optional<std::string> TFConfigClusterResolver::task_type() {
  if (task_type_.has_value()) return task_type_;
  auto config = LoadConfig();
  return config.ok() ? config->task_type : std::nullopt;
}

std::optional<int64_t> TFConfigClusterResolver::task_id() {
  if (task_id_.has_value()) return task_id_;
  auto config = LoadConfig();
  return config.ok() ? config->task_index : std::nullopt;
}

std::optional<std::string> TFConfigClusterResolver::rpc_layer() {
  if (rpc_layer_.has_value()) return rpc_layer_;
  auto config = LoadConfig();
  return config.ok() ? config->rpc_layer : std::nullopt;
}

absl::StatusOr<AcceleratorCounts> TFConfigClusterResolver::num_accelerators(
    std::optional<std::string> task_type, std::optional<int64_t> task_id) {
  if (!task_type.has_value()) task_type = this->task_type();
  if (!task_id.has_value()) task_id = this->task_id();
  return ClusterResolver::num_accelerators(task_type, task_id);
}

void RegisterTFConfigResolver(ResolverRegistry* registry) {
  ResolverRegistration r;
  r.name = "tf_config";
  r.description = "the TF_CONFIG environment variable";
  r.priority = 10;
  r.factory = [](Env* env) -> absl::StatusOr<std::unique_ptr<ClusterResolver>> {
    return std::unique_ptr<ClusterResolver>(new TFConfigClusterResolver(env));
  };
  r.detector = [](Env* env) {
    std::optional<std::string> text = env->GetVar("TF_CONFIG");
    return text.has_value() && !absl::StripAsciiWhitespace(*text).empty();
  };
  absl::Status status = registry->Register(std::move(r));
  (void)status;  // Only fails on a second registration of the same name.
}

}  // namespace cohort
