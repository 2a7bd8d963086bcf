// A small blocking HTTP/HTTPS client for the REST-based resolvers
// (Kubernetes, GCE, Cloud TPU) and the GCE metadata server, over cpp-httplib.
//
//   HttpClient http;                                   // default timeouts
//   COHORT_ASSIGN_OR_RETURN(Json pods,
//       http.GetJson("https://10.0.0.1:443/api/v1/pods?labelSelector=a%3Db",
//                    {{"Authorization", "Bearer ..."}},
//                    "the Kubernetes API server (check KUBERNETES_SERVICE_HOST
//                    " "and the service-account token)"));
//
// Every request is bounded: a connection timeout and a read/write timeout
// (Options), so no call hangs. Errors name the URL, the HTTP status or
// transport error, a snippet of the response body, and the caller's hint of
// what to check:
//   - the server cannot be reached / times out      -> Unavailable
//   - HTTPS: the CA certificates cannot be loaded    -> FailedPrecondition
//     (names the CA file)
//   - HTTPS: the server's certificate does not verify against the trusted
//     CAs or does not name the host dialled         -> FailedPrecondition
//     (names host:port, the CA file or "the system CA store", and OpenSSL's
//     reason); nothing of the request, headers included, was sent
//   - 400 InvalidArgument, 401 Unauthenticated, 403 PermissionDenied,
//     404 NotFound, 408/429/5xx Unavailable, other non-2xx FailedPrecondition
//   - a 2xx body that is not JSON (GetJson/PostJson) -> Internal
//
// Thread safety: thread-safe (each request opens its own connection).
#ifndef COHORT_CLUSTER_RESOLVERS_HTTP_CLIENT_H_
#define COHORT_CLUSTER_RESOLVERS_HTTP_CLIENT_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "cohort/base/json.h"

namespace cohort {

using HttpHeaders = std::vector<std::pair<std::string, std::string>>;

struct HttpResponse {
  int status = 0;
  std::string body;
};

class HttpClient {
 public:
  struct Options {
    absl::Duration connect_timeout = absl::Seconds(5);
    // Bounds each read and write on the connection.
    absl::Duration read_timeout = absl::Seconds(30);
    // HTTPS: which CAs the server's certificate must chain to; exactly
    // these are trusted. `ca_cert_pem` (PEM text, e.g. read through Env) is
    // used when set; else the PEM file `ca_cert_path`; else the system
    // store. With ca_cert_pem set, ca_cert_path (if any) only says where the
    // text came from, for messages. The certificate must also name the host
    // of the URL (subjectAltName DNS or IP).
    std::string ca_cert_pem;
    std::string ca_cert_path;
    // HTTPS: PEM client certificate and key for mutual TLS ("" = none).
    std::string client_cert_path;
    std::string client_key_path;
    // HTTPS: verify the server certificate (turn off only for tests).
    bool verify_server_certificate = true;
  };

  HttpClient() : HttpClient(Options()) {}
  explicit HttpClient(Options options) : options_(std::move(options)) {}

  const Options& options() const { return options_; }

  // Sends one request and returns the response whatever its status.
  // `url` is "http[s]://host[:port]/path?query". Blocks up to the timeouts.
  // InvalidArgument for a malformed URL; Unavailable when the server cannot
  // be reached or does not answer in time; FailedPrecondition for the HTTPS
  // failures of the file comment (messages name the URL and `hint`).
  absl::StatusOr<HttpResponse> Send(absl::string_view method,
                                    absl::string_view url,
                                    const HttpHeaders& headers,
                                    absl::string_view body,
                                    absl::string_view content_type,
                                    absl::string_view hint) const;

  // GET / POST that require a 2xx answer; see the file comment for codes.
  absl::StatusOr<std::string> GetText(absl::string_view url,
                                      const HttpHeaders& headers,
                                      absl::string_view hint) const;
  absl::StatusOr<Json> GetJson(absl::string_view url,
                               const HttpHeaders& headers,
                               absl::string_view hint) const;
  absl::StatusOr<Json> PostJson(absl::string_view url,
                                const HttpHeaders& headers, const Json& body,
                                absl::string_view hint) const;

 private:
  Options options_;
};

// Maps a non-2xx HTTP status to an error code (see the file comment).
absl::StatusCode StatusCodeForHttpStatus(int http_status);

// Percent-encodes `s` for a URL query value or path segment (RFC 3986
// unreserved characters are kept).
std::string UrlEncode(absl::string_view s);

}  // namespace cohort

#endif  // COHORT_CLUSTER_RESOLVERS_HTTP_CLIENT_H_
