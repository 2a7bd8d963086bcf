#include "cohort/rpc/status_conversion.h"

#include <string>

#include "absl/strings/cord.h"
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

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return WithDetails(static_cast<absl::StatusCode>(status.error_code()),
                     status.error_message(), status.error_details());
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
    return absl::Status(code, body);
  }
  const size_t length = DecodeFixed32(body.data());
  return WithDetails(code, body.substr(4, length), body.substr(4 + length));
}

bool AnsweredByService(const grpc::Status& status) {
  if (status.ok() || status.error_details().empty()) return false;
  StatusDetails details;
  return details.ParseFromString(status.error_details()) &&
         details.from_service();
}

}  // namespace cohort::rpc
