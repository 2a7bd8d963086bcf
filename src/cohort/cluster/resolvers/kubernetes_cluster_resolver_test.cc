#include "cohort/cluster/resolvers/kubernetes_cluster_resolver.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cohort/base/fake_env.h"
#include "cohort/cluster/resolver_registry.h"
#include "cohort/cluster/resolvers/testing/fake_kubernetes_server.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort {
namespace {

using testing::FakeKubernetesServer;
using testing::FakePod;
using ::testing::HasSubstr;

class KubernetesClusterResolverTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(server_.Start().ok()); }

  std::unique_ptr<KubernetesClusterResolver> Make(
      KubernetesClusterResolver::Options o = {}) {
    KubernetesApiConfig api;
    api.server = server_.base_url();
    api.token = "sa-token";
    api.source = "test";
    o.api = api;
    auto r = KubernetesClusterResolver::Create(&env_, o);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? std::move(*r) : nullptr;
  }

  FakeEnv env_;
  FakeKubernetesServer server_{std::string("sa-token")};
};

TEST_F(KubernetesClusterResolverTest, SortsByNameAndUsesHostIp) {
  server_.SetPods("job-name=tensorflow",
                  {{"tensorflow-abc123", "Running", "10.1.2.3"},
                   {"tensorflow-def456", "Running", "10.1.2.4"},
                   {"tensorflow-999999", "Running", "10.1.2.5"}});
  auto r = Make();
  auto spec = r->cluster_spec();
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->ToJson(), Json::parse(R"({"worker":
      ["10.1.2.5:8470", "10.1.2.3:8470", "10.1.2.4:8470"]})"));
  ASSERT_EQ(server_.requests().size(), 1u);
  EXPECT_EQ(server_.requests()[0],
            "GET /api/v1/pods?labelSelector=job-name=tensorflow");
}

TEST_F(KubernetesClusterResolverTest, SelectorsConcatenateInOrder) {
  server_.SetPods("job-name=worker1",
                  {{"b", "Running", "10.0.0.2"}, {"a", "Running", "10.0.0.1"}});
  server_.SetPods("job-name=worker2", {{"a", "Running", "10.0.0.3"}});
  server_.SetPods("job-name=ps", {{"ps-1", "Running", "10.0.1.1"}});
  KubernetesClusterResolver::Options o;
  o.job_to_label_mapping = {
      {"worker", {"job-name=worker1", "job-name=worker2"}},
      {"ps", {"job-name=ps"}}};
  o.tf_server_port = 2222;
  auto r = Make(o);
  auto spec = r->cluster_spec();
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->ToJson(), Json::parse(R"({"ps": ["10.0.1.1:2222"],
      "worker": ["10.0.0.1:2222", "10.0.0.2:2222", "10.0.0.3:2222"]})"));
}

TEST_F(KubernetesClusterResolverTest, NonRunningPodFails) {
  server_.SetPods("job-name=tensorflow",
                  {{"tensorflow-abc123", "Failed", "10.1.2.3"}});
  auto spec = Make()->cluster_spec();
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(
      spec.status().message(),
      HasSubstr("Pod \"tensorflow-abc123\" is not running; phase: \"Failed\""));
}

TEST_F(KubernetesClusterResolverTest, MasterNeedsTaskTypeAndId) {
  server_.SetPods("job-name=tensorflow", {{"worker-0", "Running", "10.1.2.3"},
                                          {"worker-1", "Running", "10.1.2.4"}});
  auto r = Make();
  EXPECT_EQ(*r->master(), "");
  EXPECT_EQ(r->task_type(), std::nullopt);
  EXPECT_EQ(r->rpc_layer(), "grpc");
  EXPECT_EQ(*r->master("worker", 1, "http"), "http://10.1.2.4:8470");
  ASSERT_TRUE(r->set_task_type("worker").ok());
  ASSERT_TRUE(r->set_task_id(0).ok());
  EXPECT_EQ(*r->master(), "grpc://10.1.2.3:8470");
}

TEST_F(KubernetesClusterResolverTest, ApiErrorsNameEndpointStatusAndBody) {
  server_.FailWith(std::make_pair(
      403, std::string(R"({"kind":"Status","message":"pods is forbidden"})")));
  auto spec = Make()->cluster_spec();
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(spec.status().message(),
              HasSubstr(server_.base_url() + "/api/v1/pods"));
  EXPECT_THAT(spec.status().message(), HasSubstr("HTTP 403"));
  EXPECT_THAT(spec.status().message(), HasSubstr("pods is forbidden"));
  EXPECT_THAT(spec.status().message(), HasSubstr("list pods"));
}

TEST_F(KubernetesClusterResolverTest, WrongTokenIsUnauthenticated) {
  KubernetesApiConfig api;
  api.server = server_.base_url();
  api.token = "wrong";
  KubernetesClusterResolver::Options o;
  o.api = api;
  auto r = KubernetesClusterResolver::Create(&env_, o);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ((*r)->cluster_spec().status().code(),
            absl::StatusCode::kUnauthenticated);
}

// ---------------------------------------------------------------------------
// An Indexed Job's pods, as a real API server lists them (fixture file).

constexpr char kTrainSelector[] = "batch.kubernetes.io/job-name=train";
constexpr char kIndexKey[] = "batch.kubernetes.io/job-completion-index";

// indexed_job_pods.json: Job "train" in namespace "ml", completions 12, all
// running, listed by name as the API server does (train-0, train-1,
// train-10, train-11, train-2, ...). Pod of index i runs on node i % 3
// (hostIP 10.128.0.11 + i % 3) with podIP 10.8.<i % 3>.<14 + i / 3>.
Json IndexedJobPods() {
  const std::string path = absl::StrCat(
      COHORT_SOURCE_DIR,
      "/src/cohort/cluster/resolvers/testing/indexed_job_pods.json");
  absl::StatusOr<std::string> text = Env::Default()->ReadFile(path);
  EXPECT_TRUE(text.ok()) << text.status();
  absl::StatusOr<Json> list = ParseJson(text.ok() ? *text : "{}", path);
  EXPECT_TRUE(list.ok()) << list.status();
  return list.ok() ? *list : Json::object();
}

std::string PodIpOfIndex(int i) {
  return absl::StrCat("10.8.", i % 3, ".", 14 + i / 3);
}

// The listed pod whose annotation says completion index `index`.
Json& PodOfIndex(Json& list, int index) {
  for (Json& pod : list["items"]) {
    if (pod["metadata"]["annotations"][kIndexKey] == std::to_string(index)) {
      return pod;
    }
  }
  ADD_FAILURE() << "no pod of index " << index;
  static Json none;
  return none;
}

// Another incarnation of `pod`'s index, as the Job controller creates after
// a failure: a new name (and uid, IP), the same labels and annotations.
Json Incarnation(const Json& pod, const std::string& name,
                 const std::string& phase, const std::string& pod_ip) {
  Json copy = pod;
  copy["metadata"].erase("deletionTimestamp");
  copy["metadata"].erase("deletionGracePeriodSeconds");
  copy["metadata"]["name"] = name;
  copy["metadata"]["uid"] = absl::StrCat("uid-of-", name);
  copy["status"]["phase"] = phase;
  copy["status"]["podIP"] = pod_ip;
  copy["status"]["podIPs"] = Json::array({{{"ip", pod_ip}}});
  return copy;
}

KubernetesClusterResolver::Options IndexedJobOptions() {
  KubernetesClusterResolver::Options o;
  o.job_to_label_mapping = {{"worker", {kTrainSelector}}};
  o.tf_server_port = 7070;
  o.pod_namespace = "ml";
  o.order = KubernetesClusterResolver::PodOrder::kByCompletionIndex;
  o.address = KubernetesClusterResolver::AddressSource::kPodIp;
  return o;
}

TEST_F(KubernetesClusterResolverTest, IndexedJobByCompletionIndexAndPodIp) {
  server_.SetPodList(kTrainSelector, IndexedJobPods());
  auto r = Make(IndexedJobOptions());
  auto spec = r->cluster_spec();
  ASSERT_TRUE(spec.ok()) << spec.status();
  // Numeric order (10 and 11 last), one distinct pod IP per task although
  // four pods share each node.
  EXPECT_EQ(spec->ToJson(), Json::parse(R"({"worker": [
      "10.8.0.14:7070", "10.8.1.14:7070", "10.8.2.14:7070", "10.8.0.15:7070",
      "10.8.1.15:7070", "10.8.2.15:7070", "10.8.0.16:7070", "10.8.1.16:7070",
      "10.8.2.16:7070", "10.8.0.17:7070", "10.8.1.17:7070",
      "10.8.2.17:7070"]})"));
  EXPECT_EQ(*r->master("worker", 10, "grpc"), "grpc://10.8.1.17:7070");
  ASSERT_EQ(server_.requests().size(), 2u);
  EXPECT_EQ(server_.requests()[0],
            "GET /api/v1/namespaces/ml/pods?labelSelector=batch.kubernetes.io/"
            "job-name=train");
}

TEST_F(KubernetesClusterResolverTest, IndexedJobByNameKeepsTensorFlowOrder) {
  server_.SetPodList(kTrainSelector, IndexedJobPods());
  KubernetesClusterResolver::Options o;
  o.job_to_label_mapping = {{"worker", {kTrainSelector}}};
  auto spec = Make(o)->cluster_spec();
  ASSERT_TRUE(spec.ok()) << spec.status();
  // The defaults: names as text ("train-10-..." before "train-2-...") and
  // node IPs, which repeat; why Indexed Jobs need the other options.
  EXPECT_EQ(spec->ToJson(), Json::parse(R"({"worker": [
      "10.128.0.11:8470", "10.128.0.12:8470", "10.128.0.12:8470",
      "10.128.0.13:8470", "10.128.0.13:8470", "10.128.0.11:8470",
      "10.128.0.12:8470", "10.128.0.13:8470", "10.128.0.11:8470",
      "10.128.0.12:8470", "10.128.0.13:8470", "10.128.0.11:8470"]})"));
  EXPECT_EQ(
      server_.requests()[0],
      "GET /api/v1/pods?labelSelector=batch.kubernetes.io/job-name=train");
}

TEST_F(KubernetesClusterResolverTest, NamespaceListsOnlyThatNamespace) {
  server_.SetPodList(kTrainSelector, IndexedJobPods());
  KubernetesClusterResolver::Options o = IndexedJobOptions();
  o.pod_namespace = "other";
  auto spec = Make(o)->cluster_spec();
  ASSERT_TRUE(spec.ok()) << spec.status();
  // No pod listed is no error: the caller compares the count.
  EXPECT_TRUE(spec->ToJson()["worker"].empty()) << spec->ToJson();
  EXPECT_EQ(server_.requests()[0],
            "GET /api/v1/namespaces/other/pods?labelSelector=batch.kubernetes."
            "io/job-name=train");

  // The namespaced list needs the token as much as the cluster-wide one.
  KubernetesApiConfig api;
  api.server = server_.base_url();
  api.token = "wrong";
  o.api = api;
  auto r = KubernetesClusterResolver::Create(&env_, o);
  ASSERT_TRUE(r.ok()) << r.status();
  auto denied = (*r)->cluster_spec();
  EXPECT_EQ(denied.status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(denied.status().message(), HasSubstr("in namespace \"other\""));

  o.pod_namespace = "";
  auto empty = KubernetesClusterResolver::Create(&env_, o);
  EXPECT_EQ(empty.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(empty.status().message(), HasSubstr("pod_namespace"));
}

// Index 2's first pod was evicted: it stays listed as Failed next to its
// running replacement. Index 5's pod is being deleted while its replacement
// already runs. Each index is the running pod not being deleted.
TEST_F(KubernetesClusterResolverTest, IndexedJobSkipsEarlierIncarnations) {
  Json list = IndexedJobPods();
  Json& evicted = PodOfIndex(list, 2);
  Json replacement2 =
      Incarnation(evicted, "train-2-wq7zd", "Running", "10.8.0.30");
  evicted["status"]["phase"] = "Failed";
  evicted["status"]["reason"] = "Evicted";
  Json& terminating = PodOfIndex(list, 5);
  terminating["metadata"]["deletionTimestamp"] = "2024-05-14T10:01:00Z";
  terminating["metadata"]["deletionGracePeriodSeconds"] = 30;
  Json replacement5 =
      Incarnation(terminating, "train-5-b8xkq", "Running", "10.8.1.30");
  list["items"].push_back(replacement2);
  list["items"].push_back(replacement5);
  server_.SetPodList(kTrainSelector, list);

  auto spec = Make(IndexedJobOptions())->cluster_spec();
  ASSERT_TRUE(spec.ok()) << spec.status();
  std::vector<std::string> want;
  for (int i = 0; i < 12; ++i) {
    want.push_back(absl::StrCat(i == 2   ? "10.8.0.30"
                                : i == 5 ? "10.8.1.30"
                                         : PodIpOfIndex(i),
                                ":7070"));
  }
  EXPECT_EQ(spec->ToJson(), Json({{"worker", want}}));
}

TEST_F(KubernetesClusterResolverTest, IndexWithoutRunningPodIsRetryable) {
  Json list = IndexedJobPods();
  Json& failed = PodOfIndex(list, 3);
  const std::string failed_name = failed["metadata"]["name"];
  Json pending = Incarnation(failed, "train-3-zr5tp", "Pending", "");
  pending["status"].erase("podIP");
  pending["status"].erase("podIPs");
  failed["status"]["phase"] = "Failed";
  list["items"].push_back(pending);
  server_.SetPodList(kTrainSelector, list);
  auto spec = Make(IndexedJobOptions())->cluster_spec();
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(spec.status().message(),
              HasSubstr("No running pod for completion index 3"));
  EXPECT_THAT(spec.status().message(),
              HasSubstr(absl::StrCat("\"", failed_name,
                                     "\" (phase \"Failed\"), \"train-3-zr5tp\" "
                                     "(phase \"Pending\")")));
  EXPECT_THAT(spec.status().message(), HasSubstr("retry until"));

  // Only ended pods (the Job failed, or not replaced yet): the same code,
  // and the message says retrying may not help.
  list["items"].erase(list["items"].size() - 1);
  server_.SetPodList(kTrainSelector, list);
  spec = Make(IndexedJobOptions())->cluster_spec();
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(spec.status().message(), HasSubstr("every pod of it has ended"));

  // An index whose pod is not created yet leaves a gap: the same error.
  list = IndexedJobPods();
  Json items = Json::array();
  for (Json& pod : list["items"]) {
    if (pod["metadata"]["annotations"][kIndexKey] != "7") items.push_back(pod);
  }
  list["items"] = items;
  server_.SetPodList(kTrainSelector, list);
  spec = Make(IndexedJobOptions())->cluster_spec();
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(spec.status().message(),
              HasSubstr("completion index 7 (selector \"batch.kubernetes.io/"
                        "job-name=train\" of job \"worker\"): no pod of it is "
                        "listed"));
}

TEST_F(KubernetesClusterResolverTest, DuplicateRunningPodsOfAnIndex) {
  Json list = IndexedJobPods();
  Json& pod = PodOfIndex(list, 4);
  Json twin = Incarnation(pod, "train-4-hh2cn", "Running", "10.8.2.40");
  list["items"].push_back(twin);
  server_.SetPodList(kTrainSelector, list);
  auto spec = Make(IndexedJobOptions())->cluster_spec();
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(spec.status().message(),
              HasSubstr("Completion index 4 has 2 running pods"));
  EXPECT_THAT(spec.status().message(), HasSubstr("\"ml/train-4-hh2cn\""));

  // Across namespaces (no namespace set) it cannot pass: a wrong setting.
  list["items"].back()["metadata"]["namespace"] = "team-b";
  server_.SetPodList(kTrainSelector, list);
  KubernetesClusterResolver::Options o = IndexedJobOptions();
  o.pod_namespace.reset();
  spec = Make(o)->cluster_spec();
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(spec.status().message(), HasSubstr("\"team-b/train-4-hh2cn\""));
  EXPECT_THAT(spec.status().message(), HasSubstr("set the namespace"));
}

TEST_F(KubernetesClusterResolverTest, CompletionIndexMustBeValid) {
  auto code_and_message = [&](const Json& list) {
    server_.SetPodList(kTrainSelector, list);
    return Make(IndexedJobOptions())->cluster_spec().status();
  };
  // Label only (annotation dropped): still an index.
  Json list = IndexedJobPods();
  PodOfIndex(list, 1)["metadata"].erase("annotations");
  EXPECT_TRUE(code_and_message(list).ok());
  // Neither: not an Indexed Job's pod.
  list = IndexedJobPods();
  Json& bare = PodOfIndex(list, 1);
  const std::string name = bare["metadata"]["name"];
  bare["metadata"].erase("annotations");
  bare["metadata"]["labels"].erase(kIndexKey);
  absl::Status s = code_and_message(list);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(),
              HasSubstr(absl::StrCat("Pod \"", name, "\" has no")));
  // Not a number.
  for (const char* bad : {"x", "-1", "+1", " 1", "1234567890", ""}) {
    list = IndexedJobPods();
    PodOfIndex(list, 1)["metadata"]["annotations"][kIndexKey] = bad;
    s = code_and_message(list);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(s.message(), HasSubstr("is not a completion index")) << bad;
  }
  // Annotation and label disagree.
  list = IndexedJobPods();
  PodOfIndex(list, 1)["metadata"]["labels"][kIndexKey] = "9";
  s = code_and_message(list);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("but label \"9\""));
}

TEST_F(KubernetesClusterResolverTest, PodIpAddresses) {
  Json list = IndexedJobPods();
  Json& pod = PodOfIndex(list, 0);
  const std::string name = pod["metadata"]["name"];
  pod["status"].erase("podIP");
  server_.SetPodList(kTrainSelector, list);
  auto spec = Make(IndexedJobOptions())->cluster_spec();
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(spec.status().message(),
              HasSubstr(absl::StrCat("Pod \"", name,
                                     "\" is running but has no status.podIP")));

  // IPv6 pod networks: bracketed so the port stays separable.
  KubernetesClusterResolver::Options o;
  o.job_to_label_mapping = {{"worker", {"app=v6"}}};
  o.address = KubernetesClusterResolver::AddressSource::kPodIp;
  Json v6 = FakeKubernetesServer::PodList({{"v6-0", "Running", "fd00::1"}});
  v6["items"][0]["status"]["podIP"] = "fd00:10:244::5";
  server_.SetPodList("app=v6", v6);
  spec = Make(o)->cluster_spec();
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->ToJson(),
            Json::parse(R"({"worker": ["[fd00:10:244::5]:8470"]})"));
}

TEST(KubernetesConfigTest, ReadServiceAccountNamespace) {
  FakeEnv env;
  auto missing = ReadServiceAccountNamespace(&env, "/sa");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(missing.status().message(), HasSubstr("/sa/namespace"));
  env.SetFile("/sa/namespace", " \n");
  auto empty = ReadServiceAccountNamespace(&env, "/sa");
  EXPECT_EQ(empty.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(empty.status().message(), HasSubstr("/sa/namespace is empty"));
  env.SetFile("/sa/namespace", "ml\n");
  EXPECT_EQ(*ReadServiceAccountNamespace(&env, "/sa"), "ml");
  env.SetFile(std::string(kServiceAccountDir) + "/namespace", "team-a");
  EXPECT_EQ(*ReadServiceAccountNamespace(&env), "team-a");
}

TEST(KubernetesConfigTest, InClusterReadsServiceAccount) {
  FakeEnv env;
  auto missing = LoadInClusterKubernetesConfig(&env);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(missing.status().message(), HasSubstr("KUBERNETES_SERVICE_HOST"));
  env.SetVar("KUBERNETES_SERVICE_HOST", "10.96.0.1");
  env.SetVar("KUBERNETES_SERVICE_PORT", "443");
  auto no_token = LoadInClusterKubernetesConfig(&env, "/sa");
  EXPECT_THAT(no_token.status().message(), HasSubstr("/sa/token"));
  env.SetFile("/sa/token", "abc.def\n");
  auto no_ca = LoadInClusterKubernetesConfig(&env, "/sa");
  EXPECT_EQ(no_ca.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(no_ca.status().message(), HasSubstr("/sa/ca.crt"));
  const std::string pem =
      "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
  env.SetFile("/sa/ca.crt", pem);
  auto config = LoadInClusterKubernetesConfig(&env, "/sa");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->server, "https://10.96.0.1:443");
  EXPECT_EQ(config->token, "abc.def");
  EXPECT_EQ(config->http.ca_cert_pem, pem);
  EXPECT_EQ(config->http.ca_cert_path, "/sa/ca.crt");
}

TEST(KubernetesConfigTest, KubeconfigYaml) {
  FakeEnv env;
  env.SetVar("KUBECONFIG", "/home/u/.kube/config:/other");
  env.SetFile("/home/u/.kube/config", R"(apiVersion: v1
clusters:
- cluster:
    certificate-authority: ca.pem   # relative to the file
    server: https://1.2.3.4:6443
  name: prod
- cluster:
    server: "https://9.9.9.9"
    insecure-skip-tls-verify: true
  name: dev
contexts:
- context:
    cluster: dev
    user: dev-user
  name: dev
current-context: dev
kind: Config
preferences: {}
users:
- name: dev-user
  user:
    token: 'secret''s'
)");
  auto config = LoadKubeconfig(&env);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->server, "https://9.9.9.9");
  EXPECT_EQ(config->token, "secret's");
  EXPECT_FALSE(config->http.verify_server_certificate);
  EXPECT_THAT(config->source, HasSubstr("/home/u/.kube/config"));

  env.SetFile("/k.json", R"({"current-context": "c",
    "contexts": [{"name": "c", "context": {"cluster": "x", "user": "u"}}],
    "clusters": [{"name": "x", "cluster": {"server": "https://h",
                  "certificate-authority": "/etc/ca.pem"}}],
    "users": [{"name": "u", "user": {"token": "t"}}]})");
  config = LoadKubeconfig(&env, "/k.json");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->http.ca_cert_path, "/etc/ca.pem");
  EXPECT_EQ(config->token, "t");

  // A CA and insecure-skip-tls-verify together: refused, as kubectl does.
  env.SetFile("/both.json", R"({"current-context": "c",
    "contexts": [{"name": "c", "context": {"cluster": "x", "user": "u"}}],
    "clusters": [{"name": "x", "cluster": {"server": "https://h",
                  "certificate-authority": "/etc/ca.pem",
                  "insecure-skip-tls-verify": true}}],
    "users": [{"name": "u", "user": {"token": "t"}}]})");
  auto both = LoadKubeconfig(&env, "/both.json");
  ASSERT_FALSE(both.ok());
  EXPECT_EQ(both.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(both.status().message(),
              HasSubstr("sets both certificate-authority and "
                        "insecure-skip-tls-verify"));

  env.SetFile("/bad", "current-context: nope\ncontexts: []\n");
  auto bad = LoadKubeconfig(&env, "/bad");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(bad.status().message(), HasSubstr("\"nope\""));
}

TEST(KubernetesConfigTest, YamlSubset) {
  auto j = ParseKubeconfigText(
      "a:\n  b: 1\n  c:\n  - x\n  - y: z\n    w: v\nd:\n- - n\n", "t");
  ASSERT_TRUE(j.ok()) << j.status();
  EXPECT_EQ(*j,
            Json::parse(R"({"a": {"b": "1", "c": ["x", {"y": "z", "w": "v"}]},
                                "d": [["n"]]})"));
  auto bad = ParseKubeconfigText("a: b\n   c: d\n", "t");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("line 2"));
}

// "- - - ... x" recursed once per dash until the stack ran out (found by
// fuzz_kubeconfig); nesting is capped well above anything kubectl writes.
TEST(KubernetesConfigTest, DeepNestingIsAnErrorNotACrash) {
  std::string deep = "a:\n";
  for (int i = 0; i < 5000; ++i) deep += "- ";
  deep += "x\n";
  auto j = ParseKubeconfigText(deep, "deep.yaml");
  EXPECT_EQ(j.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(j.status().message(), HasSubstr("levels deep"));
  std::string fine = "a:\n";
  for (int i = 0; i < 10; ++i) fine += "- ";
  fine += "x\n";
  EXPECT_TRUE(ParseKubeconfigText(fine, "fine.yaml").ok());
}

TEST(KubernetesResolverTest, ExecutableLocation) {
  EXPECT_TRUE(
      KubernetesClusterResolver::ParseExecutableLocation("OFF_CLUSTER").ok());
  auto bad = KubernetesClusterResolver::ParseExecutableLocation("MOON");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(),
              HasSubstr("The executable location provided is invalid."));
}

TEST(KubernetesResolverTest, RegisteredAndDetectedInCluster) {
  ResolverRegistry registry;
  RegisterKubernetesResolver(&registry);
  FakeEnv env;
  EXPECT_FALSE(registry.Detect(&env).ok());
  FakeKubernetesServer server;
  server.SetPods("app=x", {{"p", "Running", "10.0.0.9"}});
  ASSERT_TRUE(server.Start().ok());
  env.SetVar("KUBERNETES_SERVICE_HOST", "10.96.0.1");
  env.SetVar("KUBERNETES_SERVICE_PORT", "443");
  auto detected = registry.Detect(&env);
  ASSERT_TRUE(detected.ok());
  EXPECT_EQ((*detected)->name, "kubernetes");
  // Missing service account: a clear error naming the token path.
  auto r = registry.Create("kubernetes", &env);
  EXPECT_THAT(r.status().message(), HasSubstr("serviceaccount/token"));
  // Off-cluster through a kubeconfig pointing at the fake server.
  env.UnsetVar("KUBERNETES_SERVICE_HOST");
  env.SetVar("KUBECONFIG", "/kc");
  env.SetFile("/kc",
              "current-context: c\ncontexts:\n- name: c\n  context:\n"
              "    cluster: k\n    user: u\nclusters:\n- name: k\n"
              "  cluster:\n    server: " +
                  server.base_url() + "\nusers:\n- name: u\n  user: {}\n");
  env.SetVar("COHORT_KUBERNETES_JOBS", R"({"worker": ["app=x"]})");
  env.SetVar("COHORT_KUBERNETES_PORT", "2222");
  r = registry.Create("kubernetes", &env);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)->cluster_spec()->ToJson(),
            Json::parse(R"({"worker": ["10.0.0.9:2222"]})"));
  env.SetVar("COHORT_KUBERNETES_JOBS", R"(["x"])");
  EXPECT_THAT(registry.Create("kubernetes", &env).status().message(),
              HasSubstr("COHORT_KUBERNETES_JOBS"));
}

TEST(KubernetesResolverTest, FactoryReadsIndexedJobVariables) {
  ResolverRegistry registry;
  RegisterKubernetesResolver(&registry);
  FakeKubernetesServer server{std::string("sa-token")};
  server.SetPodList(kTrainSelector, IndexedJobPods());
  ASSERT_TRUE(server.Start().ok());
  FakeEnv env;
  env.SetVar("KUBECONFIG", "/kc");
  env.SetFile("/kc",
              "current-context: c\ncontexts:\n- name: c\n  context:\n"
              "    cluster: k\n    user: u\nclusters:\n- name: k\n"
              "  cluster:\n    server: " +
                  server.base_url() +
                  "\nusers:\n- name: u\n  user:\n    token: sa-token\n");
  env.SetVar("COHORT_KUBERNETES_JOBS",
             R"({"worker": [")" + std::string(kTrainSelector) + R"("]})");
  env.SetVar("COHORT_KUBERNETES_PORT", "7070");
  env.SetVar("COHORT_KUBERNETES_NAMESPACE", "ml");
  env.SetVar("COHORT_KUBERNETES_ORDER", "completion-index");
  env.SetVar("COHORT_KUBERNETES_ADDRESS", "pod-ip");
  auto r = registry.Create("kubernetes", &env);
  ASSERT_TRUE(r.ok()) << r.status();
  auto spec = (*r)->cluster_spec();
  ASSERT_TRUE(spec.ok()) << spec.status();
  std::vector<std::string> want;
  for (int i = 0; i < 12; ++i) {
    want.push_back(absl::StrCat(PodIpOfIndex(i), ":7070"));
  }
  EXPECT_EQ(spec->ToJson(), Json({{"worker", want}}));
  EXPECT_THAT(server.requests()[0], HasSubstr("/api/v1/namespaces/ml/pods"));

  env.SetVar("COHORT_KUBERNETES_ORDER", "index");
  auto bad = registry.Create("kubernetes", &env);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("COHORT_KUBERNETES_ORDER"));
  env.SetVar("COHORT_KUBERNETES_ORDER", "name");
  env.SetVar("COHORT_KUBERNETES_ADDRESS", "node-ip");
  bad = registry.Create("kubernetes", &env);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("COHORT_KUBERNETES_ADDRESS"));
}

}  // namespace
}  // namespace cohort
