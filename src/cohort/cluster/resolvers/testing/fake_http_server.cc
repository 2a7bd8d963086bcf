#include "cohort/cluster/resolvers/testing/fake_http_server.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "openssl/bio.h"
#include "openssl/err.h"
#include "openssl/pem.h"
#include "openssl/x509.h"

namespace cohort::testing {
namespace {

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct PkeyFree {
  void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); }
};

// An httplib TLS server presenting `tls`. httplib's SSLServer takes the
// certificate and key as OpenSSL objects and holds its own references
// (SSL_CTX_use_certificate / _PrivateKey), so ours are freed on return.
absl::StatusOr<std::unique_ptr<httplib::Server>> MakeTlsServer(
    const TlsServerCertificate& tls) {
  std::unique_ptr<BIO, BioFree> cert_bio(
      BIO_new_mem_buf(tls.cert_pem.data(), tls.cert_pem.size()));
  std::unique_ptr<X509, X509Free> cert(
      cert_bio ? PEM_read_bio_X509(cert_bio.get(), nullptr, nullptr, nullptr)
               : nullptr);
  std::unique_ptr<BIO, BioFree> key_bio(
      BIO_new_mem_buf(tls.key_pem.data(), tls.key_pem.size()));
  std::unique_ptr<EVP_PKEY, PkeyFree> key(
      key_bio
          ? PEM_read_bio_PrivateKey(key_bio.get(), nullptr, nullptr, nullptr)
          : nullptr);
  ERR_clear_error();
  if (cert == nullptr || key == nullptr) {
    return absl::InternalError(
        "fake HTTPS server: the certificate or key is not PEM (make them with "
        "TestCertificateAuthority::IssueServerCertificate)");
  }
  auto server = std::make_unique<httplib::SSLServer>(cert.get(), key.get());
  if (!server->is_valid()) {
    return absl::InternalError(
        "fake HTTPS server: OpenSSL refused the certificate and key (do they "
        "belong together?)");
  }
  return server;
}

}  // namespace

FakeHttpServer::FakeHttpServer(std::optional<TlsServerCertificate> tls)
    : tls_(tls.has_value()) {
  if (tls.has_value()) {
    absl::StatusOr<std::unique_ptr<httplib::Server>> server =
        MakeTlsServer(*tls);
    if (server.ok()) {
      server_ = *std::move(server);
    } else {
      tls_error_ = server.status();
    }
  }
  // Subclasses register handlers in their constructors, so there is always a
  // server to register on, even when the TLS one could not be made.
  if (server_ == nullptr) server_ = std::make_unique<httplib::Server>();
  // Recorded before routing, so a request is in the log before its answer
  // reaches the client.
  server_->set_pre_routing_handler(
      [this](const httplib::Request& req, httplib::Response&) {
        std::vector<std::string> params;
        for (const auto& [k, v] : req.params)
          params.push_back(absl::StrCat(k, "=", v));
        std::string line = absl::StrCat(req.method, " ", req.path);
        if (!params.empty())
          absl::StrAppend(&line, "?", absl::StrJoin(params, "&"));
        absl::MutexLock lock(&mu_);
        requests_.push_back(std::move(line));
        return httplib::Server::HandlerResponse::Unhandled;
      });
  server_->set_read_timeout(5, 0);
  server_->set_write_timeout(5, 0);
}

FakeHttpServer::~FakeHttpServer() { Stop(); }

absl::Status FakeHttpServer::Start() {
  if (!tls_error_.ok()) return tls_error_;
  port_ = server_->bind_to_any_port("127.0.0.1");
  if (port_ < 0) {
    return absl::InternalError("fake HTTP server: cannot bind 127.0.0.1:0");
  }
  thread_ = std::thread([this] { server_->listen_after_bind(); });
  // httplib's stop() is a no-op until the accept loop runs, so wait for it
  // (bounded) to make an immediate Stop() safe.
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (!server_->is_running()) {
    if (absl::Now() > deadline) {
      return absl::InternalError(
          "fake HTTP server: the accept loop did not start within 10s");
    }
    absl::SleepFor(absl::Milliseconds(1));
  }
  return absl::OkStatus();
}

void FakeHttpServer::Stop() {
  if (thread_.joinable()) {
    server_->stop();
    thread_.join();
  }
}

std::string FakeHttpServer::base_url() const {
  return absl::StrCat(tls_ ? "https" : "http", "://127.0.0.1:", port_);
}

std::vector<std::string> FakeHttpServer::requests() const {
  absl::MutexLock lock(&mu_);
  return requests_;
}

int FakeHttpServer::request_count() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(requests_.size());
}

void FakeHttpServer::Reply(httplib::Response& res, int status,
                           const Json& json) {
  res.status = status;
  res.set_content(json.dump(), "application/json");
}

void FakeHttpServer::ReplyError(httplib::Response& res, int status,
                                const std::string& message) {
  Reply(res, status,
        Json{{"error",
              {{"code", status},
               {"message", message},
               {"status", status == 404 ? "NOT_FOUND" : "ERROR"}}}});
}

}  // namespace cohort::testing
