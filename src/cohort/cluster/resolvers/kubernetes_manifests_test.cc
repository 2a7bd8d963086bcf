// Checks the manifests under deploy/kubernetes/ against what `cohort launch
// --engine kubernetes` relies on: an Indexed Job of --num-tasks pods, each
// named <job>-<index>.<service> by a headless Service, a rendezvous address
// that is task 0's name and a port every piece agrees on, a service account
// allowed to list the pods, the job token from a Secret, and resolver
// settings that find the Job's pods. The files are read with
// ParseKubeconfigText, so they must stay within its YAML subset (one object
// per file, block style).
#include <set>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "cohort/base/fake_env.h"
#include "cohort/cluster/resolver_registry.h"
#include "cohort/cluster/resolvers/kubernetes_cluster_resolver.h"
#include "cohort/cluster/resolvers/testing/fake_kubernetes_server.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort {
namespace {

using ::testing::Contains;
using ::testing::IsSupersetOf;

Json ReadSourceFile(const std::string& relative, bool yaml) {
  const std::string path = absl::StrCat(COHORT_SOURCE_DIR, "/", relative);
  absl::StatusOr<std::string> text = Env::Default()->ReadFile(path);
  EXPECT_TRUE(text.ok()) << text.status();
  if (!text.ok()) return Json::object();
  absl::StatusOr<Json> doc =
      yaml ? ParseKubeconfigText(*text, path) : ParseJson(*text, path);
  EXPECT_TRUE(doc.ok()) << doc.status();
  return doc.ok() ? *doc : Json::object();
}

// doc at a JSON pointer ("/spec/completions"), or null when absent.
Json At(const Json& doc, const std::string& pointer) {
  Json::json_pointer p(pointer);
  return doc.contains(p) ? doc[p] : Json();
}

class KubernetesManifestsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    service_account_ = Manifest("serviceaccount.yaml");
    role_ = Manifest("role.yaml");
    role_binding_ = Manifest("rolebinding.yaml");
    service_ = Manifest("service.yaml");
    job_ = Manifest("job.yaml");
    container_ = At(job_, "/spec/template/spec/containers/0");
  }

  static Json Manifest(const std::string& file) {
    return ReadSourceFile(absl::StrCat("deploy/kubernetes/", file),
                          /*yaml=*/true);
  }

  std::string JobName() const { return At(job_, "/metadata/name"); }
  std::string ServiceName() const { return At(service_, "/metadata/name"); }

  // The argument after `flag` in the container's command.
  std::string CommandArg(const std::string& flag) const {
    const Json& command = container_["command"];
    for (size_t i = 0; i + 1 < command.size(); ++i) {
      if (command[i] == flag) return command[i + 1];
    }
    ADD_FAILURE() << "no " << flag << " in " << command.dump();
    return "";
  }

  // The container's env entry named `name` (null when absent).
  Json EnvEntry(const std::string& name) const {
    for (const Json& entry : container_.value("env", Json::array())) {
      if (entry.value("name", "") == name) return entry;
    }
    return Json();
  }

  Json service_account_, role_, role_binding_, service_, job_, container_;
};

TEST_F(KubernetesManifestsTest, OneObjectPerFileWithoutNamespace) {
  EXPECT_EQ(At(service_account_, "/kind"), "ServiceAccount");
  EXPECT_EQ(At(role_, "/kind"), "Role");
  EXPECT_EQ(At(role_, "/apiVersion"), "rbac.authorization.k8s.io/v1");
  EXPECT_EQ(At(role_binding_, "/kind"), "RoleBinding");
  EXPECT_EQ(At(service_, "/kind"), "Service");
  EXPECT_EQ(At(job_, "/kind"), "Job");
  EXPECT_EQ(At(job_, "/apiVersion"), "batch/v1");
  // `kubectl apply -n <namespace>` places them all; a namespace written in a
  // file would win over it for that object only.
  for (const Json* doc :
       {&service_account_, &role_, &role_binding_, &service_, &job_}) {
    EXPECT_TRUE(At(*doc, "/metadata/namespace").is_null()) << doc->dump();
  }
}

TEST_F(KubernetesManifestsTest, JobIsAnIndexedGangOfNumTasks) {
  EXPECT_EQ(At(job_, "/spec/completionMode"), "Indexed");
  const std::string num_tasks = CommandArg("--num-tasks");
  int n = 0;
  ASSERT_TRUE(absl::SimpleAtoi(num_tasks, &n)) << num_tasks;
  EXPECT_GT(n, 0);
  // The YAML subset reads numbers as text.
  EXPECT_EQ(At(job_, "/spec/completions"), num_tasks);
  EXPECT_EQ(At(job_, "/spec/parallelism"), num_tasks);
  EXPECT_EQ(At(job_, "/spec/backoffLimit"), "0");
  EXPECT_EQ(At(job_, "/spec/template/spec/restartPolicy"), "Never");
  EXPECT_EQ(At(container_, "/command/0"), "cohort");
  EXPECT_EQ(At(container_, "/command/1"), "launch");
  EXPECT_EQ(CommandArg("--engine"), "kubernetes");
}

TEST_F(KubernetesManifestsTest, HeadlessServiceNamesEveryPod) {
  EXPECT_EQ(At(service_, "/spec/clusterIP"), "None");
  EXPECT_EQ(At(service_, "/spec/publishNotReadyAddresses"), true);
  EXPECT_EQ(At(job_, "/spec/template/spec/subdomain"), ServiceName());
  // Every label the Service selects on is one the Job's pods carry: the
  // template's own, or those the Job controller adds.
  Json carried = At(job_, "/spec/template/metadata/labels");
  if (carried.is_null()) carried = Json::object();
  carried["batch.kubernetes.io/job-name"] = JobName();
  carried["job-name"] = JobName();
  const Json selector = At(service_, "/spec/selector");
  ASSERT_TRUE(selector.is_object() && !selector.empty()) << selector.dump();
  for (const auto& [key, value] : selector.items()) {
    EXPECT_EQ(carried.value(key, Json()), value) << key;
  }
}

TEST_F(KubernetesManifestsTest, RendezvousIsTaskZeroOnTheServicePort) {
  const std::string rendezvous = CommandArg("--rendezvous");
  std::vector<std::string> host_port = absl::StrSplit(rendezvous, ':');
  ASSERT_EQ(host_port.size(), 2u) << rendezvous;
  EXPECT_EQ(host_port[0], absl::StrCat(JobName(), "-0.", ServiceName()));
  const std::string port = host_port[1];
  EXPECT_EQ(At(service_, "/spec/ports/0/port"), port);
  EXPECT_EQ(At(service_, "/spec/ports/0/targetPort"), port);
  EXPECT_EQ(At(container_, "/ports/0/containerPort"), port);
  EXPECT_EQ(At(EnvEntry("COHORT_KUBERNETES_PORT"), "/value"), port);
}

TEST_F(KubernetesManifestsTest, ServiceAccountMayListPodsAndNoMore) {
  const std::string account = At(service_account_, "/metadata/name");
  EXPECT_EQ(At(job_, "/spec/template/spec/serviceAccountName"), account);
  EXPECT_THAT(At(role_binding_, "/subjects"),
              Contains(Json({{"kind", "ServiceAccount"}, {"name", account}})));
  EXPECT_EQ(At(role_binding_, "/roleRef/kind"), "Role");
  EXPECT_EQ(At(role_binding_, "/roleRef/apiGroup"),
            "rbac.authorization.k8s.io");
  EXPECT_EQ(At(role_binding_, "/roleRef/name"), At(role_, "/metadata/name"));
  const Json rules = At(role_, "/rules");
  ASSERT_EQ(rules.size(), 1u) << rules.dump();
  EXPECT_EQ(rules[0]["apiGroups"], Json::array({""}));
  EXPECT_EQ(rules[0]["resources"], Json::array({"pods"}));
  std::vector<std::string> verbs = rules[0]["verbs"];
  EXPECT_THAT(verbs, IsSupersetOf({"get", "list"}));
  for (const std::string& verb : verbs) {
    EXPECT_THAT((std::set<std::string>{"get", "list", "watch"}),
                Contains(verb));
  }
}

TEST_F(KubernetesManifestsTest, JobTokenComesFromASecret) {
  const Json token = EnvEntry("COHORT_JOB_TOKEN");
  ASSERT_FALSE(token.is_null());
  EXPECT_FALSE(token.contains("value")) << "a literal token in job.yaml";
  EXPECT_FALSE(At(token, "/valueFrom/secretKeyRef/name").is_null());
  EXPECT_FALSE(At(token, "/valueFrom/secretKeyRef/key").is_null());
}

// The container's resolver settings, through the same factory the launcher's
// environment reaches, against a fake API server listing an Indexed Job's
// pods (indexed_job_pods.json, cut to --num-tasks pods) in namespace "ml".
TEST_F(KubernetesManifestsTest, ResolverSettingsFindTheJobsPodsInOrder) {
  int n = 0;
  ASSERT_TRUE(absl::SimpleAtoi(CommandArg("--num-tasks"), &n));
  const std::string selector =
      absl::StrCat("batch.kubernetes.io/job-name=", JobName());
  Json list = ReadSourceFile(
      "src/cohort/cluster/resolvers/testing/indexed_job_pods.json",
      /*yaml=*/false);
  Json items = Json::array();
  std::vector<std::string> want(n);
  for (const Json& pod : list["items"]) {
    int index = 0;
    ASSERT_TRUE(
        absl::SimpleAtoi(pod["metadata"]["annotations"]["batch.kubernetes.io/"
                                                        "job-completion-index"]
                             .get<std::string>(),
                         &index));
    if (index >= n) continue;
    items.push_back(pod);
    want[index] = absl::StrCat(
        pod["status"]["podIP"].get<std::string>(), ":",
        At(container_, "/ports/0/containerPort").get<std::string>());
  }
  list["items"] = items;
  testing::FakeKubernetesServer server{std::string("sa-token")};
  server.SetPodList(selector, list);
  ASSERT_TRUE(server.Start().ok());

  FakeEnv env;
  for (const Json& entry : container_["env"]) {
    const std::string name = entry["name"];
    if (entry.contains("value")) {
      env.SetVar(name, entry["value"].get<std::string>());
    } else if (At(entry, "/valueFrom/fieldRef/fieldPath") ==
               "metadata.namespace") {
      env.SetVar(name, "ml");
    } else if (!At(entry, "/valueFrom/secretKeyRef").is_null()) {
      env.SetVar(name, "secret");
    } else {
      ADD_FAILURE() << "unexpected env entry " << entry.dump();
    }
  }
  // Off-cluster through a kubeconfig: the fake server speaks plain HTTP.
  env.SetVar("KUBECONFIG", "/kc");
  env.SetFile("/kc", server.Kubeconfig("sa-token"));
  ResolverRegistry registry;
  RegisterKubernetesResolver(&registry);
  auto resolver = registry.Create("kubernetes", &env);
  ASSERT_TRUE(resolver.ok()) << resolver.status();
  auto spec = (*resolver)->cluster_spec();
  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_EQ(spec->jobs().size(), 1u) << spec->ToJson().dump();
  EXPECT_EQ(spec->ToJson()[spec->jobs()[0]], Json(want));
  ASSERT_EQ(server.requests().size(), 1u);
  EXPECT_EQ(
      server.requests()[0],
      absl::StrCat("GET /api/v1/namespaces/ml/pods?labelSelector=", selector));
}

}  // namespace
}  // namespace cohort
