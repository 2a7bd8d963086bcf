#include "cohort/rpc/status_conversion.h"

#include "absl/strings/cord.h"
#include "absl/strings/match.h"
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
  // kept as the message, whatever its length field would claim (its
  // control bytes escaped).
  EXPECT_EQ(DecodeErrorBody(absl::StatusCode::kInternal, "oops").message(),
            "oops");
  EXPECT_EQ(DecodeErrorBody(absl::StatusCode::kInternal,
                            std::string("\xff\xff\xff\x7f", 4) + "x")
                .message(),
            std::string("\xff\xff\xff", 3) + "\\x7fx");
}

// A peer's error message is shown to users and logged: its control bytes
// are escaped and its length is capped, on both transports.
TEST(StatusConversionTest, PeerMessagesAreSanitizedAndCapped) {
  const std::string hostile =
      "\x1b]0;owned\x07\r\nE1126 forged]" + std::string(1 << 20, 'A');
  for (const absl::Status& got :
       {FromGrpcStatus(grpc::Status(grpc::StatusCode::INTERNAL, hostile)),
        DecodeErrorBody(absl::StatusCode::kInternal,
                        EncodeErrorBody(absl::InternalError(hostile))),
        DecodeErrorBody(absl::StatusCode::kInternal, hostile)}) {
    EXPECT_EQ(got.code(), absl::StatusCode::kInternal);
    EXPECT_EQ(got.message().find('\x1b'), std::string::npos);
    EXPECT_EQ(got.message().find('\r'), std::string::npos);
    EXPECT_EQ(got.message().find('\n'), std::string::npos)
        << "a peer's message could start a log line of its own";
    EXPECT_TRUE(absl::StartsWith(got.message(),
                                 "\\x1b]0;owned\\x07\\x0d\\x0aE1126 forged]"))
        << got.message().substr(0, 40);
    EXPECT_LT(got.message().size(), kMaxPeerErrorMessageBytes + 64);
    EXPECT_TRUE(absl::StrContains(got.message(), "more bytes not shown"));
  }
}

}  // namespace
}  // namespace cohort::rpc
