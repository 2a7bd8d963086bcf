// cohort.ClusterSpec, the cluster resolvers and cohort.resolve().
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cohort/base/env.h"
#include "cohort/cluster/cluster_resolver.h"
#include "cohort/cluster/cluster_spec.h"
#include "cohort/cluster/resolve_report.h"
#include "cohort/cluster/resolver_registry.h"
#include "cohort/cluster/resolvers/gce_cluster_resolver.h"
#include "cohort/cluster/resolvers/kubernetes_cluster_resolver.h"
#include "cohort/cluster/resolvers/sagemaker_cluster_resolver.h"
#include "cohort/cluster/resolvers/simple_cluster_resolver.h"
#include "cohort/cluster/resolvers/slurm_cluster_resolver.h"
#include "cohort/cluster/resolvers/tf_config_cluster_resolver.h"
#include "cohort/cluster/resolvers/union_cluster_resolver.h"
#include "python/src/bindings.h"
#include "python/src/json_convert.h"
#include "python/src/status.h"

namespace py = pybind11;

namespace cohort::python {
namespace {

using OptString = std::optional<std::string>;
using OptInt = std::optional<int64_t>;

// A resolver shared between Python objects: the Union resolver owns its
// members, Python owns them too, so Union gets forwarders.
class SharedResolver : public ClusterResolver {
 public:
  explicit SharedResolver(std::shared_ptr<ClusterResolver> r)
      : r_(std::move(r)) {}
  std::string name() const override { return r_->name(); }
  absl::StatusOr<ClusterSpec> cluster_spec() override {
    return r_->cluster_spec();
  }
  absl::StatusOr<std::string> master(OptString task_type, OptInt task_id,
                                     OptString rpc_layer) override {
    return r_->master(std::move(task_type), task_id, std::move(rpc_layer));
  }
  OptString task_type() override { return r_->task_type(); }
  OptInt task_id() override { return r_->task_id(); }
  OptString rpc_layer() override { return r_->rpc_layer(); }
  absl::Status set_task_type(OptString v) override {
    return r_->set_task_type(std::move(v));
  }
  absl::Status set_task_id(OptInt v) override { return r_->set_task_id(v); }
  absl::Status set_rpc_layer(OptString v) override {
    return r_->set_rpc_layer(std::move(v));
  }
  OptString environment() override { return r_->environment(); }
  absl::StatusOr<AcceleratorCounts> num_accelerators(OptString task_type,
                                                     OptInt task_id) override {
    return r_->num_accelerators(std::move(task_type), task_id);
  }
  void set_device_lister(DeviceLister* lister) override {
    r_->set_device_lister(lister);
  }

 private:
  std::shared_ptr<ClusterResolver> r_;
};

}  // namespace

ClusterSpec SpecFromPython(py::handle cluster) {
  if (py::isinstance<ClusterSpec>(cluster)) return cluster.cast<ClusterSpec>();
  if (!py::isinstance<py::dict>(cluster)) {
    throw py::type_error(
        "cluster: expected a ClusterSpec or a dict {job: [address, ...] or "
        "{index: address}}, got " +
        py::str(py::type::of(cluster).attr("__name__")).cast<std::string>());
  }
  return ValueOrThrow(
      ClusterSpec::FromJson(ToJson(cluster, "cluster"), "cluster"));
}

namespace {

py::object AsDict(const ClusterSpec& spec) {
  // Sparse jobs come back as {index: address} with int keys, as in
  // TensorFlow's ClusterSpec.as_dict().
  return FromJson(spec.ToJson(), /*int_keys_at_depth=*/1);
}

void DefineClusterSpec(py::module_& m) {
  py::class_<ClusterSpec>(m, "ClusterSpec", R"doc(
The tasks of a cluster, by job: TensorFlow's tf.train.ClusterSpec.

    spec = cohort.ClusterSpec({"worker": ["w0:2222", "w1:2222"],
                               "ps": {0: "ps0:2222"}})
    spec.jobs                     # ['worker', 'ps']
    spec.task_address("worker", 1)  # 'w1:2222'
    spec.as_dict()                # the dict back (sparse jobs as dicts)

A job is a list (task i at position i) or a dict {index: address}.
Malformed input raises InvalidArgumentError naming the job and value.)doc")
      .def(py::init([](py::handle cluster) { return SpecFromPython(cluster); }),
           py::arg("cluster"),
           "Builds a spec from a dict or copies another ClusterSpec.")
      .def_property_readonly("jobs", &ClusterSpec::jobs,
                             "Job names in the order given.")
      .def(
          "num_tasks",
          [](const ClusterSpec& s, const std::string& job) {
            return ValueOrThrow(s.num_tasks(job));
          },
          py::arg("job_name"), "How many tasks `job_name` has.")
      .def(
          "task_indices",
          [](const ClusterSpec& s, const std::string& job) {
            return ValueOrThrow(s.task_indices(job));
          },
          py::arg("job_name"), "The defined task indices, ascending.")
      .def(
          "task_address",
          [](const ClusterSpec& s, const std::string& job, int index) {
            return ValueOrThrow(s.task_address(job, index));
          },
          py::arg("job_name"), py::arg("task_index"),
          "The address of one task; InvalidArgumentError when there is none.")
      .def(
          "job_tasks",
          [](const ClusterSpec& s, const std::string& job) {
            return ValueOrThrow(s.job_tasks(job));
          },
          py::arg("job_name"),
          "The job's addresses as a list, None where a sparse job has a gap.")
      .def("as_dict", &AsDict,
           "{job: [addresses]} for dense jobs, {job: {index: address}} for "
           "sparse ones.")
      .def("__bool__", [](const ClusterSpec& s) { return !s.empty(); })
      .def("__contains__", [](const ClusterSpec& s,
                              const std::string& job) { return s.HasJob(job); })
      // is_operator: another type gives NotImplemented (so == is False),
      // not TypeError.
      .def(
          "__eq__",
          [](const ClusterSpec& a, const ClusterSpec& b) { return a == b; },
          py::is_operator())
      .def(
          "__ne__",
          [](const ClusterSpec& a, const ClusterSpec& b) { return a != b; },
          py::is_operator())
      .def("__repr__", &ClusterSpec::DebugString);
}

template <typename Resolver>
std::shared_ptr<Resolver> Shared(std::unique_ptr<Resolver> r) {
  return std::shared_ptr<Resolver>(std::move(r));
}

std::map<std::string, int> Counts(const AcceleratorCounts& counts) {
  return std::map<std::string, int>(counts.begin(), counts.end());
}

void DefineResolvers(py::module_& m) {
  using R = ClusterResolver;
  py::class_<R, std::shared_ptr<R>>(m, "ClusterResolver", R"doc(
Where this process's cluster is: TensorFlow's ClusterResolver.

cluster_spec() may do I/O (environment, files, REST calls). The task_type,
task_id and rpc_layer attributes may be set (GCE refuses task_type).)doc")
      .def_property_readonly("name", &R::name)
      .def(
          "cluster_spec",
          [](R& r) {
            py::gil_scoped_release release;
            absl::StatusOr<ClusterSpec> spec = r.cluster_spec();
            py::gil_scoped_acquire acquire;
            return ValueOrThrow(std::move(spec));
          },
          "Resolves the cluster.")
      .def(
          "master",
          [](R& r, OptString task_type, OptInt task_id, OptString rpc_layer) {
            return ValueOrThrow(r.master(task_type, task_id, rpc_layer));
          },
          py::arg("task_type") = py::none(), py::arg("task_id") = py::none(),
          py::arg("rpc_layer") = py::none(),
          "The master URL of a task (by default this task's).")
      .def(
          "num_accelerators",
          [](R& r, OptString task_type, OptInt task_id) {
            return Counts(ValueOrThrow(r.num_accelerators(task_type, task_id)));
          },
          py::arg("task_type") = py::none(), py::arg("task_id") = py::none(),
          "Accelerators per type, e.g. {'GPU': 2}.")
      .def_property(
          "task_type", [](R& r) { return r.task_type(); },
          [](R& r, OptString v) { ThrowIfError(r.set_task_type(v)); })
      .def_property(
          "task_id", [](R& r) { return r.task_id(); },
          [](R& r, OptInt v) { ThrowIfError(r.set_task_id(v)); })
      .def_property(
          "rpc_layer", [](R& r) { return r.rpc_layer(); },
          [](R& r, OptString v) { ThrowIfError(r.set_rpc_layer(v)); })
      .def_property_readonly("environment", &R::environment);

  py::class_<TFConfigClusterResolver, R,
             std::shared_ptr<TFConfigClusterResolver>>(
      m, "TFConfigClusterResolver",
      "The cluster of the TF_CONFIG environment variable.")
      .def(py::init([](OptString task_type, OptInt task_id, OptString rpc_layer,
                       OptString environment) {
             TFConfigClusterResolver::Options o;
             o.task_type = task_type;
             o.task_id = task_id;
             o.rpc_layer = rpc_layer;
             o.environment = environment;
             return std::make_shared<TFConfigClusterResolver>(Env::Default(),
                                                              o);
           }),
           py::arg("task_type") = py::none(), py::arg("task_id") = py::none(),
           py::arg("rpc_layer") = py::none(),
           py::arg("environment") = py::none());

  py::class_<SimpleClusterResolver, R, std::shared_ptr<SimpleClusterResolver>>(
      m, "SimpleClusterResolver", "A resolver over a given ClusterSpec.")
      .def(py::init([](py::handle cluster_spec, std::string master,
                       OptString task_type, OptInt task_id,
                       std::string environment,
                       std::optional<std::map<std::string, int>> accelerators,
                       OptString rpc_layer) {
             SimpleClusterResolver::Options o;
             o.master = std::move(master);
             o.task_type = task_type;
             o.task_id = task_id;
             o.environment = std::move(environment);
             if (accelerators) {
               o.num_accelerators.insert(accelerators->begin(),
                                         accelerators->end());
             }
             o.rpc_layer = rpc_layer;
             return std::make_shared<SimpleClusterResolver>(
                 SpecFromPython(cluster_spec), o);
           }),
           py::arg("cluster_spec"), py::arg("master") = "",
           py::arg("task_type") = py::none(), py::arg("task_id") = py::none(),
           py::arg("environment") = "",
           py::arg("num_accelerators") = py::none(),
           py::arg("rpc_layer") = py::none());

  py::class_<SlurmClusterResolver, R, std::shared_ptr<SlurmClusterResolver>>(
      m, "SlurmClusterResolver",
      "The cluster of the current Slurm job step (SLURM_* variables).")
      .def(py::init([](std::optional<std::map<std::string, int>> jobs,
                       int port_base, std::optional<int> gpus_per_node,
                       std::optional<int> gpus_per_task,
                       std::optional<int> tasks_per_node, bool auto_set_gpu,
                       OptString rpc_layer) {
             SlurmClusterResolver::Options o;
             o.jobs = jobs;
             o.port_base = port_base;
             o.gpus_per_node = gpus_per_node;
             o.gpus_per_task = gpus_per_task;
             o.tasks_per_node = tasks_per_node;
             o.auto_set_gpu = auto_set_gpu;
             o.rpc_layer = rpc_layer;
             return Shared(
                 ValueOrThrow(SlurmClusterResolver::Create(Env::Default(), o)));
           }),
           py::arg("jobs") = py::none(), py::arg("port_base") = 8888,
           py::arg("gpus_per_node") = py::none(),
           py::arg("gpus_per_task") = py::none(),
           py::arg("tasks_per_node") = py::none(),
           py::arg("auto_set_gpu") = true, py::arg("rpc_layer") = "grpc");

  py::class_<SageMakerClusterResolver, TFConfigClusterResolver,
             std::shared_ptr<SageMakerClusterResolver>>(
      m, "SageMakerClusterResolver",
      "The cluster of a SageMaker training job (SM_HOSTS, SM_CURRENT_HOST).")
      .def(py::init([](int port) {
             return std::make_shared<SageMakerClusterResolver>(Env::Default(),
                                                               port);
           }),
           py::arg("port") = SageMakerClusterResolver::kDefaultPort);

  py::class_<KubernetesClusterResolver, R,
             std::shared_ptr<KubernetesClusterResolver>>(
      m, "KubernetesClusterResolver",
      "The pods of a Kubernetes job, found by label selectors.")
      .def(py::init(
               [](std::optional<std::map<std::string, std::vector<std::string>>>
                      job_to_label_mapping,
                  int tf_server_port, OptString rpc_layer,
                  const std::string& executable_location) {
                 KubernetesClusterResolver::Options o;
                 if (job_to_label_mapping) {
                   o.job_to_label_mapping = *job_to_label_mapping;
                 }
                 o.tf_server_port = tf_server_port;
                 o.rpc_layer = rpc_layer;
                 o.executable_location = ValueOrThrow(
                     KubernetesClusterResolver::ParseExecutableLocation(
                         executable_location));
                 return Shared(ValueOrThrow(
                     KubernetesClusterResolver::Create(Env::Default(), o)));
               }),
           py::arg("job_to_label_mapping") = py::none(),
           py::arg("tf_server_port") = 8470, py::arg("rpc_layer") = "grpc",
           py::arg("executable_location") = "WITHIN_CLUSTER");

  py::class_<GceClusterResolver, R, std::shared_ptr<GceClusterResolver>>(
      m, "GCEClusterResolver",
      "The instances of a Compute Engine managed instance group.")
      .def(
          py::init([](OptString project, OptString zone,
                      std::string instance_group, int port, OptString task_type,
                      OptInt task_id, OptString rpc_layer) {
            GceClusterResolver::Options o;
            o.project = project;
            o.zone = zone;
            o.instance_group = std::move(instance_group);
            o.port = port;
            o.task_type = task_type;
            o.task_id = task_id;
            o.rpc_layer = rpc_layer;
            return Shared(
                ValueOrThrow(GceClusterResolver::Create(Env::Default(), o)));
          }),
          py::arg("project") = py::none(), py::arg("zone") = py::none(),
          py::arg("instance_group") = "", py::arg("port") = 8470,
          py::arg("task_type") = "worker", py::arg("task_id") = 0,
          py::arg("rpc_layer") = "grpc");

  py::class_<UnionClusterResolver, R, std::shared_ptr<UnionClusterResolver>>(
      m, "UnionClusterResolver",
      "The union of several resolvers' clusters (task and rpc layer from the "
      "first, unless given).")
      .def(py::init([](py::args resolvers, OptString task_type, OptInt task_id,
                       OptString rpc_layer) {
             std::vector<std::unique_ptr<ClusterResolver>> members;
             for (py::handle r : resolvers) {
               if (!py::isinstance<ClusterResolver>(r)) {
                 ThrowStatus(absl::InvalidArgumentError(
                     "All arguments must be a sub-class of "
                     "`ClusterResolver`"));
               }
               members.push_back(std::make_unique<SharedResolver>(
                   r.cast<std::shared_ptr<ClusterResolver>>()));
             }
             UnionClusterResolver::Overrides o;
             o.task_type = task_type;
             o.task_id = task_id;
             o.rpc_layer = rpc_layer;
             return Shared(ValueOrThrow(
                 UnionClusterResolver::Create(std::move(members), o)));
           }),
           py::kw_only(), py::arg("task_type") = py::none(),
           py::arg("task_id") = py::none(), py::arg("rpc_layer") = py::none());

  m.def(
      "resolve",
      [](const std::string& resolver) {
        absl::StatusOr<ResolveReport> report;
        {
          py::gil_scoped_release release;
          report = ResolveCluster(BuiltinResolverRegistry(), resolver,
                                  Env::Default());
        }
        ResolveReport r = ValueOrThrow(std::move(report));
        py::object out = FromJson(r.json);
        // The spec as a dict with TensorFlow's int keys for sparse jobs.
        out["cluster"] = AsDict(r.cluster);
        return out;
      },
      py::arg("resolver") = "auto", R"doc(
Resolves this process's cluster, as `cohort resolve --format json` does.

Returns a dict with the keys resolver, cluster, task_type, task_id, master,
rpc_layer and num_accelerators (None where the resolver cannot say).
`resolver` is "auto" (the first whose environment is present: TF_CONFIG,
Slurm, SageMaker, Kubernetes) or a name: tf_config, slurm, sagemaker,
kubernetes, gce, tpu.)doc");
}

}  // namespace

void DefineCluster(py::module_& m) {
  DefineClusterSpec(m);
  DefineResolvers(m);
}

}  // namespace cohort::python
