// gRPC channels and servers with the job token and TLS (server-only and
// mutual), with certificates made by OpenSSL when the test runs: a good
// chain, a chain from another CA, and an expired server certificate.
#include "cohort/rpc/transport.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "cohort/barrier.grpc.pb.h"
#include "cohort/rpc/job_tls.h"
#include "cohort/rpc/socket.h"
#include "cohort/rpc/status_conversion.h"
#include "gmock/gmock.h"
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
  ~CertDir() {
    std::error_code error;
    std::filesystem::remove_all(dir_, error);
  }

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
  int calls() const { return calls_.load(); }
  grpc::ServerUnaryReactor* Sync(
      grpc::CallbackServerContext* context,
      const cohort::BarrierSyncRequest* request,
      cohort::BarrierSyncResponse* response) override {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    calls_.fetch_add(1);
    absl::Status auth = CheckJobToken(*context, token_);
    if (auth.ok()) response->add_messages(request->message());
    reactor->Finish(ToGrpcStatus(auth));
    return reactor;
  }

 private:
  const std::string token_;
  std::atomic<int> calls_{0};  // calls that reached the handler
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

TEST_F(TransportTest, JobTlsLetsOnlyTokenHoldersConnect) {
  TransportSecurity security;
  security.job_token = "right-token";
  const std::string target = Start(security);
  absl::StatusOr<std::string> answer = Echo(target, security, "hi");
  ASSERT_TRUE(answer.ok()) << answer.status();
  EXPECT_EQ(*answer, "hi");
  EXPECT_EQ(service_->calls(), 1);
  // Without the token a client speaks plaintext, with another token it
  // trusts another CA and presents a certificate of that CA: neither
  // finishes the handshake, so no call reaches the service.
  TransportSecurity none;
  absl::StatusOr<std::string> missing = Echo(target, none, "hi");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kUnavailable)
      << missing.status();
  TransportSecurity wrong;
  wrong.job_token = "wrong-token";
  absl::StatusOr<std::string> refused = Echo(target, wrong, "hi");
  // The client rejects the server's certificate: told as a token problem.
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnauthenticated)
      << refused.status();
  EXPECT_THAT(std::string(refused.status().message()),
              ::testing::HasSubstr("COHORT_JOB_TOKEN"));
  EXPECT_EQ(refused.status().message().find("right-token"), std::string::npos);
  EXPECT_EQ(refused.status().message().find("wrong-token"), std::string::npos);
  EXPECT_EQ(service_->calls(), 1);
}

TEST_F(TransportTest, JobTlsIdentitiesShareTheCaAndNotTheKey) {
  // Two processes of a job, as two builds: the same CA, their own keys.
  absl::StatusOr<JobTlsIdentity> one = MakeJobTlsIdentity("token-a");
  absl::StatusOr<JobTlsIdentity> two = MakeJobTlsIdentity("token-a");
  absl::StatusOr<JobTlsIdentity> other = MakeJobTlsIdentity("token-b");
  ASSERT_TRUE(one.ok() && two.ok() && other.ok());
  EXPECT_EQ(one->ca_pem, two->ca_pem);
  EXPECT_NE(one->key_pem, two->key_pem);
  EXPECT_NE(one->cert_pem, two->cert_pem);
  EXPECT_NE(one->ca_pem, other->ca_pem);
  // Within a process, made once per token.
  absl::StatusOr<const JobTlsIdentity*> a = JobTlsIdentityFor("token-a");
  absl::StatusOr<const JobTlsIdentity*> again = JobTlsIdentityFor("token-a");
  ASSERT_TRUE(a.ok() && again.ok());
  EXPECT_EQ(*a, *again);
  EXPECT_EQ((*a)->ca_pem, one->ca_pem);
  EXPECT_TRUE(absl::IsInvalidArgument(JobTlsIdentityFor("").status()));
}

// The token is checked on the headers, before the message is read: with
// server-only TLS (which lets any client connect) a call without the token
// never reaches a handler, even one that would not check it.
TEST_F(TransportTest, TokenIsCheckedBeforeTheServiceSeesTheCall) {
  TransportSecurity server = ServerSecurity(server_, false);
  service_ = std::make_unique<EchoService>("");  // checks nothing itself
  auto started = StartGrpcServer("127.0.0.1:0", {service_.get()}, server);
  ASSERT_TRUE(started.ok()) << started.status();
  server_handle_ = std::move(started).value();
  const std::string target = absl::StrCat("127.0.0.1:", server_handle_.port);
  TransportSecurity client = ClientSecurity(ca_, nullptr);
  ASSERT_TRUE(Echo(target, client, "with token").ok());
  client.job_token = "";
  absl::StatusOr<std::string> missing = Echo(target, client, "no token");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kUnauthenticated)
      << missing.status();
  EXPECT_NE(missing.status().message().find("no job token"), std::string::npos);
  client.job_token = "tok-but-wrong";
  absl::StatusOr<std::string> wrong = Echo(target, client, "wrong token");
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(service_->calls(), 1);
}

TEST_F(TransportTest, ServerOnlyTlsWithoutATokenIsRefused) {
  TransportSecurity security = ServerSecurity(server_, false);
  security.job_token = "";
  EchoService service("");
  auto refused = StartGrpcServer("127.0.0.1:0", {&service}, security);
  EXPECT_TRUE(absl::IsInvalidArgument(refused.status())) << refused.status();
  EXPECT_NE(refused.status().message().find("server-only TLS"),
            std::string::npos);
  EchoService mutual_service(""), insecure_service("");
  security.require_client_cert = true;
  EXPECT_TRUE(StartGrpcServer("127.0.0.1:0", {&mutual_service}, security).ok());
  security.require_client_cert = false;
  security.insecure = true;
  EXPECT_TRUE(
      StartGrpcServer("127.0.0.1:0", {&insecure_service}, security).ok());
}

TEST_F(TransportTest, ServerTlsWithTheRightCa) {
  const std::string target = Start(ServerSecurity(server_, false));
  absl::StatusOr<std::string> answer =
      Echo(target, ClientSecurity(ca_, nullptr), "over tls");
  ASSERT_TRUE(answer.ok()) << answer.status();
  EXPECT_EQ(*answer, "over tls");
  // A plaintext client cannot talk to a TLS server, and a job-TLS client
  // (a token, no TLS files) refuses a certificate that is not its job's.
  TransportSecurity plain;
  EXPECT_EQ(Echo(target, plain, "x").status().code(),
            absl::StatusCode::kUnavailable);
  TransportSecurity job;
  job.job_token = "tok";
  EXPECT_EQ(Echo(target, job, "x").status().code(),
            absl::StatusCode::kUnauthenticated);
}

TEST_F(TransportTest, ClientRefusesAServerCertificateFromAnotherCa) {
  const std::string target = Start(ServerSecurity(server_, false));
  EXPECT_EQ(
      Echo(target, ClientSecurity(other_ca_, nullptr), "x").status().code(),
      absl::StatusCode::kUnauthenticated);
}

TEST_F(TransportTest, ClientRefusesAnExpiredServerCertificate) {
  const std::string target = Start(ServerSecurity(expired_, false));
  EXPECT_EQ(Echo(target, ClientSecurity(ca_, nullptr), "x").status().code(),
            absl::StatusCode::kUnauthenticated);
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

// A peer without the token that connects and then says nothing is closed
// after the handshake timeout, not held for gRPC's default two minutes.
TEST_F(TransportTest, SilentConnectionIsClosedAfterTheHandshakeTimeout) {
  TransportSecurity security;
  security.job_token = "the-job-token-0123456789";
  const std::string target = Start(security);
  absl::StatusOr<UniqueFd> idle =
      ConnectTcp(target, absl::Now() + absl::Seconds(5));
  ASSERT_TRUE(idle.ok()) << idle.status();
  const absl::Time start = absl::Now();
  const absl::Time limit = start + kServerHandshakeTimeout + absl::Seconds(10);
  bool closed = false;
  while (!closed && absl::Now() < limit) {
    pollfd p{idle->get(), POLLIN, 0};
    if (poll(&p, 1, PollTimeoutMs(limit)) <= 0) break;
    char buf[256];
    closed = read(idle->get(), buf, sizeof(buf)) <= 0;
  }
  EXPECT_TRUE(closed) << "still open after "
                      << absl::FormatDuration(absl::Now() - start);
}

// --- A squatter on a dead task's port --------------------------------------

// A call with the job's token, over `channel`, that keeps trying to connect
// until its short deadline (as a heartbeat's channel does).
absl::Status CallOver(const std::shared_ptr<grpc::Channel>& channel,
                      const TransportSecurity& security) {
  auto stub = cohort::BarrierCoordinatorService::NewStub(channel);
  grpc::ClientContext context;
  AttachJobToken(&context, security);
  context.set_wait_for_ready(true);
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(3)));
  cohort::BarrierSyncRequest request;
  request.set_message("payload");
  cohort::BarrierSyncResponse response;
  return FromGrpcStatus(stub->Sync(&context, request, &response));
}

class SquatterTest : public TransportTest {
 protected:
  // A real task's server, a call through it, then the task dies: its port
  // is free for whoever binds it next.
  void SetUp() override {
    job_.job_token = "the-job-token-0123456789";
    target_ = Start(job_);
    port_ = server_handle_.port;
    auto channel = CreateChannel(target_, job_);
    ASSERT_TRUE(channel.ok());
    channel_ = *channel;
    ASSERT_TRUE(CallOver(channel_, job_).ok());
    server_handle_.server->Shutdown();
    server_handle_.server.reset();
  }

  TransportSecurity job_;
  std::string target_;
  int port_ = 0;
  std::shared_ptr<grpc::Channel> channel_;  // the live task's old channel
};

// A gRPC server of the squatter's own on the port records every call that
// reaches it: neither the old channel (heartbeats, watches) nor a new one
// (the next `cohort run`) makes one, so no token or request is handed over.
TEST_F(SquatterTest, GrpcSquatterReceivesNoCall) {
  for (bool squatter_has_tls : {false, true}) {
    SCOPED_TRACE(squatter_has_tls ? "squatter with a TLS identity of its own"
                                  : "plaintext squatter");
    EchoService squatter("");
    TransportSecurity own;
    if (squatter_has_tls) own.job_token = "the squatter's guess";
    auto bound = StartGrpcServer(target_, {&squatter}, own);
    ASSERT_TRUE(bound.ok()) << bound.status();
    ASSERT_EQ(bound->port, port_);
    EXPECT_FALSE(CallOver(channel_, job_).ok());
    auto fresh = CreateChannel(target_, job_);
    ASSERT_TRUE(fresh.ok());
    EXPECT_FALSE(CallOver(*fresh, job_).ok());
    EXPECT_EQ(squatter.calls(), 0) << "a call reached the squatter";
    // The squatter does serve: a client of its own kind gets through, so a
    // call from the job would have been seen.
    auto own_channel = CreateChannel(target_, own);
    ASSERT_TRUE(own_channel.ok());
    EXPECT_TRUE(CallOver(*own_channel, own).ok());
    EXPECT_EQ(squatter.calls(), 1);
    bound->server->Shutdown();
  }
}

// A raw listener on the port sees all the job's client sends: a TLS
// handshake's first flight, which holds no token and nothing derived from
// it but the name the client expects.
TEST_F(SquatterTest, RawSquatterSeesOnlyAClientHello) {
  // gRPC closes a stopped server's listening socket on its own threads:
  // bind the port as soon as it is free (bounded).
  absl::StatusOr<Listener> listener = ListenTcp("127.0.0.1", port_);
  for (const absl::Time give_up = absl::Now() + absl::Seconds(10);
       !listener.ok() && absl::Now() < give_up;
       listener = ListenTcp("127.0.0.1", port_)) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_TRUE(listener.ok()) << listener.status();
  std::atomic<bool> stop{false};
  std::string seen;
  std::thread squatter([&] {
    // Accept and read every connection until the client gives up (bounded
    // by `stop` and 64 KiB).
    std::vector<UniqueFd> conns;
    while (!stop.load() && seen.size() < (64 << 10)) {
      std::vector<pollfd> fds{{listener->fd.get(), POLLIN, 0}};
      for (const UniqueFd& c : conns) fds.push_back({c.get(), POLLIN, 0});
      if (poll(fds.data(), fds.size(), 50) <= 0) continue;
      if (fds[0].revents & POLLIN) {
        int fd = accept4(listener->fd.get(), nullptr, nullptr, SOCK_CLOEXEC);
        if (fd >= 0) conns.emplace_back(fd);
      }
      for (size_t i = 1; i < fds.size(); ++i) {
        if (!(fds[i].revents & (POLLIN | POLLHUP))) continue;
        char buf[4096];
        ssize_t n = read(fds[i].fd, buf, sizeof(buf));
        if (n > 0) seen.append(buf, n);
      }
    }
  });
  EXPECT_FALSE(CallOver(channel_, job_).ok());
  stop = true;
  squatter.join();
  ASSERT_FALSE(seen.empty()) << "the client never reached the squatter";
  EXPECT_EQ(static_cast<unsigned char>(seen[0]), 0x16)
      << "not a TLS handshake record";
  EXPECT_EQ(seen.find(job_.job_token), std::string::npos);
  EXPECT_EQ(seen.find(kJobTokenMetadataKey), std::string::npos);
  EXPECT_EQ(seen.find("payload"), std::string::npos);
}

}  // namespace
}  // namespace cohort::rpc
