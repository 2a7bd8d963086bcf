// Conformance adapters of the cluster layer's own parts: ClusterSpec,
// ServerDef, multi_worker_util, the base resolver, Simple, Union, TFConfig
// and SageMaker.
#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cohort/base/status.h"
#include "cohort/cluster/cluster_spec.h"
#include "cohort/cluster/multi_worker_util.h"
#include "cohort/cluster/resolvers/sagemaker_cluster_resolver.h"
#include "cohort/cluster/resolvers/simple_cluster_resolver.h"
#include "cohort/cluster/resolvers/tf_config_cluster_resolver.h"
#include "cohort/cluster/resolvers/union_cluster_resolver.h"
#include "cohort/runtime/server.h"
#include "tools/conformance/adapters.h"

namespace cohort::conformance {
namespace {

absl::Status UnknownCall(const std::string& adapter, const Json& step) {
  return absl::UnimplementedError(absl::StrCat(
      "the ", adapter, " adapter does not know the step ", step.dump()));
}

// Dotted call names "derivation.method": the spec is first derived
// (copied, round-tripped through a ClusterDef or through as_dict), then the
// method runs on the result.
absl::StatusOr<ClusterSpec> Derive(const ClusterSpec& spec,
                                   const std::string& how) {
  if (how == "copy_from_clusterspec") return ClusterSpec(spec);
  if (how == "from_cluster_def") {
    return ClusterSpec::FromClusterDef(spec.ToClusterDef());
  }
  if (how == "from_as_dict")
    return ClusterSpec::FromJson(spec.ToJson(), "as_dict");
  return absl::UnimplementedError(
      absl::StrCat("unknown ClusterSpec derivation '", how, "'"));
}

// input[key] as a ClusterSpec whose jobs keep the case file's order.
absl::StatusOr<ClusterSpec> OrderedSpec(CaseContext& ctx, const Json& input,
                                        const char* key) {
  const nlohmann::ordered_json& ordered = ctx.ordered_input();
  if (ordered.is_object() && ordered.contains(key)) {
    return ClusterSpec::FromJson(ordered[key], key);
  }
  return ClusterSpec::FromJson(Field(input, key), key);
}

// The ServerDef of a ServerDef case: TensorFlow's _make_server_def from
// `input.job_name`, `input.task_index` and `input.protocol`.
absl::StatusOr<ServerDef> CaseServerDef(const ClusterSpec& spec,
                                        const Json& input) {
  COHORT_ASSIGN_OR_RETURN(auto job, OptString(input, "job_name"));
  COHORT_ASSIGN_OR_RETURN(auto index, OptInt(input, "task_index"));
  COHORT_ASSIGN_OR_RETURN(auto protocol, OptString(input, "protocol"));
  std::optional<int> task_index;
  if (index.has_value()) task_index = static_cast<int>(*index);
  return MakeServerDef(spec, job, task_index, protocol);
}

// ClusterSpec and ServerDef cases: `input.cluster` (as_dict form), optional
// `input.other`, `input.job_name`, `input.task_index`, `input.protocol`.
// A `construct` step builds the ClusterSpec; in a ServerDef case it builds
// the ServerDef and runs the server's configuration checks on it
// (runtime::Server::CheckServerDef: what TensorFlow's Server constructor
// refuses before it binds), without binding the case's ports.
class ClusterSpecAdapter : public Adapter {
 public:
  explicit ClusterSpecAdapter(bool server_def) : server_def_(server_def) {}

  CaseRun Run(const Json& test_case, CaseContext& ctx) const override {
    const Json& input = Field(test_case, "input");
    CaseRun run;
    auto spec = OrderedSpec(ctx, input, "cluster");
    const Json& calls = Field(input, "calls");
    if (!calls.is_array()) return run;
    for (const Json& step : calls) {
      if (step.contains("construct")) {
        absl::Status status = spec.status();
        if (status.ok() && server_def_) {
          absl::StatusOr<ServerDef> def = CaseServerDef(*spec, input);
          status =
              def.ok() ? runtime::Server::CheckServerDef(*def) : def.status();
        }
        run.steps.push_back(status.ok() ? StepOutcome::Ok()
                                        : StepOutcome::Error(status));
        continue;
      }
      if (!spec.ok()) {
        run.steps.push_back(StepOutcome::Error(spec.status()));
        continue;
      }
      std::string method =
          step.contains("call") && step["call"].is_string() ? step["call"] : "";
      ClusterSpec target = *spec;
      size_t dot = method.find('.');
      if (dot != std::string::npos) {
        auto derived = Derive(*spec, method.substr(0, dot));
        if (!derived.ok()) {
          run.steps.push_back(StepOutcome::Error(derived.status()));
          continue;
        }
        target = *std::move(derived);
        method = method.substr(dot + 1);
      }
      run.steps.push_back(Call(target, method, step, input, ctx));
    }
    return run;
  }

 private:
  const bool server_def_;

  static StepOutcome Call(const ClusterSpec& spec, const std::string& method,
                          const Json& step, const Json& input,
                          CaseContext& ctx) {
    const Json& args = Field(step, "args");
    auto job = OptString(args, "job_name");
    if (!job.ok()) return StepOutcome::Error(job.status());
    const std::string job_name = job->value_or("");
    if (method == "as_dict") return StepOutcome::Value(spec.ToJson());
    if (method == "as_cluster_def") {
      return StepOutcome::Value(ClusterDefToJson(spec.ToClusterDef()));
    }
    if (method == "bool" || method == "__bool__" || method == "__nonzero__") {
      return StepOutcome::Value(!spec.empty());
    }
    if (method == "jobs") return StepOutcome::Value(spec.jobs());
    if (method == "eq" || method == "__eq__" || method == "ne" ||
        method == "__ne__") {
      auto other = OrderedSpec(ctx, input, "other");
      if (!other.ok()) return StepOutcome::Error(other.status());
      const bool equal = spec == *other;
      return StepOutcome::Value(method == "eq" || method == "__eq__" ? equal
                                                                     : !equal);
    }
    if (method == "num_tasks") {
      auto n = spec.num_tasks(job_name);
      if (!n.ok()) return StepOutcome::Error(n.status());
      return StepOutcome::Value(*n);
    }
    if (method == "task_indices") {
      auto v = spec.task_indices(job_name);
      if (!v.ok()) return StepOutcome::Error(v.status());
      return StepOutcome::Value(*v);
    }
    if (method == "task_address") {
      auto index = OptInt(args, "task_index");
      if (!index.ok()) return StepOutcome::Error(index.status());
      auto v =
          spec.task_address(job_name, static_cast<int>(index->value_or(0)));
      if (!v.ok()) return StepOutcome::Error(v.status());
      return StepOutcome::Value(*v);
    }
    if (method == "job_tasks") {
      auto v = spec.job_tasks(job_name);
      if (!v.ok()) return StepOutcome::Error(v.status());
      Json list = Json::array();
      for (const auto& address : *v) list.push_back(ToJson(address));
      return StepOutcome::Value(std::move(list));
    }
    if (method == "server_def") {
      auto def = CaseServerDef(spec, input);
      if (!def.ok()) return StepOutcome::Error(def.status());
      return StepOutcome::Value(ServerDefToJson(*def));
    }
    // str() / repr(): "ClusterSpec({'ps': [...], ...})", jobs sorted.
    if (method == "str" || method == "repr" || method == "__str__" ||
        method == "__repr__") {
      return StepOutcome::Value(spec.DebugString());
    }
    if (method == "roundtrip_cluster_def_to_spec_to_def") {
      auto back = ClusterSpec::FromClusterDef(spec.ToClusterDef());
      if (!back.ok()) return StepOutcome::Error(back.status());
      return StepOutcome::Value(ClusterDefToJson(back->ToClusterDef()));
    }
    return StepOutcome::Error(UnknownCall("ClusterSpec", step));
  }
};

// multi_worker_util cases: `input.cluster_spec` handed over as
// `input.cluster_spec_kind` ("dict" by default, "ClusterDef", "ClusterSpec").
class MultiWorkerUtilAdapter : public Adapter {
 public:
  CaseRun Run(const Json& test_case, CaseContext& ctx) const override {
    const Json& input = Field(test_case, "input");
    CaseRun run;
    absl::StatusOr<ClusterSpec> spec = Normalize(input);
    const Json& calls = Field(input, "calls");
    if (!calls.is_array()) return run;
    for (const Json& step : calls) {
      if (!spec.ok()) {
        run.steps.push_back(StepOutcome::Error(spec.status()));
        continue;
      }
      run.steps.push_back(Call(*spec, step));
    }
    return run;
  }

 private:
  static absl::StatusOr<ClusterSpec> Normalize(const Json& input) {
    namespace mwu = multi_worker_util;
    const Json& value = Field(input, "cluster_spec");
    const Json& kind = Field(input, "cluster_spec_kind");
    if (kind == "ClusterDef" || kind == "ClusterSpec") {
      COHORT_ASSIGN_OR_RETURN(ClusterSpec spec,
                              ClusterSpec::FromJson(value, "cluster_spec"));
      if (kind == "ClusterSpec") return mwu::NormalizeClusterSpec(spec);
      return mwu::NormalizeClusterSpec(spec.ToClusterDef());
    }
    return mwu::NormalizeClusterSpec(value);
  }

  static StepOutcome Call(const ClusterSpec& spec, const Json& step) {
    namespace mwu = multi_worker_util;
    const std::string method =
        step.contains("call") && step["call"].is_string() ? step["call"] : "";
    const Json& args = Field(step, "args");
    auto type = OptString(args, "task_type");
    auto id = OptInt(args, "task_id");
    if (!type.ok()) return StepOutcome::Error(type.status());
    if (!id.ok()) return StepOutcome::Error(id.status());
    if (method == "normalize_cluster_spec.as_dict") {
      return StepOutcome::Value(mwu::NormalizeClusterSpec(spec).ToJson());
    }
    if (method == "_validate_cluster_spec") {
      absl::Status s = mwu::ValidateClusterSpec(spec, *type, *id);
      return s.ok() ? StepOutcome::Ok() : StepOutcome::Error(s);
    }
    if (method == "is_chief") {
      auto v = mwu::IsChief(spec, *type, *id);
      return v.ok() ? StepOutcome::Value(*v) : StepOutcome::Error(v.status());
    }
    if (method == "worker_count") {
      auto v = mwu::WorkerCount(spec, *type);
      return v.ok() ? StepOutcome::Value(*v) : StepOutcome::Error(v.status());
    }
    if (method == "id_in_cluster") {
      auto v = mwu::IdInCluster(spec, *type, *id);
      return v.ok() ? StepOutcome::Value(*v) : StepOutcome::Error(v.status());
    }
    if (method == "collective_leader") {
      auto v = mwu::CollectiveLeader(spec, *type, *id);
      return v.ok() ? StepOutcome::Value(*v) : StepOutcome::Error(v.status());
    }
    if (method == "coordination_leader") {
      return StepOutcome::Value(mwu::CoordinationLeader(spec));
    }
    return StepOutcome::Error(UnknownCall("multi_worker_util", step));
  }
};

// The base resolver's num_accelerators: a resolver that inherits every
// default (master "" and device counting through the DeviceLister).
class BaseOnlyResolver : public ClusterResolver {
 public:
  std::string name() const override { return "base"; }
  absl::StatusOr<ClusterSpec> cluster_spec() override { return ClusterSpec(); }
  absl::StatusOr<std::string> master(std::optional<std::string>,
                                     std::optional<int64_t>,
                                     std::optional<std::string>) override {
    return std::string();
  }
  std::optional<std::string> task_type() override { return std::nullopt; }
  std::optional<int64_t> task_id() override { return std::nullopt; }
  std::optional<std::string> rpc_layer() override { return std::nullopt; }
  absl::Status set_task_type(std::optional<std::string>) override {
    return absl::OkStatus();
  }
  absl::Status set_task_id(std::optional<int64_t>) override {
    return absl::OkStatus();
  }
  absl::Status set_rpc_layer(std::optional<std::string>) override {
    return absl::OkStatus();
  }
};

class BaseResolverAdapter : public ResolverAdapter {
 public:
  absl::StatusOr<std::unique_ptr<ClusterResolver>> Build(
      const Json& spec, CaseContext& ctx) const override {
    return std::unique_ptr<ClusterResolver>(new BaseOnlyResolver());
  }
};

// Reads an accelerator map {"GPU": 8}.
absl::StatusOr<AcceleratorCounts> ParseCounts(const Json& value) {
  AcceleratorCounts counts;
  if (value.is_null()) return counts;
  if (!value.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "num_accelerators must be a map from device type to count, got ",
        JsonPreview(value)));
  }
  for (const auto& [type, count] : value.items()) {
    if (!count.is_number_integer()) {
      return absl::InvalidArgumentError(
          absl::StrCat("num_accelerators[\"", type,
                       "\"] must be an integer, got ", JsonPreview(count)));
    }
    counts[type] = count.get<int>();
  }
  return counts;
}

// Simple: ctor {cluster_spec, master, task_type, task_id, environment,
// num_accelerators, rpc_layer}. The C++ constructor takes a ClusterSpec
// object. A case that hands it something else (`cluster_spec_kind` other
// than "ClusterSpec") or a non-text master exercises Python's dynamic type
// check; in C++ such a call does not compile, and this adapter reports the
// TypeError that the static type stands for.
class SimpleAdapter : public ResolverAdapter {
 public:
  absl::StatusOr<std::unique_ptr<ClusterResolver>> Build(
      const Json& spec, CaseContext& ctx) const override {
    const Json& ctor = Field(spec, "ctor");
    const Json& kind = Field(ctor, "cluster_spec_kind");
    if (!kind.is_null() && kind != "ClusterSpec") {
      return absl::InvalidArgumentError(absl::StrCat(
          "cluster_spec must be a `tf.train.ClusterSpec` (cohort::ClusterSpec "
          "in C++; the case passes ",
          kind.dump(), ", which the constructor's parameter type rejects)"));
    }
    const Json& master = Field(ctor, "master");
    if (!master.is_null() && !master.is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat("master must be a string (std::string in C++), got ",
                       JsonPreview(master)));
    }
    COHORT_ASSIGN_OR_RETURN(
        ClusterSpec cluster,
        ClusterSpec::FromJson(Field(ctor, "cluster_spec"), "cluster_spec"));
    SimpleClusterResolver::Options options;
    if (master.is_string()) options.master = master.get<std::string>();
    COHORT_ASSIGN_OR_RETURN(options.task_type, OptString(ctor, "task_type"));
    COHORT_ASSIGN_OR_RETURN(options.task_id, OptInt(ctor, "task_id"));
    COHORT_ASSIGN_OR_RETURN(auto environment, OptString(ctor, "environment"));
    options.environment = environment.value_or("");
    COHORT_ASSIGN_OR_RETURN(options.num_accelerators,
                            ParseCounts(Field(ctor, "num_accelerators")));
    COHORT_ASSIGN_OR_RETURN(options.rpc_layer, OptString(ctor, "rpc_layer"));
    return std::unique_ptr<ClusterResolver>(
        new SimpleClusterResolver(std::move(cluster), std::move(options)));
  }
};

// Union: `resolvers` (each {kind, ctor, fake} built by that kind's adapter;
// an entry with a `value` and no `ctor` is not a resolver at all and becomes
// a null pointer, the closest C++ analogue) and `kwargs` (task_type,
// task_id, rpc_layer). Other keywords do not exist in C++'s Overrides struct;
// the adapter reports them as Python's "Unexpected kwargs provided".
class UnionAdapter : public ResolverAdapter {
 public:
  absl::StatusOr<std::unique_ptr<ClusterResolver>> Build(
      const Json& spec, CaseContext& ctx) const override {
    std::vector<std::unique_ptr<ClusterResolver>> resolvers;
    const Json& list = Field(spec, "resolvers");
    if (list.is_array()) {
      for (const Json& entry : list) {
        const std::string kind = Field(entry, "kind").is_string()
                                     ? Field(entry, "kind").get<std::string>()
                                     : "";
        if (!entry.contains("ctor") && entry.contains("value")) {
          resolvers.push_back(nullptr);
          continue;
        }
        const ResolverAdapter* adapter = ctx.registry().FindResolver(kind);
        if (adapter == nullptr) {
          ctx.Skip(absl::StrCat("no adapter for resolver ", kind,
                                " (nested in Union)"));
          return absl::UnimplementedError("skipped");
        }
        COHORT_ASSIGN_OR_RETURN(auto resolver, adapter->Build(entry, ctx));
        resolvers.push_back(std::move(resolver));
      }
    }
    UnionClusterResolver::Overrides overrides;
    const Json& kwargs = Field(spec, "kwargs");
    if (kwargs.is_object()) {
      std::vector<std::string> unexpected;
      for (const auto& [key, value] : kwargs.items()) {
        if (key != "task_type" && key != "task_id" && key != "rpc_layer") {
          unexpected.push_back(absl::StrCat(key, "=", value.dump()));
        }
      }
      if (!unexpected.empty()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "Unexpected kwargs provided {", absl::StrJoin(unexpected, ", "),
            "}; UnionClusterResolver::Overrides has task_type, task_id and "
            "rpc_layer only"));
      }
      COHORT_ASSIGN_OR_RETURN(overrides.task_type,
                              OptString(kwargs, "task_type"));
      COHORT_ASSIGN_OR_RETURN(overrides.task_id, OptInt(kwargs, "task_id"));
      COHORT_ASSIGN_OR_RETURN(overrides.rpc_layer,
                              OptString(kwargs, "rpc_layer"));
    }
    COHORT_ASSIGN_OR_RETURN(auto resolver,
                            UnionClusterResolver::Create(std::move(resolvers),
                                                         std::move(overrides)));
    return std::unique_ptr<ClusterResolver>(std::move(resolver));
  }
};

absl::StatusOr<TFConfigClusterResolver::Options> TfConfigOptions(
    const Json& ctor) {
  TFConfigClusterResolver::Options options;
  COHORT_ASSIGN_OR_RETURN(options.task_type, OptString(ctor, "task_type"));
  COHORT_ASSIGN_OR_RETURN(options.task_id, OptInt(ctor, "task_id"));
  COHORT_ASSIGN_OR_RETURN(options.rpc_layer, OptString(ctor, "rpc_layer"));
  COHORT_ASSIGN_OR_RETURN(options.environment, OptString(ctor, "environment"));
  return options;
}

// TFConfig: TF_CONFIG from `input.env`; ctor overrides.
class TFConfigAdapter : public ResolverAdapter {
 public:
  absl::StatusOr<std::unique_ptr<ClusterResolver>> Build(
      const Json& spec, CaseContext& ctx) const override {
    COHORT_ASSIGN_OR_RETURN(auto options, TfConfigOptions(Field(spec, "ctor")));
    return std::unique_ptr<ClusterResolver>(
        new TFConfigClusterResolver(ctx.env(), std::move(options)));
  }
};

// SageMaker: SM_HOSTS / SM_CURRENT_HOST from `input.env`; ctor port and
// overrides.
class SageMakerAdapter : public ResolverAdapter {
 public:
  absl::StatusOr<std::unique_ptr<ClusterResolver>> Build(
      const Json& spec, CaseContext& ctx) const override {
    const Json& ctor = Field(spec, "ctor");
    COHORT_ASSIGN_OR_RETURN(auto options, TfConfigOptions(ctor));
    COHORT_ASSIGN_OR_RETURN(auto port, OptInt(ctor, "port"));
    return std::unique_ptr<ClusterResolver>(new SageMakerClusterResolver(
        ctx.env(),
        static_cast<int>(port.value_or(SageMakerClusterResolver::kDefaultPort)),
        std::move(options)));
  }
};

}  // namespace

void RegisterClusterAdapters(AdapterRegistry* registry) {
  registry->Register("ClusterSpec", std::make_unique<ClusterSpecAdapter>(
                                        /*server_def=*/false));
  registry->Register("ServerDef",
                     std::make_unique<ClusterSpecAdapter>(/*server_def=*/true));
  registry->Register("multi_worker_util",
                     std::make_unique<MultiWorkerUtilAdapter>());
  registry->Register("ClusterResolverBase",
                     std::make_unique<BaseResolverAdapter>());
  registry->Register("Simple", std::make_unique<SimpleAdapter>());
  registry->Register("Union", std::make_unique<UnionAdapter>());
  registry->Register("TFConfig", std::make_unique<TFConfigAdapter>());
  registry->Register("SageMaker", std::make_unique<SageMakerAdapter>());
}

}  // namespace cohort::conformance
