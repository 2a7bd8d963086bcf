#include "cohort/cluster/resolvers/http_client.h"

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cohort/base/status.h"
#include "httplib.h"
#include "openssl/bio.h"
#include "openssl/err.h"
#include "openssl/pem.h"
#include "openssl/ssl.h"
#include "openssl/x509.h"
#include "openssl/x509_vfy.h"
#include "openssl/x509v3.h"

namespace cohort {
namespace {

constexpr size_t kBodySnippet = 300;

std::string Snippet(absl::string_view body) {
  std::string s(body.substr(0, kBodySnippet));
  for (char& c : s) {
    if (c == '\n' || c == '\r' || c == '\t') c = ' ';
  }
  if (body.size() > kBodySnippet) absl::StrAppend(&s, "...");
  return s;
}

std::chrono::microseconds ToMicros(absl::Duration d) {
  return std::chrono::microseconds(absl::ToInt64Microseconds(d));
}

// Splits "scheme://host[:port]/path" into "scheme://host[:port]" and "/path".
absl::Status SplitUrl(absl::string_view url, std::string* origin,
                      std::string* path) {
  size_t scheme_end = url.find("://");
  if (scheme_end == absl::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("malformed URL \"", url,
                     "\": expected http://host[:port]/path or "
                     "https://host[:port]/path"));
  }
  std::string scheme = absl::AsciiStrToLower(url.substr(0, scheme_end));
  if (scheme != "http" && scheme != "https") {
    return absl::InvalidArgumentError(absl::StrCat(
        "unsupported URL scheme in \"", url, "\": expected http or https"));
  }
  size_t host_start = scheme_end + 3;
  size_t path_start = url.find('/', host_start);
  if (path_start == absl::string_view::npos) path_start = url.size();
  if (path_start == host_start) {
    return absl::InvalidArgumentError(
        absl::StrCat("malformed URL \"", url, "\": no host"));
  }
  *origin = absl::StrCat(scheme, "://",
                         url.substr(host_start, path_start - host_start));
  *path = path_start < url.size() ? std::string(url.substr(path_start)) : "/";
  return absl::OkStatus();
}

std::string WithHint(absl::string_view hint) {
  return hint.empty() ? std::string() : absl::StrCat("; check ", hint);
}

// "host[:port]" and the bare host (IPv6 without brackets) of an origin
// "scheme://host[:port]", for messages and the certificate's name check.
void HostOf(absl::string_view origin, std::string* host_port,
            std::string* host) {
  absl::string_view hp = origin.substr(origin.find("://") + 3);
  *host_port = std::string(hp);
  if (absl::StartsWith(hp, "[")) {
    size_t close = hp.find(']');
    *host = std::string(hp.substr(1, close == absl::string_view::npos
                                         ? absl::string_view::npos
                                         : close - 1));
    return;
  }
  *host = std::string(hp.substr(0, hp.find(':')));
}

// --- HTTPS verification ---------------------------------------------------
//
// cohort verifies servers with OpenSSL's own chain and host checks on the
// SSL_CTX, not with httplib's: httplib 0.11 adds the system store to any
// store it is given (so "trust exactly this cluster's CA" is not possible
// through it) and reports every failure as one bare error. With
// SSL_VERIFY_PEER on the context the handshake itself fails on a bad
// certificate, before a byte of the request (the bearer token included) is
// written, and the callback below keeps OpenSSL's reason for the message.

struct X509StoreFree {
  void operator()(X509_STORE* s) const { X509_STORE_free(s); }
};
struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
using TrustStore = std::unique_ptr<X509_STORE, X509StoreFree>;

// What verification of one connection's server certificate found.
struct TlsVerifyFailure {
  int error = X509_V_OK;  // the first X509_V_ERR_* seen
  int depth = -1;         // its certificate's place in the chain (0: leaf)
};

// The SSL_CTX ex-data slot holding the request's TlsVerifyFailure.
int VerifyFailureIndex() {
  static const int index =
      SSL_CTX_get_ex_new_index(0, nullptr, nullptr, nullptr, nullptr);
  return index;
}

// Runs on the requesting thread inside the handshake (each Send has its own
// client and SSL_CTX, so the slot is never shared).
int RecordVerifyFailure(int preverify_ok, X509_STORE_CTX* store_ctx) {
  if (preverify_ok == 1) return 1;
  auto* ssl = static_cast<SSL*>(X509_STORE_CTX_get_ex_data(
      store_ctx, SSL_get_ex_data_X509_STORE_CTX_idx()));
  if (ssl != nullptr) {
    auto* failure = static_cast<TlsVerifyFailure*>(
        SSL_CTX_get_ex_data(SSL_get_SSL_CTX(ssl), VerifyFailureIndex()));
    if (failure != nullptr && failure->error == X509_V_OK) {
      failure->error = X509_STORE_CTX_get_error(store_ctx);
      failure->depth = X509_STORE_CTX_get_error_depth(store_ctx);
    }
  }
  return 0;
}

// The trust anchors, as the messages name them.
std::string DescribeTrust(const HttpClient::Options& options) {
  if (!options.ca_cert_path.empty()) {
    return absl::StrCat("the CA certificates in ", options.ca_cert_path);
  }
  if (!options.ca_cert_pem.empty()) {
    return "the CA certificates given in the client options";
  }
  return "the system CA store";
}

std::string TakeOpenSslReason() {
  const unsigned long code = ERR_get_error();
  char reason[256] = "no reason given";
  if (code != 0) ERR_error_string_n(code, reason, sizeof(reason));
  ERR_clear_error();
  return reason;
}

// A store holding exactly the configured CAs (see Options).
absl::StatusOr<TrustStore> LoadTrustStore(const HttpClient::Options& options,
                                          absl::string_view hint) {
  // OpenSSL's error queue is per thread and an earlier connection may have
  // left entries in it; start clean so a reason below is this load's.
  ERR_clear_error();
  TrustStore store(X509_STORE_new());
  if (store == nullptr) {
    return absl::ResourceExhaustedError("cannot allocate an X509 store");
  }
  auto fail = [&](absl::string_view what) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot load ", DescribeTrust(options), ": ", what,
        " (it must exist and hold PEM \"BEGIN CERTIFICATE\" blocks)",
        WithHint(hint)));
  };
  if (!options.ca_cert_pem.empty()) {
    std::unique_ptr<BIO, BioFree> bio(BIO_new_mem_buf(
        options.ca_cert_pem.data(), options.ca_cert_pem.size()));
    int added = 0;
    while (bio != nullptr) {
      X509* cert = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr);
      if (cert == nullptr) break;  // the end of the text, or junk after it
      const int ok = X509_STORE_add_cert(store.get(), cert);
      X509_free(cert);
      if (ok != 1) return fail(TakeOpenSslReason());
      ++added;
    }
    ERR_clear_error();  // the read past the last block queues "no start line"
    if (added == 0) return fail("no certificate in it");
  } else if (!options.ca_cert_path.empty()) {
    if (X509_STORE_load_file(store.get(), options.ca_cert_path.c_str()) != 1) {
      return fail(TakeOpenSslReason());
    }
  } else if (X509_STORE_set_default_paths(store.get()) != 1) {
    return fail(TakeOpenSslReason());
  }
  return store;
}

// Sets `client`'s TLS verification up: exactly the configured CAs, and the
// certificate must name `host`. A no-op for plain HTTP.
absl::Status ConfigureTls(httplib::Client& client,
                          const HttpClient::Options& options,
                          const std::string& host, TlsVerifyFailure* failure,
                          absl::string_view hint) {
  SSL_CTX* ctx = client.ssl_context();
  if (ctx == nullptr) return absl::OkStatus();
  client.enable_server_certificate_verification(false);  // see above
  if (!options.verify_server_certificate) {
    SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, nullptr);
    return absl::OkStatus();
  }
  COHORT_ASSIGN_OR_RETURN(TrustStore store, LoadTrustStore(options, hint));
  SSL_CTX_set_cert_store(ctx, store.release());
  // An IP literal must be an IP subjectAltName and a name a DNS one (RFC
  // 6125); set1_ip_asc refuses a non-IP, which is how names are told apart.
  X509_VERIFY_PARAM* param = SSL_CTX_get0_param(ctx);
  if (X509_VERIFY_PARAM_set1_ip_asc(param, host.c_str()) != 1) {
    ERR_clear_error();
    X509_VERIFY_PARAM_set_hostflags(param,
                                    X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
    if (X509_VERIFY_PARAM_set1_host(param, host.c_str(), host.size()) != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot check TLS certificates against the host \"",
                       host, "\": ", TakeOpenSslReason(), WithHint(hint)));
    }
  }
  SSL_CTX_set_ex_data(ctx, VerifyFailureIndex(), failure);
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, RecordVerifyFailure);
  return absl::OkStatus();
}

}  // namespace

absl::StatusCode StatusCodeForHttpStatus(int http_status) {
  switch (http_status) {
    case 400:
      return absl::StatusCode::kInvalidArgument;
    case 401:
      return absl::StatusCode::kUnauthenticated;
    case 403:
      return absl::StatusCode::kPermissionDenied;
    case 404:
      return absl::StatusCode::kNotFound;
    case 408:
    case 429:
      return absl::StatusCode::kUnavailable;
    default:
      if (http_status >= 500) return absl::StatusCode::kUnavailable;
      return absl::StatusCode::kFailedPrecondition;
  }
}

std::string UrlEncode(absl::string_view s) {
  std::string out;
  for (unsigned char c : s) {
    if (absl::ascii_isalnum(c) || c == '-' || c == '_' || c == '.' ||
        c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      absl::StrAppendFormat(&out, "%%%02X", c);
    }
  }
  return out;
}

absl::StatusOr<HttpResponse> HttpClient::Send(absl::string_view method,
                                              absl::string_view url,
                                              const HttpHeaders& headers,
                                              absl::string_view body,
                                              absl::string_view content_type,
                                              absl::string_view hint) const {
  std::string origin, path;
  COHORT_RETURN_IF_ERROR(SplitUrl(url, &origin, &path));
  // Declared before the client so it outlives the client's SSL_CTX, whose
  // verify callback writes it during the request.
  TlsVerifyFailure verify_failure;
  std::unique_ptr<httplib::Client> client;
  if (!options_.client_cert_path.empty()) {
    client = std::make_unique<httplib::Client>(
        origin, options_.client_cert_path, options_.client_key_path);
  } else {
    client = std::make_unique<httplib::Client>(origin);
  }
  if (!client->is_valid()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot create an HTTP client for \"", url,
        "\" (bad host, or the TLS client certificate/key could not be loaded)",
        WithHint(hint)));
  }
  client->set_connection_timeout(ToMicros(options_.connect_timeout));
  client->set_read_timeout(ToMicros(options_.read_timeout));
  client->set_write_timeout(ToMicros(options_.read_timeout));
  client->set_keep_alive(false);
  client->set_follow_location(false);
  std::string host_port, host;
  HostOf(origin, &host_port, &host);
  COHORT_RETURN_IF_ERROR(
      ConfigureTls(*client, options_, host, &verify_failure, hint));

  httplib::Headers h;
  for (const auto& [k, v] : headers) h.emplace(k, v);

  if (method != "GET" && method != "POST") {
    return absl::InvalidArgumentError(
        absl::StrCat("unsupported HTTP method ", method, " for ", url));
  }
  httplib::Result result =
      method == "GET"
          ? client->Get(path, h)
          : client->Post(path, h, std::string(body), std::string(content_type));
  // Whatever httplib's TLS calls queued concerns this request only.
  ERR_clear_error();
  if (!result) {
    if (verify_failure.error != X509_V_OK) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "%s %s failed: the TLS certificate of %s was refused: %s (the "
          "certificate at depth %d of its chain) when verified against %s; "
          "is that the CA that issued the server's certificate, and does "
          "the certificate name %s? Nothing was sent%s",
          std::string(method), std::string(url), host_port,
          X509_verify_cert_error_string(verify_failure.error),
          verify_failure.depth, DescribeTrust(options_), host, WithHint(hint)));
    }
    std::string detail = httplib::to_string(result.error());
    if (result.error() == httplib::Error::SSLConnection) {
      detail += absl::StrCat(" (the TLS handshake with ", host_port,
                             " failed: does it serve HTTPS?)");
    }
    return absl::UnavailableError(absl::StrFormat(
        "%s %s failed: %s (connect timeout %s, read timeout %s)%s",
        std::string(method), std::string(url), detail,
        absl::FormatDuration(options_.connect_timeout),
        absl::FormatDuration(options_.read_timeout), WithHint(hint)));
  }
  HttpResponse response;
  response.status = result->status;
  response.body = std::move(result->body);
  return response;
}

namespace {

absl::StatusOr<std::string> RequireOk(absl::string_view method,
                                      absl::string_view url,
                                      absl::StatusOr<HttpResponse> response,
                                      absl::string_view hint) {
  if (!response.ok()) return response.status();
  if (response->status < 200 || response->status >= 300) {
    return absl::Status(
        StatusCodeForHttpStatus(response->status),
        absl::StrFormat("%s %s returned HTTP %d: %s%s", std::string(method),
                        std::string(url), response->status,
                        Snippet(response->body), WithHint(hint)));
  }
  return std::move(response->body);
}

absl::StatusOr<Json> ParseBody(absl::string_view method, absl::string_view url,
                               const std::string& body) {
  absl::StatusOr<Json> json =
      ParseJson(body, absl::StrCat("response of ", method, " ", url));
  if (!json.ok()) {
    return absl::InternalError(
        absl::StrCat(json.status().message(), " (body: ", Snippet(body), ")"));
  }
  return json;
}

}  // namespace

absl::StatusOr<std::string> HttpClient::GetText(absl::string_view url,
                                                const HttpHeaders& headers,
                                                absl::string_view hint) const {
  return RequireOk("GET", url, Send("GET", url, headers, "", "", hint), hint);
}

absl::StatusOr<Json> HttpClient::GetJson(absl::string_view url,
                                         const HttpHeaders& headers,
                                         absl::string_view hint) const {
  COHORT_ASSIGN_OR_RETURN(std::string body, GetText(url, headers, hint));
  return ParseBody("GET", url, body);
}

absl::StatusOr<Json> HttpClient::PostJson(absl::string_view url,
                                          const HttpHeaders& headers,
                                          const Json& body,
                                          absl::string_view hint) const {
  COHORT_ASSIGN_OR_RETURN(std::string text,
                          RequireOk("POST", url,
                                    Send("POST", url, headers, body.dump(),
                                         "application/json", hint),
                                    hint));
  return ParseBody("POST", url, text);
}

}  // namespace cohort
