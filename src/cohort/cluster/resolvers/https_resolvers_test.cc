// The REST resolvers over HTTPS: the Kubernetes in-cluster path, the Compute
// Engine API of the GCE resolver and the Cloud TPU API, each against a fake
// server speaking TLS with a certificate from a CA the test makes. What is
// proven: the resolver verifies the server against the configured CA and
// resolves the cluster; the request carried its credentials (the fakes
// answer 401 without the bearer token and the metadata server 403 without
// "Metadata-Flavor: Google"); a certificate from another CA, or one not
// naming the host, is refused naming the host and the CA file, before any
// request reaches the server; a missing service-account file names its path.
// (The GCE metadata server itself is plain HTTP on GCE, so it stays HTTP.)

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "cohort/base/fake_env.h"
#include "cohort/cluster/resolver_registry.h"
#include "cohort/cluster/resolvers/gce_cluster_resolver.h"
#include "cohort/cluster/resolvers/http_client.h"
#include "cohort/cluster/resolvers/kubernetes_cluster_resolver.h"
#include "cohort/cluster/resolvers/testing/fake_compute_server.h"
#include "cohort/cluster/resolvers/testing/fake_kubernetes_server.h"
#include "cohort/cluster/resolvers/testing/fake_metadata_server.h"
#include "cohort/cluster/resolvers/testing/fake_tpu_server.h"
#include "cohort/cluster/resolvers/testing/test_certificates.h"
#include "cohort/cluster/resolvers/tpu_cluster_resolver.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::TestCertificateAuthority;
using testing::TlsServerCertificate;

// Two CAs (the server's and an unrelated one) and a certificate from the
// first for 127.0.0.1, where the fakes listen. Made once: key generation is
// the slow part and the tests only read them.
struct Pki {
  TestCertificateAuthority cluster_ca;
  TestCertificateAuthority other_ca;
  TlsServerCertificate server_cert;     // names 127.0.0.1
  TlsServerCertificate localhost_only;  // names localhost, not the IP
};

const Pki& TestPki() {
  static const Pki* pki = [] {
    auto cluster = TestCertificateAuthority::Create("cohort test cluster CA");
    auto other = TestCertificateAuthority::Create("cohort test other CA");
    EXPECT_TRUE(cluster.ok()) << cluster.status();
    EXPECT_TRUE(other.ok()) << other.status();
    auto cert = cluster->IssueServerCertificate({"127.0.0.1"});
    auto localhost = cluster->IssueServerCertificate({"localhost"});
    EXPECT_TRUE(cert.ok()) << cert.status();
    EXPECT_TRUE(localhost.ok()) << localhost.status();
    return new Pki{*std::move(cluster), *std::move(other), *std::move(cert),
                   *std::move(localhost)};
  }();
  return *pki;
}

// A file of CA certificates on disk, for the clients that take a path (the
// GCE and TPU options, OpenSSL's SSL_CERT_FILE): created by mkstemps, so
// its name cannot be predicted or pre-planted in the shared temporary
// directory; removed by the destructor.
class CaFile {
 public:
  explicit CaFile(const std::string& pem) {
    std::string name = ::testing::TempDir() + "/cohort_https_ca_XXXXXX.pem";
    const int fd = mkstemps(name.data(), 4);
    EXPECT_GE(fd, 0) << "mkstemps " << name << ": " << strerror(errno);
    if (fd < 0) return;
    path_ = name;
    EXPECT_EQ(write(fd, pem.data(), pem.size()),
              static_cast<ssize_t>(pem.size()))
        << path_;
    close(fd);
  }
  explicit CaFile(const TestCertificateAuthority& ca) : CaFile(ca.cert_pem()) {}
  ~CaFile() {
    if (!path_.empty()) unlink(path_.c_str());
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Sets an environment variable for one test and restores it after.
class ScopedEnvVar {
 public:
  ScopedEnvVar(const char* name, const std::string& value) : name_(name) {
    if (const char* old = getenv(name)) old_ = old;
    setenv(name, value.c_str(), 1);
  }
  ~ScopedEnvVar() {
    if (old_.has_value()) {
      setenv(name_, old_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// --- the client --------------------------------------------------------

TEST(HttpsClientTest, TrustsExactlyTheConfiguredCa) {
  testing::FakeHttpServer server(TestPki().server_cert);
  server.server().Get("/x", [](const httplib::Request&, httplib::Response& r) {
    r.set_content("over tls", "text/plain");
  });
  ASSERT_TRUE(server.Start().ok());
  ASSERT_EQ(server.base_url().substr(0, 8), "https://");
  const std::string url = server.base_url() + "/x";
  const std::string host_port = absl::StrCat("127.0.0.1:", server.port());

  HttpClient::Options trusted;
  trusted.ca_cert_pem = TestPki().cluster_ca.cert_pem();
  auto ok = HttpClient(trusted).GetText(url, {}, "");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(*ok, "over tls");
  EXPECT_EQ(server.request_count(), 1);

  CaFile other(TestPki().other_ca);
  HttpClient::Options wrong;
  wrong.ca_cert_path = other.path();
  auto refused = HttpClient(wrong).GetText(url, {}, "the server's CA");
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.status().message(), HasSubstr(host_port));
  EXPECT_THAT(refused.status().message(), HasSubstr(other.path()));
  EXPECT_THAT(refused.status().message(),
              HasSubstr("unable to get local issuer certificate"));
  EXPECT_THAT(refused.status().message(), HasSubstr("check the server's CA"));

  // Verification is on by default: the system store does not hold the
  // test's CA either.
  auto system = HttpClient().GetText(url, {}, "");
  ASSERT_FALSE(system.ok());
  EXPECT_EQ(system.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(system.status().message(), HasSubstr("the system CA store"));
  // Neither refused request got past the handshake.
  EXPECT_EQ(server.request_count(), 1);
}

// "Exactly": with a CA configured, the system store is not consulted at
// all. OpenSSL's system store is pointed (SSL_CERT_FILE) at a bundle that
// holds the server's CA: the client with no CA of its own then trusts the
// server, which proves the bundle is the store, and the client configured
// with another CA refuses it (httplib used to add the system store to a
// configured one, and would have accepted it).
TEST(HttpsClientTest, AConfiguredCaReplacesTheSystemStore) {
  testing::FakeHttpServer server(TestPki().server_cert);
  server.server().Get("/x", [](const httplib::Request&, httplib::Response& r) {
    r.set_content("over tls", "text/plain");
  });
  ASSERT_TRUE(server.Start().ok());
  const std::string url = server.base_url() + "/x";
  CaFile system_bundle(TestPki().cluster_ca);
  ScopedEnvVar system_store("SSL_CERT_FILE", system_bundle.path());

  auto via_system = HttpClient().GetText(url, {}, "");
  ASSERT_TRUE(via_system.ok()) << via_system.status();
  EXPECT_EQ(*via_system, "over tls");

  HttpClient::Options other;
  other.ca_cert_pem = TestPki().other_ca.cert_pem();
  auto refused = HttpClient(other).GetText(url, {}, "");
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(server.request_count(), 1);
}

TEST(HttpsClientTest, CertificateMustNameTheHostDialled) {
  testing::FakeHttpServer server(TestPki().localhost_only);
  server.server().Get("/x", [](const httplib::Request&, httplib::Response& r) {
    r.set_content("x", "text/plain");
  });
  ASSERT_TRUE(server.Start().ok());
  HttpClient::Options trusted;
  trusted.ca_cert_pem = TestPki().cluster_ca.cert_pem();
  auto r = HttpClient(trusted).GetText(server.base_url() + "/x", {}, "");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(r.status().message(), HasSubstr("IP address mismatch"));
  EXPECT_EQ(server.request_count(), 0);
}

// kubeconfig's insecure-skip-tls-verify: the one way to talk to a server
// whose CA is unknown.
TEST(HttpsClientTest, VerificationOffAcceptsAnyCertificate) {
  testing::FakeHttpServer server(TestPki().localhost_only);
  server.server().Get("/x", [](const httplib::Request&, httplib::Response& r) {
    r.set_content("x", "text/plain");
  });
  ASSERT_TRUE(server.Start().ok());
  HttpClient::Options insecure;
  insecure.verify_server_certificate = false;
  auto r = HttpClient(insecure).GetText(server.base_url() + "/x", {}, "");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, "x");
}

TEST(HttpsClientTest, UnloadableCaNamesItsFile) {
  HttpClient::Options options;
  options.ca_cert_path = "/nonexistent/cohort/ca.crt";
  auto r = HttpClient(options).GetText("https://127.0.0.1:1/x", {}, "");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(r.status().message(), HasSubstr("/nonexistent/cohort/ca.crt"));

  HttpClient::Options junk;
  junk.ca_cert_pem = "not a certificate";
  junk.ca_cert_path = "/sa/ca.crt";
  r = HttpClient(junk).GetText("https://127.0.0.1:1/x", {}, "");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(r.status().message(), HasSubstr("/sa/ca.crt"));
  EXPECT_THAT(r.status().message(), HasSubstr("no certificate"));
}

// --- Kubernetes, in cluster -----------------------------------------------

// A pod's view: the service variables and the service account's files at
// the standard paths, read through the Env the registry hands the factory.
class KubernetesInClusterHttpsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_.SetPods("job-name=tensorflow",
                    {{"worker-1", "Running", "10.0.0.2"},
                     {"worker-0", "Running", "10.0.0.1"}});
    ASSERT_TRUE(server_.Start().ok());
    env_.SetVar("KUBERNETES_SERVICE_HOST", "127.0.0.1");
    env_.SetVar("KUBERNETES_SERVICE_PORT", std::to_string(server_.port()));
    env_.SetFile(token_path_, "sa-token\n");
    env_.SetFile(ca_path_, TestPki().cluster_ca.cert_pem());
    RegisterKubernetesResolver(&registry_);
  }

  // What `cohort resolve` does: detect, then create and resolve.
  absl::StatusOr<ClusterSpec> Resolve() {
    auto detected = registry_.Detect(&env_);
    if (!detected.ok()) return detected.status();
    EXPECT_EQ((*detected)->name, "kubernetes");
    auto resolver = registry_.Create("kubernetes", &env_);
    if (!resolver.ok()) return resolver.status();
    return (*resolver)->cluster_spec();
  }

  const std::string token_path_ = absl::StrCat(kServiceAccountDir, "/token");
  const std::string ca_path_ = absl::StrCat(kServiceAccountDir, "/ca.crt");
  FakeEnv env_;
  ResolverRegistry registry_;
  testing::FakeKubernetesServer server_{std::string("sa-token"),
                                        TestPki().server_cert};
};

TEST_F(KubernetesInClusterHttpsTest, ResolvesOverHttpsWithTheBearerToken) {
  auto spec = Resolve();
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->ToJson(),
            Json::parse(R"({"worker": ["10.0.0.1:8470", "10.0.0.2:8470"]})"));
  // The fake answers 401 to a request without "Bearer sa-token", so the one
  // list it served carried the token.
  EXPECT_THAT(
      server_.requests(),
      ElementsAre("GET /api/v1/pods?labelSelector=job-name=tensorflow"));
}

TEST_F(KubernetesInClusterHttpsTest, ServerOfAnotherCaIsRefused) {
  env_.SetFile(ca_path_, TestPki().other_ca.cert_pem());
  auto spec = Resolve();
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(spec.status().message(),
              HasSubstr(absl::StrCat("127.0.0.1:", server_.port())));
  EXPECT_THAT(spec.status().message(), HasSubstr(ca_path_));
  // Refused in the handshake: the token never reached the impostor.
  EXPECT_EQ(server_.request_count(), 0);
}

TEST_F(KubernetesInClusterHttpsTest, MissingTokenOrCaNamesThePath) {
  FakeEnv no_token;
  no_token.SetVar("KUBERNETES_SERVICE_HOST", "127.0.0.1");
  no_token.SetVar("KUBERNETES_SERVICE_PORT", std::to_string(server_.port()));
  no_token.SetFile(ca_path_, TestPki().cluster_ca.cert_pem());
  auto r = registry_.Create("kubernetes", &no_token);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(r.status().message(), HasSubstr(token_path_));

  FakeEnv no_ca;
  no_ca.SetVar("KUBERNETES_SERVICE_HOST", "127.0.0.1");
  no_ca.SetVar("KUBERNETES_SERVICE_PORT", std::to_string(server_.port()));
  no_ca.SetFile(token_path_, "sa-token");
  r = registry_.Create("kubernetes", &no_ca);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(r.status().message(), HasSubstr(ca_path_));
  EXPECT_EQ(server_.request_count(), 0);
}

// --- GCE: the Compute Engine API ------------------------------------------

class GceHttpsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    metadata_.Set("project/project-id", "md-project");
    metadata_.Set("instance/zone", "projects/1/zones/md-zone");
    ASSERT_TRUE(metadata_.Start().ok());
    compute_.SetInstanceGroup("group",
                              {{"https://x/zones/z/instances/instance1"}});
    compute_.SetInstance("instance1",
                         Json{{"networkInterfaces",
                               Json::array({{{"networkIP", "10.1.2.3"}}})}});
    ASSERT_TRUE(compute_.Start().ok());
  }

  // Project, zone and the Compute token all from the metadata server.
  GceClusterResolver::Options Base(const std::string& ca_path) {
    GceClusterResolver::Options o;
    o.instance_group = "group";
    o.compute_api_url = compute_.api_url();
    o.metadata.base_url = metadata_.base_url();
    o.http.ca_cert_path = ca_path;
    return o;
  }

  FakeEnv env_;
  testing::FakeMetadataServer metadata_{"md-token"};
  testing::FakeComputeServer compute_{std::string("md-token"),
                                      TestPki().server_cert};
};

TEST_F(GceHttpsTest, ResolvesOverHttpsWithTheMetadataToken) {
  CaFile ca(TestPki().cluster_ca);
  auto r = GceClusterResolver::Create(&env_, Base(ca.path()));
  ASSERT_TRUE(r.ok()) << r.status();
  auto spec = (*r)->cluster_spec();
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->ToJson(), Json::parse(R"({"worker": ["10.1.2.3:8470"]})"));
  EXPECT_THAT(compute_.requests(),
              ElementsAre(HasSubstr("POST /compute/v1/projects/md-project/"
                                    "zones/md-zone/instanceGroups/group/"
                                    "listInstances"),
                          HasSubstr("GET /compute/v1/projects/md-project/"
                                    "zones/md-zone/instances/instance1")));
  // The metadata server answers 403 without "Metadata-Flavor: Google" and
  // the Compute fake 401 without "Bearer md-token": both were sent.
  EXPECT_GT(metadata_.request_count(), 0);
  EXPECT_EQ(metadata_.rejected_without_flavor(), 0);
}

TEST_F(GceHttpsTest, ComputeApiOfAnotherCaIsRefused) {
  CaFile other(TestPki().other_ca);
  auto r = GceClusterResolver::Create(&env_, Base(other.path()));
  ASSERT_TRUE(r.ok()) << r.status();
  auto spec = (*r)->cluster_spec();
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(spec.status().message(),
              HasSubstr(absl::StrCat("127.0.0.1:", compute_.port())));
  EXPECT_THAT(spec.status().message(), HasSubstr(other.path()));
  EXPECT_EQ(compute_.request_count(), 0);
}

// --- Cloud TPU: the TPU API -----------------------------------------------

class TpuHttpsTest : public ::testing::Test {
 protected:
  static constexpr char kNode[] =
      "projects/test-project/locations/us-central1-c/nodes/test-tpu";

  void SetUp() override {
    metadata_.Set("project/project-id", "test-project");
    metadata_.Set("instance/zone",
                  "projects/test-project/locations/us-central1-c");
    ASSERT_TRUE(metadata_.Start().ok());
    tpu_.SetNode(kNode, Json::parse(R"({"state": "READY",
        "networkEndpoints": [{"ipAddress": "10.2.3.4", "port": 8470},
                             {"ipAddress": "10.2.3.5", "port": 8470}]})"));
    ASSERT_TRUE(tpu_.Start().ok());
  }

  TpuClusterResolver::Options Base(const std::string& ca_path) {
    TpuClusterResolver::Options o;
    o.client.tpu = "test-tpu";
    o.client.tpu_api_url = tpu_.api_url();
    o.client.metadata.base_url = metadata_.base_url();
    o.client.http.ca_cert_path = ca_path;
    return o;
  }

  FakeEnv env_;
  testing::FakeMetadataServer metadata_{"tpu-token"};
  testing::FakeTpuServer tpu_{std::string("tpu-token"), TestPki().server_cert};
};

TEST_F(TpuHttpsTest, ResolvesOverHttpsWithTheMetadataToken) {
  CaFile ca(TestPki().cluster_ca);
  auto r = TpuClusterResolver::Create(&env_, Base(ca.path()));
  ASSERT_TRUE(r.ok()) << r.status();
  auto spec = (*r)->cluster_spec();
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->ToJson(),
            Json::parse(R"({"worker": ["10.2.3.4:8470", "10.2.3.5:8470"]})"));
  EXPECT_THAT(tpu_.requests(), ElementsAre(absl::StrCat("GET /v1/", kNode)));
  EXPECT_GT(metadata_.request_count(), 0);
  EXPECT_EQ(metadata_.rejected_without_flavor(), 0);
}

TEST_F(TpuHttpsTest, TpuApiOfAnotherCaIsRefused) {
  CaFile other(TestPki().other_ca);
  auto r = TpuClusterResolver::Create(&env_, Base(other.path()));
  ASSERT_TRUE(r.ok()) << r.status();
  auto spec = (*r)->cluster_spec();
  ASSERT_FALSE(spec.ok());
  // TensorFlow's "Could not lookup TPU metadata" error, with the cause.
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(spec.status().message(),
              HasSubstr("Could not lookup TPU metadata from name 'test-tpu'"));
  EXPECT_THAT(spec.status().message(),
              HasSubstr(absl::StrCat("127.0.0.1:", tpu_.port())));
  EXPECT_THAT(spec.status().message(), HasSubstr(other.path()));
  EXPECT_EQ(tpu_.request_count(), 0);
}

}  // namespace
}  // namespace cohort
