// Conformance adapters for the Cloud TPU resolver and client:
//   "TPU"                 input.ctor/env/fake, common steps plus get_master,
//                         get_job_name, is_running_in_gce and
//                         cloud_tpu_client.<method>
//   "TPU.device_dict"     _get_device_dict_and_cores (input.devices) and
//                         _verify_and_return_same_core_count (args.device_dict)
//   "TPUClient"           CloudTpuClient: construct, name, api_available,
//                         network_endpoints, recoverable, state, health,
//                         get project/zone
//   "TPUClient.endpoints" input.endpoints -> [{ipAddress, port}]
// `fake.tpu_nodes` ({full node name: node}) is served by a FakeTpuServer and
// `fake.gce_metadata` by a FakeMetadataServer; the real REST client reaches
// both. A coordinator without an address gets a real in-process
// CoordinationServer on an OS-chosen port (TensorFlow starts a server there).
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "cohort/base/status.h"
#include "cohort/cluster/resolvers/testing/fake_tpu_server.h"
#include "cohort/cluster/resolvers/tpu_client.h"
#include "cohort/cluster/resolvers/tpu_cluster_resolver.h"
#include "cohort/coord/coordination_server.h"
#include "tools/conformance/adapters.h"
#include "tools/conformance/resolver_fakes.h"

namespace cohort::conformance {
namespace {

absl::Status Unknown(const char* adapter, const Json& step) {
  return absl::UnimplementedError(absl::StrCat(
      "the ", adapter, " adapter does not know the step ", step.dump()));
}

std::string Text(const Json& v) {
  return v.is_string() ? v.get<std::string>() : v.dump();
}

// Client options from a ctor ({tpu, zone, project, ...}) and fake back ends.
absl::Status ClientOptions(const Json& spec, CaseContext& ctx,
                           CloudTpuClient::Options* o) {
  const Json& ctor = Field(spec, "ctor");
  const Json& fake = Field(spec, "fake");
  const Json& tpu = Field(ctor, "tpu");
  if (tpu.is_array()) {
    std::vector<std::string> names;
    for (const Json& n : tpu) names.push_back(Text(n));
    o->tpu_list = std::move(names);
  } else {
    COHORT_ASSIGN_OR_RETURN(o->tpu, OptString(ctor, "tpu"));
  }
  COHORT_ASSIGN_OR_RETURN(o->zone, OptString(ctor, "zone"));
  COHORT_ASSIGN_OR_RETURN(o->project, OptString(ctor, "project"));

  auto tpu_server = std::make_shared<testing::FakeTpuServer>(
      std::string("conformance-token"));
  const Json& nodes = Field(fake, "tpu_nodes");
  if (nodes.is_object()) {
    for (const auto& [name, node] : nodes.items())
      tpu_server->SetNode(name, node);
  }
  COHORT_RETURN_IF_ERROR(tpu_server->Start());
  ctx.KeepAlive(tpu_server);
  COHORT_ASSIGN_OR_RETURN(auto md,
                          StartFakeMetadata(Field(fake, "gce_metadata"), ctx));
  o->tpu_api_url = tpu_server->api_url();
  o->metadata.base_url = md->base_url();
  return absl::OkStatus();
}

Json EndpointsJson(const std::vector<TpuNetworkEndpoint>& endpoints) {
  Json out = Json::array();
  for (const TpuNetworkEndpoint& e : endpoints) out.push_back(e.raw);
  return out;
}

// Client calls shared by "TPUClient" and "TPU"'s cloud_tpu_client.<m>.
std::optional<StepOutcome> ClientCall(CloudTpuClient& c,
                                      const std::string& method) {
  if (method == "name") return StepOutcome::Value(c.name());
  if (method == "api_available") return StepOutcome::Value(c.api_available());
  if (method == "network_endpoints") {
    auto eps = c.NetworkEndpoints();
    if (!eps.ok()) return StepOutcome::Error(eps.status());
    return StepOutcome::Value(EndpointsJson(*eps));
  }
  if (method == "recoverable") {
    auto r = c.Recoverable();
    if (!r.ok()) return StepOutcome::Error(r.status());
    return StepOutcome::Value(*r);
  }
  if (method == "state" || method == "health") {
    auto v = c.GetProperty(method);
    if (!v.ok()) return StepOutcome::Error(v.status());
    return StepOutcome::Value(ToJson(*v));
  }
  return std::nullopt;
}

class TpuAdapter : public ResolverAdapter {
 public:
  // A case without `ctor` constructs nothing: only TensorFlow's module-level
  // functions (is_running_in_gce) can run.
  CaseRun Run(const Json& test_case, CaseContext& ctx) const override {
    const Json& input = Field(test_case, "input");
    if (input.is_object() && input.contains("ctor")) {
      return ResolverAdapter::Run(test_case, ctx);
    }
    CaseRun run;
    const Json& calls = Field(input, "calls");
    if (!calls.is_array()) return run;
    for (const Json& step : calls) {
      if (Field(step, "call") == Json("is_running_in_gce")) {
        run.steps.push_back(StepOutcome::Value(IsRunningInGce()));
      } else {
        run.steps.push_back(StepOutcome::Error(absl::FailedPreconditionError(
            absl::StrCat("the case constructs no TPU resolver (no ctor), so ",
                         step.dump(), " has nothing to run on"))));
      }
    }
    return run;
  }

  absl::StatusOr<std::unique_ptr<ClusterResolver>> Build(
      const Json& spec, CaseContext& ctx) const override {
    const Json& ctor = Field(spec, "ctor");
    TpuClusterResolver::Options o;
    COHORT_RETURN_IF_ERROR(ClientOptions(spec, ctx, &o.client));
    COHORT_ASSIGN_OR_RETURN(auto job_name, OptString(ctor, "job_name"));
    if (job_name) o.job_name = *job_name;
    COHORT_ASSIGN_OR_RETURN(o.coordinator_name,
                            OptString(ctor, "coordinator_name"));
    COHORT_ASSIGN_OR_RETURN(o.coordinator_address,
                            OptString(ctor, "coordinator_address"));
    const std::string coordinator = o.coordinator_name.value_or("");
    o.start_local_server = [&ctx, coordinator]() -> absl::StatusOr<int> {
      coord::CoordinationServerOptions options;
      // Loopback: a server beyond it needs a job token (or TLS), which the
      // conformance cases do not model; the port is what they check.
      options.address = "127.0.0.1:0";
      options.service.jobs = {{coordinator, 1}};
      COHORT_ASSIGN_OR_RETURN(auto server,
                              coord::CoordinationServer::Start(options));
      int port = server->port();
      ctx.KeepAlive(
          std::shared_ptr<coord::CoordinationServer>(std::move(server)));
      return port;
    };
    COHORT_ASSIGN_OR_RETURN(auto r, TpuClusterResolver::Create(ctx.env(), o));
    return std::unique_ptr<ClusterResolver>(std::move(r));
  }

  std::optional<StepOutcome> ExtraStep(ClusterResolver& resolver,
                                       const Json& step,
                                       CaseContext&) const override {
    if (!step.contains("call") || !step["call"].is_string())
      return std::nullopt;
    auto& tpu = static_cast<TpuClusterResolver&>(resolver);
    const std::string method = step["call"];
    if (method == "get_master")
      return StepOutcome::From([&]() -> absl::StatusOr<Json> {
        COHORT_ASSIGN_OR_RETURN(std::string m, tpu.master());
        return Json(m);
      }());
    if (method == "is_running_in_gce")
      return StepOutcome::Value(tpu.is_running_in_gce());
    // TF's get_job_name(): the task type (the job name, default "worker").
    if (method == "get_job_name")
      return StepOutcome::Value(ToJson(tpu.task_type()));
    const std::string prefix = "cloud_tpu_client.";
    if (absl::StartsWith(method, prefix)) {
      if (tpu.client() == nullptr) {
        return StepOutcome::Error(absl::FailedPreconditionError(
            "a local TPU has no Cloud TPU client"));
      }
      auto outcome = ClientCall(*tpu.client(), method.substr(prefix.size()));
      if (outcome) return outcome;
      return StepOutcome::Error(Unknown("TPU", step));
    }
    return std::nullopt;
  }
};

class TpuClientAdapter : public Adapter {
 public:
  CaseRun Run(const Json& test_case, CaseContext& ctx) const override {
    const Json& input = Field(test_case, "input");
    CaseRun run;
    CloudTpuClient::Options o;
    absl::Status setup = ClientOptions(input, ctx, &o);
    absl::StatusOr<std::unique_ptr<CloudTpuClient>> client =
        setup.ok() ? CloudTpuClient::Create(ctx.env(), o)
                   : absl::StatusOr<std::unique_ptr<CloudTpuClient>>(setup);
    const Json& calls = Field(input, "calls");
    if (!calls.is_array()) return run;
    for (const Json& step : calls) {
      if (step.contains("construct")) {
        run.steps.push_back(client.ok() ? StepOutcome::Ok()
                                        : StepOutcome::Error(client.status()));
        continue;
      }
      if (!client.ok()) {
        run.steps.push_back(StepOutcome::Error(client.status()));
        continue;
      }
      CloudTpuClient& c = **client;
      if (step.contains("get") && step["get"].is_string()) {
        const std::string attr = step["get"];
        if (attr == "project") {
          run.steps.push_back(StepOutcome::Value(ToJson(c.project())));
          continue;
        }
        if (attr == "zone") {
          run.steps.push_back(StepOutcome::Value(ToJson(c.zone())));
          continue;
        }
      }
      if (step.contains("call") && step["call"].is_string()) {
        auto outcome = ClientCall(c, step["call"].get<std::string>());
        if (outcome) {
          run.steps.push_back(*std::move(outcome));
          continue;
        }
      }
      run.steps.push_back(StepOutcome::Error(Unknown("TPUClient", step)));
    }
    return run;
  }
};

class TpuEndpointsAdapter : public Adapter {
 public:
  CaseRun Run(const Json& test_case, CaseContext&) const override {
    CaseRun run;
    auto text = OptString(Field(test_case, "input"), "endpoints");
    StepOutcome outcome =
        !text.ok() ? StepOutcome::Error(text.status())
                   : StepOutcome::Value(EndpointsJson(
                         EnvironmentVarToNetworkEndpoints(text->value_or(""))));
    const Json& results = Field(Field(test_case, "expect"), "results");
    size_t n = results.is_array() ? results.size() : 1;
    for (size_t i = 0; i < n; ++i) run.steps.push_back(outcome);
    return run;
  }
};

class TpuDeviceDictAdapter : public Adapter {
 public:
  CaseRun Run(const Json& test_case, CaseContext& ctx) const override {
    const Json& input = Field(test_case, "input");
    CaseRun run;
    const Json& calls = Field(input, "calls");
    if (!calls.is_array()) return run;
    for (const Json& step : calls) {
      const std::string method = Field(step, "call").is_string()
                                     ? step["call"].get<std::string>()
                                     : "";
      if (method == "_get_device_dict_and_cores") {
        TpuDeviceDetails d =
            GetTpuDeviceDictAndCores(ParseDevices(Field(input, "devices")));
        Json map = Json::object();
        for (const auto& [host, cores] : d.device_map) map[host] = cores;
        run.steps.push_back(StepOutcome::Value(
            Json{{"total_cores", d.total_cores}, {"device_map", map}}));
      } else if (method == "_verify_and_return_same_core_count") {
        std::map<std::string, std::vector<std::string>> dict;
        const Json& arg = Field(Field(step, "args"), "device_dict");
        if (arg.is_object()) {
          for (const auto& [host, cores] : arg.items()) {
            auto& list = dict[host];
            if (cores.is_array()) {
              for (const Json& c : cores) list.push_back(Text(c));
            }
          }
        }
        auto n = VerifyAndReturnSameCoreCount(dict);
        run.steps.push_back(n.ok() ? StepOutcome::Value(*n)
                                   : StepOutcome::Error(n.status()));
      } else {
        run.steps.push_back(
            StepOutcome::Error(Unknown("TPU.device_dict", step)));
      }
    }
    return run;
  }
};

}  // namespace

void RegisterTpuAdapters(AdapterRegistry* registry) {
  registry->Register("TPU", std::make_unique<TpuAdapter>());
  registry->Register("TPU.device_dict",
                     std::make_unique<TpuDeviceDictAdapter>());
  registry->Register("TPUClient", std::make_unique<TpuClientAdapter>());
  registry->Register("TPUClient.endpoints",
                     std::make_unique<TpuEndpointsAdapter>());
}

}  // namespace cohort::conformance
