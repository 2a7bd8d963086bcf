// FakeHttpServer: an in-process HTTP server on 127.0.0.1 with an OS-chosen
// port, the base of the fake Kubernetes, Compute Engine, Cloud TPU and
// metadata servers that resolver tests and the conformance runner talk to.
//
//   FakeHttpServer server;
//   server.server().Get("/x", [](const httplib::Request&, httplib::Response& r)
//   {...}); COHORT_CHECK_OK(server.Start()); http.GetText(server.base_url() +
//   "/x", ...);
//
// Given a TlsServerCertificate (testing/test_certificates.h) it speaks HTTPS
// instead, presenting that certificate, and base_url() is "https://...": the
// client must trust the issuing test CA, as resolvers trust a cluster's CA.
//
// Start() binds and listens before returning, so requests made right after
// it are queued, never refused. Stop() (also run by the destructor) waits for
// the serving thread.
//
// Thread safety: handlers run on the server's threads; the request log is
// thread-safe. Register handlers before Start().
#ifndef COHORT_CLUSTER_RESOLVERS_TESTING_FAKE_HTTP_SERVER_H_
#define COHORT_CLUSTER_RESOLVERS_TESTING_FAKE_HTTP_SERVER_H_

#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "cohort/base/json.h"
#include "cohort/cluster/resolvers/testing/test_certificates.h"
#include "httplib.h"

namespace cohort::testing {

class FakeHttpServer {
 public:
  // Plain HTTP without `tls`, HTTPS with that certificate.
  explicit FakeHttpServer(
      std::optional<TlsServerCertificate> tls = std::nullopt);
  virtual ~FakeHttpServer();
  FakeHttpServer(const FakeHttpServer&) = delete;
  FakeHttpServer& operator=(const FakeHttpServer&) = delete;

  httplib::Server& server() { return *server_; }

  // Binds 127.0.0.1:0 and starts serving on a thread. Internal when no port
  // can be bound or the TLS certificate and key are not usable.
  absl::Status Start();
  // Stops serving and joins the thread; idempotent.
  void Stop();

  int port() const { return port_; }
  // "http://127.0.0.1:<port>", or "https://..." when serving TLS.
  std::string base_url() const;

  // "METHOD /path?query" of every request answered so far, in order.
  std::vector<std::string> requests() const;
  int request_count() const;

  // Writes `json` with `status` to `res`.
  static void Reply(httplib::Response& res, int status, const Json& json);
  // A Google-API-style error body {"error": {code, message, status}}.
  static void ReplyError(httplib::Response& res, int status,
                         const std::string& message);

 private:
  // Set when the TLS certificate or key could not be loaded; Start()
  // returns it (a constructor cannot).
  absl::Status tls_error_;
  const bool tls_;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  int port_ = -1;
  mutable absl::Mutex mu_;
  std::vector<std::string> requests_ ABSL_GUARDED_BY(mu_);
};

}  // namespace cohort::testing

#endif  // COHORT_CLUSTER_RESOLVERS_TESTING_FAKE_HTTP_SERVER_H_
