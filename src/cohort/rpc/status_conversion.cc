#include "cohort/rpc/status_conversion.h"

#include <string>

#include "absl/strings/cord.h"
#include "cohort/rpc.pb.h"

namespace cohort::rpc {

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  StatusDetails details;
  status.ForEachPayload(
      [&details](absl::string_view url, const absl::Cord& payload) {
        (*details.mutable_payloads())[std::string(url)] = std::string(payload);
      });
  details.set_from_service(true);
  std::string encoded;
  details.SerializeToString(&encoded);
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      std::string(status.message()), encoded);
}

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  absl::Status result(static_cast<absl::StatusCode>(status.error_code()),
                      status.error_message());
  if (!status.error_details().empty()) {
    StatusDetails details;
    if (details.ParseFromString(status.error_details())) {
      for (const auto& [url, payload] : details.payloads()) {
        result.SetPayload(url, absl::Cord(payload));
      }
    }
  }
  return result;
}

bool AnsweredByService(const grpc::Status& status) {
  if (status.ok() || status.error_details().empty()) return false;
  StatusDetails details;
  return details.ParseFromString(status.error_details()) &&
         details.from_service();
}

}  // namespace cohort::rpc
