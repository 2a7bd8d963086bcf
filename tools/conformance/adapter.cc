#include "tools/conformance/adapter.h"

#include <map>

#include "absl/strings/str_cat.h"
#include "cohort/base/logging.h"

namespace cohort::conformance {

const Json& Field(const Json& obj, const char* key) {
  static const Json* const kNull = new Json(nullptr);
  if (!obj.is_object()) return *kNull;
  auto it = obj.find(key);
  return it == obj.end() ? *kNull : *it;
}

absl::StatusOr<std::optional<std::string>> OptString(const Json& obj,
                                                     const char* key) {
  const Json& v = Field(obj, key);
  if (v.is_null()) return std::optional<std::string>();
  if (!v.is_string()) {
    return absl::InvalidArgumentError(
        absl::StrCat("case field \"", key, "\" must be a string or null, got ",
                     JsonPreview(v)));
  }
  return std::optional<std::string>(v.get<std::string>());
}

absl::StatusOr<std::optional<int64_t>> OptInt(const Json& obj,
                                              const char* key) {
  const Json& v = Field(obj, key);
  if (v.is_null()) return std::optional<int64_t>();
  if (!v.is_number_integer()) {
    return absl::InvalidArgumentError(
        absl::StrCat("case field \"", key,
                     "\" must be an integer or null, got ", JsonPreview(v)));
  }
  return std::optional<int64_t>(v.get<int64_t>());
}

std::vector<DeviceInfo> ParseDevices(const Json& list) {
  std::vector<DeviceInfo> devices;
  if (!list.is_array()) return devices;
  for (const Json& d : list) {
    DeviceInfo info;
    if (d.contains("name") && d["name"].is_string()) info.name = d["name"];
    if (d.contains("device_type") && d["device_type"].is_string()) {
      info.device_type = d["device_type"];
    }
    devices.push_back(std::move(info));
  }
  return devices;
}

Json ToJson(const std::optional<std::string>& v) {
  return v.has_value() ? Json(*v) : Json(nullptr);
}
Json ToJson(const std::optional<int64_t>& v) {
  return v.has_value() ? Json(*v) : Json(nullptr);
}
Json ToJson(const AcceleratorCounts& counts) {
  Json out = Json::object();
  for (const auto& [type, count] : counts) out[type] = count;
  return out;
}

Json ClusterDefToJson(const ClusterDef& def) {
  Json out = Json::array();
  for (const JobDef& job : def.job()) {
    Json tasks = Json::object();
    for (const auto& [index, address] : job.tasks()) {
      tasks[std::to_string(index)] = address;
    }
    out.push_back({{"name", job.name()}, {"tasks", std::move(tasks)}});
  }
  return out;
}

std::optional<absl::StatusCode> TfErrorCode(const std::string& name) {
  using C = absl::StatusCode;
  static const auto* const kTfErrors = new std::map<std::string, C>{
      {"CancelledError", C::kCancelled},
      {"UnknownError", C::kUnknown},
      {"InvalidArgumentError", C::kInvalidArgument},
      {"DeadlineExceededError", C::kDeadlineExceeded},
      {"NotFoundError", C::kNotFound},
      {"AlreadyExistsError", C::kAlreadyExists},
      {"PermissionDeniedError", C::kPermissionDenied},
      {"ResourceExhaustedError", C::kResourceExhausted},
      {"FailedPreconditionError", C::kFailedPrecondition},
      {"AbortedError", C::kAborted},
      {"OutOfRangeError", C::kOutOfRange},
      {"UnimplementedError", C::kUnimplemented},
      {"InternalError", C::kInternal},
      {"UnavailableError", C::kUnavailable},
      {"DataLossError", C::kDataLoss},
      {"UnauthenticatedError", C::kUnauthenticated},
  };
  auto it = kTfErrors->find(name);
  if (it == kTfErrors->end()) return std::nullopt;
  return it->second;
}

Json ServerDefToJson(const ServerDef& def) {
  return {{"cluster", ClusterDefToJson(def.cluster())},
          {"job_name", def.job_name()},
          {"task_index", def.task_index()},
          {"protocol", def.protocol()}};
}

CaseContext::CaseContext(const Json& input, const AdapterRegistry* registry)
    : registry_(registry) {
  const Json& vars = Field(input, "env");
  if (vars.is_object()) {
    for (const auto& [name, value] : vars.items()) {
      if (value.is_string()) {
        env_.SetVar(name, value.get<std::string>());
      } else if (!value.is_null()) {
        env_.SetVar(name, value.dump());
      }
    }
  }
  const Json& unset = Field(input, "env_unset");
  if (unset.is_array()) {
    for (const Json& name : unset) {
      if (name.is_string()) env_.UnsetVar(name.get<std::string>());
    }
  }
  const Json& devices = Field(input, "devices");
  if (devices.is_array()) {
    devices_ = std::make_unique<FakeDeviceLister>(ParseDevices(devices));
  } else if (devices.is_object() && devices.contains("raises")) {
    const Json& raises = devices["raises"];
    const Json& match = Field(devices, "match");
    std::optional<absl::StatusCode> code =
        raises.is_string() ? TfErrorCode(raises.get<std::string>())
                           : std::nullopt;
    // A name the runner cannot map is a fault of the case file: a listing
    // that fails Internal says so instead of passing for another error.
    absl::Status error =
        code ? absl::Status(*code,
                            match.is_string() ? match.get<std::string>() : "")
             : absl::InternalError(
                   absl::StrCat("input.devices.raises ", raises.dump(),
                                " is not a TensorFlow error class name"));
    devices_ = std::make_unique<FakeDeviceLister>(std::move(error));
  }
}

CaseContext::~CaseContext() {
  while (!keep_alive_.empty()) keep_alive_.pop_back();
}

void AdapterRegistry::Register(const std::string& resolver,
                               std::unique_ptr<Adapter> adapter) {
  COHORT_CHECK(adapters_.count(resolver) == 0)
      << "conformance adapter for '" << resolver << "' registered twice";
  adapters_[resolver] = std::move(adapter);
}

const Adapter* AdapterRegistry::Find(const std::string& resolver) const {
  auto it = adapters_.find(resolver);
  if (it != adapters_.end()) return it->second.get();
  size_t plus = resolver.find('+');
  if (plus != std::string::npos) return Find(resolver.substr(0, plus));
  return nullptr;
}

const ResolverAdapter* AdapterRegistry::FindResolver(
    const std::string& kind) const {
  auto it = adapters_.find(kind);
  if (it == adapters_.end()) return nullptr;
  return dynamic_cast<const ResolverAdapter*>(it->second.get());
}

namespace {

absl::Status UnknownStep(const Json& step) {
  return absl::UnimplementedError(
      absl::StrCat("the conformance runner does not know the step ",
                   step.dump(), " for this resolver"));
}

}  // namespace

std::optional<StepOutcome> ResolverAdapter::CommonStep(ClusterResolver& r,
                                                       const Json& step,
                                                       CaseContext& ctx) {
  if (step.contains("call")) {
    const std::string method = step["call"].is_string() ? step["call"] : "";
    const Json& args = Field(step, "args");
    if (method == "cluster_spec") {
      auto spec = r.cluster_spec();
      if (!spec.ok()) return StepOutcome::Error(spec.status());
      return StepOutcome::Value(spec->ToJson());
    }
    if (method == "master") {
      auto type = OptString(args, "task_type");
      auto id = OptInt(args, "task_id");
      auto rpc = OptString(args, "rpc_layer");
      if (!type.ok()) return StepOutcome::Error(type.status());
      if (!id.ok()) return StepOutcome::Error(id.status());
      if (!rpc.ok()) return StepOutcome::Error(rpc.status());
      auto master = r.master(*type, *id, *rpc);
      if (!master.ok()) return StepOutcome::Error(master.status());
      return StepOutcome::Value(*master);
    }
    if (method == "num_accelerators") {
      auto type = OptString(args, "task_type");
      auto id = OptInt(args, "task_id");
      if (!type.ok()) return StepOutcome::Error(type.status());
      if (!id.ok()) return StepOutcome::Error(id.status());
      auto counts = r.num_accelerators(*type, *id);
      if (!counts.ok()) return StepOutcome::Error(counts.status());
      return StepOutcome::Value(ToJson(*counts));
    }
    return std::nullopt;
  }
  if (step.contains("get")) {
    const std::string attr = step["get"].is_string() ? step["get"] : "";
    if (attr == "task_type") return StepOutcome::Value(ToJson(r.task_type()));
    if (attr == "task_id") return StepOutcome::Value(ToJson(r.task_id()));
    if (attr == "rpc_layer") return StepOutcome::Value(ToJson(r.rpc_layer()));
    if (attr == "environment") {
      return StepOutcome::Value(ToJson(r.environment()));
    }
    return std::nullopt;
  }
  if (step.contains("set")) {
    const Json& set = step["set"];
    if (!set.is_object() || set.size() != 1) return std::nullopt;
    const std::string attr = set.begin().key();
    absl::Status status;
    if (attr == "task_type" || attr == "rpc_layer") {
      auto v = OptString(set, attr.c_str());
      if (!v.ok()) return StepOutcome::Error(v.status());
      status = attr == "task_type" ? r.set_task_type(*v) : r.set_rpc_layer(*v);
    } else if (attr == "task_id") {
      auto v = OptInt(set, "task_id");
      if (!v.ok()) return StepOutcome::Error(v.status());
      status = r.set_task_id(*v);
    } else {
      return std::nullopt;
    }
    if (!status.ok()) return StepOutcome::Error(status);
    return StepOutcome::Ok();
  }
  if (step.contains("get_env")) {
    const Json& name = step["get_env"];
    if (!name.is_string()) return std::nullopt;
    return StepOutcome::Value(
        ToJson(ctx.env()->GetVar(name.get<std::string>())));
  }
  return std::nullopt;
}

CaseRun ResolverAdapter::Run(const Json& test_case, CaseContext& ctx) const {
  const Json& input = Field(test_case, "input");
  const Json& calls = Field(input, "calls");
  CaseRun run;
  auto resolver = Build(input, ctx);
  if (ctx.skip_reason()) {
    run.skip_reason = ctx.skip_reason();
    return run;
  }
  if (resolver.ok() && ctx.devices() != nullptr) {
    (*resolver)->set_device_lister(ctx.devices());
  }
  if (!calls.is_array()) return run;
  for (const Json& step : calls) {
    if (step.contains("construct")) {
      run.steps.push_back(resolver.ok()
                              ? StepOutcome::Ok()
                              : StepOutcome::Error(resolver.status()));
      continue;
    }
    if (!resolver.ok()) {
      // Construction failed where the script expected a resolver: every step
      // reports the construction error.
      run.steps.push_back(StepOutcome::Error(resolver.status()));
      continue;
    }
    std::optional<StepOutcome> outcome = ExtraStep(**resolver, step, ctx);
    if (!outcome) outcome = CommonStep(**resolver, step, ctx);
    if (!outcome) outcome = StepOutcome::Error(UnknownStep(step));
    run.steps.push_back(*std::move(outcome));
  }
  return run;
}

}  // namespace cohort::conformance
