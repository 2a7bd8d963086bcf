// gRPC channels and servers with the job token and TLS (server-only and
// mutual), with certificates made by OpenSSL when the test runs: a good
// chain, a chain from another CA, and an expired server certificate.
#include "cohort/rpc/transport.h"

#include <cstdio>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "cohort/barrier.grpc.pb.h"
#include "cohort/rpc/status_conversion.h"
#include "gtest/gtest.h"
#include "openssl/evp.h"
#include "openssl/pem.h"
#include "openssl/x509.h"
#include "openssl/x509v3.h"

namespace cohort::rpc {
namespace {

// --- Certificates made at test time ---------------------------------------

struct KeyDeleter {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
struct CertDeleter {
  void operator()(X509* c) const { X509_free(c); }
};
using Key = std::unique_ptr<EVP_PKEY, KeyDeleter>;
using Cert = std::unique_ptr<X509, CertDeleter>;

struct Identity {
  Key key;
  Cert cert;
};

// A P-256 key and a certificate for `cn`, signed by `issuer` (self-signed
// when null), valid from now + `not_before` to now + `not_after` seconds.
Identity MakeIdentity(const std::string& cn, const Identity* issuer, bool ca,
                      long not_before = -3600, long not_after = 86400) {
  Identity id;
  id.key.reset(EVP_EC_gen("P-256"));
  id.cert.reset(X509_new());
  X509* x = id.cert.get();
  X509_set_version(x, 2);
  static long serial = 1;
  ASN1_INTEGER_set(X509_get_serialNumber(x), serial++);
  X509_gmtime_adj(X509_getm_notBefore(x), not_before);
  X509_gmtime_adj(X509_getm_notAfter(x), not_after);
  X509_set_pubkey(x, id.key.get());
  X509_NAME* name = X509_get_subject_name(x);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>(cn.c_str()),
                             -1, -1, 0);
  X509_set_issuer_name(
      x, issuer ? X509_get_subject_name(issuer->cert.get()) : name);
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer ? issuer->cert.get() : x, x, nullptr, nullptr, 0);
  auto add = [&](int nid, const char* value) {
    X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
    ASSERT_NE(ext, nullptr) << value;
    X509_add_ext(x, ext, -1);
    X509_EXTENSION_free(ext);
  };
  if (ca) {
    add(NID_basic_constraints, "critical,CA:TRUE");
    add(NID_key_usage, "critical,keyCertSign,cRLSign");
  } else {
    add(NID_basic_constraints, "CA:FALSE");
    add(NID_subject_alt_name, "DNS:localhost,IP:127.0.0.1");
    add(NID_ext_key_usage, "serverAuth,clientAuth");
  }
  X509_sign(x, issuer ? issuer->key.get() : id.key.get(), EVP_sha256());
  return id;
}

class CertDir {
 public:
  CertDir() {
    char templ[] = "/tmp/cohort-certs-XXXXXX";
    dir_ = mkdtemp(templ);
  }
  ~CertDir() { std::system(("rm -rf " + dir_).c_str()); }

  std::string WriteCert(const std::string& name, const Identity& id) {
    const std::string path = absl::StrCat(dir_, "/", name, ".crt");
    FILE* f = fopen(path.c_str(), "w");
    PEM_write_X509(f, id.cert.get());
    fclose(f);
    return path;
  }
  std::string WriteKey(const std::string& name, const Identity& id) {
    const std::string path = absl::StrCat(dir_, "/", name, ".key");
    FILE* f = fopen(path.c_str(), "w");
    PEM_write_PrivateKey(f, id.key.get(), nullptr, nullptr, 0, nullptr,
                         nullptr);
    fclose(f);
    return path;
  }

 private:
  std::string dir_;
};

// --- A tiny service that checks the token like every cohort service -------

class EchoService final
    : public cohort::BarrierCoordinatorService::CallbackService {
 public:
  explicit EchoService(std::string token) : token_(std::move(token)) {}
  grpc::ServerUnaryReactor* Sync(
      grpc::CallbackServerContext* context,
      const cohort::BarrierSyncRequest* request,
      cohort::BarrierSyncResponse* response) override {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    absl::Status auth = CheckJobToken(*context, token_);
    if (auth.ok()) response->add_messages(request->message());
    reactor->Finish(ToGrpcStatus(auth));
    return reactor;
  }

 private:
  const std::string token_;
};

absl::StatusOr<std::string> Echo(const std::string& target,
                                 const TransportSecurity& security,
                                 const std::string& message) {
  auto channel = CreateChannel(target, security);
  if (!channel.ok()) return channel.status();
  auto stub = cohort::BarrierCoordinatorService::NewStub(*channel);
  grpc::ClientContext context;
  AttachJobToken(&context, security);
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(20)));
  cohort::BarrierSyncRequest request;
  request.set_message(message);
  cohort::BarrierSyncResponse response;
  absl::Status status =
      FromGrpcStatus(stub->Sync(&context, request, &response));
  if (!status.ok()) return status;
  return response.messages(0);
}

class TransportTest : public ::testing::Test {
 protected:
  TransportTest()
      : ca_(MakeIdentity("cohort test CA", nullptr, true)),
        other_ca_(MakeIdentity("someone else's CA", nullptr, true)),
        server_(MakeIdentity("localhost", &ca_, false)),
        client_(MakeIdentity("worker:0", &ca_, false)),
        stranger_(MakeIdentity("worker:0", &other_ca_, false)),
        expired_(MakeIdentity("localhost", &ca_, false, -7200, -3600)) {}

  TransportSecurity ServerSecurity(const Identity& id, bool mutual) {
    TransportSecurity s;
    s.ca_cert_file = dir_.WriteCert("ca", ca_);
    s.cert_file = dir_.WriteCert("server", id);
    s.key_file = dir_.WriteKey("server", id);
    s.require_client_cert = mutual;
    s.job_token = "tok";
    return s;
  }
  TransportSecurity ClientSecurity(const Identity& trust, const Identity* own) {
    TransportSecurity s;
    s.ca_cert_file = dir_.WriteCert("client-trust", trust);
    if (own != nullptr) {
      s.cert_file = dir_.WriteCert("client", *own);
      s.key_file = dir_.WriteKey("client", *own);
    }
    s.server_name_override = "localhost";
    s.job_token = "tok";
    return s;
  }
  std::string Start(const TransportSecurity& security) {
    service_ = std::make_unique<EchoService>(security.job_token);
    auto server = StartGrpcServer("127.0.0.1:0", {service_.get()}, security);
    EXPECT_TRUE(server.ok()) << server.status();
    server_handle_ = std::move(server).value();
    return absl::StrCat("127.0.0.1:", server_handle_.port);
  }

  CertDir dir_;
  Identity ca_, other_ca_, server_, client_, stranger_, expired_;
  std::unique_ptr<EchoService> service_;
  GrpcServer server_handle_;
};

TEST_F(TransportTest, TokenIsRequiredAndNeverEchoed) {
  TransportSecurity security;
  security.job_token = "right-token";
  const std::string target = Start(security);
  EXPECT_EQ(*Echo(target, security, "hi"), "hi");
  TransportSecurity none;
  absl::StatusOr<std::string> missing = Echo(target, none, "hi");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kUnauthenticated);
  TransportSecurity wrong;
  wrong.job_token = "wrong-token";
  absl::StatusOr<std::string> refused = Echo(target, wrong, "hi");
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(refused.status().message().find("right-token"), std::string::npos);
  EXPECT_EQ(refused.status().message().find("wrong-token"), std::string::npos);
}

TEST_F(TransportTest, ServerTlsWithTheRightCa) {
  const std::string target = Start(ServerSecurity(server_, false));
  absl::StatusOr<std::string> answer =
      Echo(target, ClientSecurity(ca_, nullptr), "over tls");
  ASSERT_TRUE(answer.ok()) << answer.status();
  EXPECT_EQ(*answer, "over tls");
  // A plaintext client cannot talk to a TLS server.
  TransportSecurity plain;
  plain.job_token = "tok";
  EXPECT_EQ(Echo(target, plain, "x").status().code(),
            absl::StatusCode::kUnavailable);
}

TEST_F(TransportTest, ClientRefusesAServerCertificateFromAnotherCa) {
  const std::string target = Start(ServerSecurity(server_, false));
  EXPECT_EQ(
      Echo(target, ClientSecurity(other_ca_, nullptr), "x").status().code(),
      absl::StatusCode::kUnavailable);
}

TEST_F(TransportTest, ClientRefusesAnExpiredServerCertificate) {
  const std::string target = Start(ServerSecurity(expired_, false));
  EXPECT_EQ(Echo(target, ClientSecurity(ca_, nullptr), "x").status().code(),
            absl::StatusCode::kUnavailable);
}

TEST_F(TransportTest, MutualTlsNeedsAClientCertificateFromTheCa) {
  const std::string target = Start(ServerSecurity(server_, true));
  absl::StatusOr<std::string> answer =
      Echo(target, ClientSecurity(ca_, &client_), "mutual");
  ASSERT_TRUE(answer.ok()) << answer.status();
  EXPECT_EQ(*answer, "mutual");
  EXPECT_EQ(Echo(target, ClientSecurity(ca_, nullptr), "x").status().code(),
            absl::StatusCode::kUnavailable)
      << "no client certificate";
  EXPECT_EQ(Echo(target, ClientSecurity(ca_, &stranger_), "x").status().code(),
            absl::StatusCode::kUnavailable)
      << "client certificate from another CA";
}

TEST_F(TransportTest, UnreadableTlsFilesAreNamed) {
  TransportSecurity s;
  s.ca_cert_file = "/nonexistent/ca.pem";
  auto channel = CreateChannel("127.0.0.1:1", s);
  EXPECT_TRUE(absl::IsNotFound(channel.status()));
  EXPECT_NE(channel.status().message().find("/nonexistent/ca.pem"),
            std::string::npos);
}

TEST_F(TransportTest, NoTokenNoTlsBeyondLoopbackNeedsInsecure) {
  EchoService service("");
  TransportSecurity security;
  auto refused = StartGrpcServer("0.0.0.0:0", {&service}, security);
  EXPECT_TRUE(absl::IsInvalidArgument(refused.status())) << refused.status();
  EXPECT_NE(refused.status().message().find("--insecure"), std::string::npos);
  // A gRPC service object serves one server: one per accepted start.
  EchoService insecure_service(""), checked("tok"), local("");
  security.insecure = true;
  EXPECT_TRUE(StartGrpcServer("0.0.0.0:0", {&insecure_service}, security).ok());
  TransportSecurity with_token;
  with_token.job_token = "tok";
  EXPECT_TRUE(StartGrpcServer("0.0.0.0:0", {&checked}, with_token).ok());
  TransportSecurity loopback;
  EXPECT_TRUE(StartGrpcServer("127.0.0.1:0", {&local}, loopback).ok());
}

}  // namespace
}  // namespace cohort::rpc
