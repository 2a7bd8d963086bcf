#include "cohort/rpc/status_conversion.h"

#include "absl/strings/cord.h"
#include "gtest/gtest.h"

namespace cohort::rpc {
namespace {

TEST(StatusConversionTest, RoundTripKeepsCodeMessageAndPayloads) {
  absl::Status status = absl::AbortedError("task worker:1 restarted");
  status.SetPayload("type.googleapis.com/x.A", absl::Cord("alpha"));
  status.SetPayload("type.googleapis.com/x.B",
                    absl::Cord(std::string("\0b", 2)));
  absl::Status back = FromGrpcStatus(ToGrpcStatus(status));
  EXPECT_EQ(back.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(back.message(), "task worker:1 restarted");
  ASSERT_TRUE(back.GetPayload("type.googleapis.com/x.A").has_value());
  EXPECT_EQ(std::string(*back.GetPayload("type.googleapis.com/x.A")), "alpha");
  EXPECT_EQ(std::string(*back.GetPayload("type.googleapis.com/x.B")),
            std::string("\0b", 2));
}

TEST(StatusConversionTest, OkStaysOk) {
  EXPECT_TRUE(FromGrpcStatus(ToGrpcStatus(absl::OkStatus())).ok());
  EXPECT_TRUE(ToGrpcStatus(absl::OkStatus()).ok());
}

TEST(StatusConversionTest, GarbageDetailsAreIgnored) {
  grpc::Status status(grpc::StatusCode::UNAVAILABLE, "down", "\xff\xff\xff");
  absl::Status back = FromGrpcStatus(status);
  EXPECT_EQ(back.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(back.message(), "down");
}

}  // namespace
}  // namespace cohort::rpc

namespace cohort::rpc {
namespace {

TEST(StatusConversionTest, ServiceAnswersAreToldFromTransportErrors) {
  // Also an error without payloads, which once crossed with empty details.
  EXPECT_TRUE(AnsweredByService(
      ToGrpcStatus(absl::UnavailableError("server /job:ps is stopping"))));
  // What gRPC itself reports for a peer that is not there.
  EXPECT_FALSE(AnsweredByService(
      grpc::Status(grpc::StatusCode::UNAVAILABLE, "Connection refused")));
  EXPECT_FALSE(AnsweredByService(grpc::Status::OK));
  EXPECT_FALSE(AnsweredByService(
      grpc::Status(grpc::StatusCode::UNAVAILABLE, "x", "not a proto")));
}

}  // namespace
}  // namespace cohort::rpc

namespace cohort::rpc {
namespace {

TEST(StatusConversionTest, FramedErrorBodiesKeepMessageAndPayloads) {
  absl::Status error = absl::AlreadyExistsError("key 'k' exists");
  error.SetPayload("type.example/which", absl::Cord("worker:1"));
  const absl::Status back =
      DecodeErrorBody(error.code(), EncodeErrorBody(error));
  EXPECT_EQ(back.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(back.message(), "key 'k' exists");
  ASSERT_TRUE(back.GetPayload("type.example/which").has_value());
  EXPECT_EQ(std::string(*back.GetPayload("type.example/which")), "worker:1");
  // A body that is not one (another framed server's plain message) is
  // kept as the message, whatever its length field would claim.
  EXPECT_EQ(DecodeErrorBody(absl::StatusCode::kInternal, "oops").message(),
            "oops");
  EXPECT_EQ(DecodeErrorBody(absl::StatusCode::kInternal,
                            std::string("\xff\xff\xff\x7f", 4) + "x")
                .message()
                .size(),
            5u);
}

}  // namespace
}  // namespace cohort::rpc
