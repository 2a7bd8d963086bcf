#include "cohort/cluster/resolvers/kubernetes_cluster_resolver.h"

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
  auto config = LoadInClusterKubernetesConfig(&env, "/sa");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->server, "https://10.96.0.1:443");
  EXPECT_EQ(config->token, "abc.def");
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

}  // namespace
}  // namespace cohort
