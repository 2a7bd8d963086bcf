#include "cohort/cluster/resolvers/http_client.h"

#include <chrono>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cohort/base/status.h"
#include "httplib.h"

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
  if (!options_.ca_cert_path.empty()) {
    client->set_ca_cert_path(options_.ca_cert_path);
  }
  client->enable_server_certificate_verification(
      options_.verify_server_certificate);

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
  if (!result) {
    std::string detail = httplib::to_string(result.error());
    if (result.error() == httplib::Error::SSLServerVerification) {
      detail += " (the server certificate did not verify against the CA)";
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
