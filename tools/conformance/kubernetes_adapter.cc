// Conformance adapter for the Kubernetes resolver. `input.fake.
// pods_by_label_selector` ({selector: [{name, phase, host_ip}]}) is served by
// an in-process FakeKubernetesServer, and the resolver reaches it through
// its real REST client (TensorFlow's `override_client` becomes an explicit
// API configuration pointing at the fake).
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cohort/base/status.h"
#include "cohort/cluster/resolvers/kubernetes_cluster_resolver.h"
#include "cohort/cluster/resolvers/testing/fake_kubernetes_server.h"
#include "tools/conformance/adapters.h"

namespace cohort::conformance {
namespace {

std::string Text(const Json& v) {
  return v.is_string() ? v.get<std::string>() : (v.is_null() ? "" : v.dump());
}

class KubernetesAdapter : public ResolverAdapter {
 public:
  absl::StatusOr<std::unique_ptr<ClusterResolver>> Build(
      const Json& spec, CaseContext& ctx) const override {
    const Json& ctor = Field(spec, "ctor");
    KubernetesClusterResolver::Options o;
    const Json& mapping = Field(ctor, "job_to_label_mapping");
    if (!mapping.is_null()) {
      if (!mapping.is_object()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "job_to_label_mapping must map jobs to selector lists, got ",
            JsonPreview(mapping)));
      }
      o.job_to_label_mapping.clear();
      for (const auto& [job, selectors] : mapping.items()) {
        auto& list = o.job_to_label_mapping[job];
        if (!selectors.is_array()) {
          return absl::InvalidArgumentError(
              absl::StrCat("selectors of job ", job, " must be a list"));
        }
        for (const Json& s : selectors) list.push_back(Text(s));
      }
    }
    COHORT_ASSIGN_OR_RETURN(auto port, OptInt(ctor, "tf_server_port"));
    if (port) o.tf_server_port = static_cast<int>(*port);
    if (ctor.is_object() && ctor.contains("rpc_layer")) {
      COHORT_ASSIGN_OR_RETURN(o.rpc_layer, OptString(ctor, "rpc_layer"));
    }
    const bool override_client =
        Field(ctor, "override_client").is_boolean()
            ? Field(ctor, "override_client").get<bool>()
            : !Field(ctor, "override_client").is_null();
    // Absent: the default (WITHIN_CLUSTER). Given, even as null (TF's
    // `executable_location=None`, which is neither enum value): parsed, so
    // that anything but the two names is TF's ValueError. C++'s enum cannot
    // hold such a value; its text form is where the check lives.
    if (ctor.is_object() && ctor.contains("executable_location")) {
      const Json& location = ctor["executable_location"];
      auto parsed = KubernetesClusterResolver::ParseExecutableLocation(
          location.is_string() ? location.get<std::string>() : location.dump());
      // As TensorFlow: the location only matters without an override client.
      if (!parsed.ok() && !override_client) return parsed.status();
      if (parsed.ok()) o.executable_location = *parsed;
    }
    if (override_client) {
      auto server = std::make_shared<testing::FakeKubernetesServer>(
          std::string("conformance-token"));
      const Json& pods = Field(Field(spec, "fake"), "pods_by_label_selector");
      if (pods.is_object()) {
        for (const auto& [selector, list] : pods.items()) {
          std::vector<testing::FakePod> fake_pods;
          if (list.is_array()) {
            for (const Json& p : list) {
              fake_pods.push_back({Text(Field(p, "name")),
                                   Text(Field(p, "phase")),
                                   Text(Field(p, "host_ip"))});
            }
          }
          server->SetPods(selector, std::move(fake_pods));
        }
      }
      COHORT_RETURN_IF_ERROR(server->Start());
      KubernetesApiConfig api;
      api.server = server->base_url();
      api.token = "conformance-token";
      api.source = "the conformance runner's fake API server";
      o.api = api;
      ctx.KeepAlive(server);
    }
    COHORT_ASSIGN_OR_RETURN(auto r,
                            KubernetesClusterResolver::Create(ctx.env(), o));
    return std::unique_ptr<ClusterResolver>(std::move(r));
  }
};

}  // namespace

void RegisterKubernetesAdapters(AdapterRegistry* registry) {
  registry->Register("Kubernetes", std::make_unique<KubernetesAdapter>());
}

}  // namespace cohort::conformance
