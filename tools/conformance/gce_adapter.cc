// Conformance adapter for the GCE resolver ("GCE", and nested "GCE" entries
// of "Union+GCE"). `fake.instance_group_pages` (pages of {instance: URL}) and
// `fake.instances` ({name: instance resource}) are served by an in-process
// FakeComputeServer; a FakeMetadataServer supplies the access token (and
// `fake.gce_metadata` values such as the project and zone). The resolver
// reaches both through its real REST client.
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cohort/base/status.h"
#include "cohort/cluster/resolvers/gce_cluster_resolver.h"
#include "cohort/cluster/resolvers/testing/fake_compute_server.h"
#include "cohort/cluster/resolvers/testing/fake_metadata_server.h"
#include "tools/conformance/adapters.h"
#include "tools/conformance/resolver_fakes.h"

namespace cohort::conformance {

absl::StatusOr<std::shared_ptr<testing::FakeMetadataServer>> StartFakeMetadata(
    const Json& gce_metadata, CaseContext& ctx) {
  auto md = std::make_shared<testing::FakeMetadataServer>("conformance-token");
  if (gce_metadata.is_object()) {
    for (const auto& [path, value] : gce_metadata.items()) {
      md->Set(path,
              value.is_string() ? value.get<std::string>() : value.dump());
    }
  } else if (!gce_metadata.is_null()) {
    md->FailAll(absl::StrCat("metadata server: ", gce_metadata.dump()));
  }
  COHORT_RETURN_IF_ERROR(md->Start());
  ctx.KeepAlive(md);
  return md;
}

namespace {

class GceAdapter : public ResolverAdapter {
 public:
  absl::StatusOr<std::unique_ptr<ClusterResolver>> Build(
      const Json& spec, CaseContext& ctx) const override {
    const Json& ctor = Field(spec, "ctor");
    const Json& fake = Field(spec, "fake");
    GceClusterResolver::Options o;
    COHORT_ASSIGN_OR_RETURN(o.project, OptString(ctor, "project"));
    COHORT_ASSIGN_OR_RETURN(o.zone, OptString(ctor, "zone"));
    COHORT_ASSIGN_OR_RETURN(auto group, OptString(ctor, "instance_group"));
    o.instance_group = group.value_or("");
    COHORT_ASSIGN_OR_RETURN(auto port, OptInt(ctor, "port"));
    if (port) o.port = static_cast<int>(*port);
    // Absent keys keep TensorFlow's defaults; explicit nulls are None.
    if (ctor.is_object() && ctor.contains("task_type")) {
      COHORT_ASSIGN_OR_RETURN(o.task_type, OptString(ctor, "task_type"));
    }
    if (ctor.is_object() && ctor.contains("task_id")) {
      COHORT_ASSIGN_OR_RETURN(o.task_id, OptInt(ctor, "task_id"));
    }
    if (ctor.is_object() && ctor.contains("rpc_layer")) {
      COHORT_ASSIGN_OR_RETURN(o.rpc_layer, OptString(ctor, "rpc_layer"));
    }

    auto compute = std::make_shared<testing::FakeComputeServer>(
        std::string("conformance-token"));
    std::vector<std::vector<std::string>> pages;
    const Json& fake_pages = Field(fake, "instance_group_pages");
    if (fake_pages.is_array()) {
      for (const Json& page : fake_pages) {
        std::vector<std::string> urls;
        if (page.is_array()) {
          for (const Json& item : page) {
            const Json& url = Field(item, "instance");
            if (url.is_string()) urls.push_back(url.get<std::string>());
          }
        }
        pages.push_back(std::move(urls));
      }
    }
    compute->SetInstanceGroup(o.instance_group, std::move(pages));
    const Json& instances = Field(fake, "instances");
    if (instances.is_object()) {
      for (const auto& [name, resource] : instances.items()) {
        compute->SetInstance(name, resource);
      }
    }
    COHORT_RETURN_IF_ERROR(compute->Start());
    ctx.KeepAlive(compute);
    COHORT_ASSIGN_OR_RETURN(
        auto md, StartFakeMetadata(Field(fake, "gce_metadata"), ctx));
    o.compute_api_url = compute->api_url();
    o.metadata.base_url = md->base_url();
    COHORT_ASSIGN_OR_RETURN(auto r, GceClusterResolver::Create(ctx.env(), o));
    return std::unique_ptr<ClusterResolver>(std::move(r));
  }
};

}  // namespace

void RegisterGceAdapters(AdapterRegistry* registry) {
  registry->Register("GCE", std::make_unique<GceAdapter>());
}

}  // namespace cohort::conformance
