#include "cohort/rpc/status_conversion.h"

#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "cohort/base/status.h"
#include "cohort/rpc.pb.h"
#include "cohort/rpc/coding.h"

namespace cohort::rpc {
namespace {

// The payloads of `status` as a serialized StatusDetails (from a service).
std::string EncodeDetails(const absl::Status& status) {
  StatusDetails details;
  status.ForEachPayload(
      [&details](absl::string_view url, const absl::Cord& payload) {
        (*details.mutable_payloads())[std::string(url)] = std::string(payload);
      });
  details.set_from_service(true);
  std::string encoded;
  details.SerializeToString(&encoded);
  return encoded;
}

// Status(code, message) with the payloads of `encoded` (none when it does
// not parse).
absl::Status WithDetails(absl::StatusCode code, absl::string_view message,
                         absl::string_view encoded) {
  absl::Status result(code, message);
  StatusDetails details;
  if (!encoded.empty() &&
      details.ParseFromArray(encoded.data(),
                             static_cast<int>(encoded.size()))) {
    for (const auto& [url, payload] : details.payloads()) {
      result.SetPayload(url, absl::Cord(payload));
    }
  }
  return result;
}

}  // namespace

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      std::string(status.message()), EncodeDetails(status));
}

bool IsCertificateRejection(const grpc::Status& status) {
  if (status.error_code() != grpc::StatusCode::UNAVAILABLE) return false;
  // gRPC reports a TLS handshake that failed only as text, so this one
  // check reads the message: "Ssl handshake failed: SSL_ERROR_SSL: ..." is
  // a TLS protocol failure (a certificate that did not verify, ours
  // refused by the peer's alert, no common protocol), never a transient
  // one: timeouts, resets and refusals read differently. OpenSSL's reason
  // after it varies with what failed first (a signature by another key
  // reads "asn1 encoding routines::EVP lib"), so it is not matched.
  const std::string lower = absl::AsciiStrToLower(status.error_message());
  return absl::StrContains(lower, "handshake failed") &&
         absl::StrContains(lower, "ssl_error_ssl");
}

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  if (IsCertificateRejection(status)) {
    // Not worth retrying (every retry fails the same way), and what to
    // check is the token or the certificates, not whether the peer is up.
    return absl::UnauthenticatedError(absl::StrCat(
        "the TLS handshake failed: the peer does not hold "
        "this job's token (job TLS), or its certificate is not from the "
        "given CA. Check COHORT_JOB_TOKEN / --token-file (or --tls-*) on both "
        "ends, and whether another process holds that port (",
        SanitizeForDisplay(status.error_message(), kMaxPeerErrorMessageBytes),
        ")"));
  }
  return WithDetails(
      static_cast<absl::StatusCode>(status.error_code()),
      SanitizeForDisplay(status.error_message(), kMaxPeerErrorMessageBytes),
      status.error_details());
}

std::string EncodeErrorBody(const absl::Status& status) {
  std::string body;
  PutFixed32(&body, static_cast<uint32_t>(status.message().size()));
  body.append(status.message().data(), status.message().size());
  body += EncodeDetails(status);
  return body;
}

absl::Status DecodeErrorBody(absl::StatusCode code, absl::string_view body) {
  if (body.size() < 4 || body.size() - 4 < DecodeFixed32(body.data())) {
    // Not ours: keep what came as the message.
    return absl::Status(code,
                        SanitizeForDisplay(body, kMaxPeerErrorMessageBytes));
  }
  const size_t length = DecodeFixed32(body.data());
  return WithDetails(
      code,
      SanitizeForDisplay(body.substr(4, length), kMaxPeerErrorMessageBytes),
      body.substr(4 + length));
}

bool AnsweredByService(const grpc::Status& status) {
  if (status.ok() || status.error_details().empty()) return false;
  StatusDetails details;
  return details.ParseFromString(status.error_details()) &&
         details.from_service();
}

}  // namespace cohort::rpc
