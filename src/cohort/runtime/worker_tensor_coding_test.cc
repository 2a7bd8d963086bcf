#include "cohort/runtime/worker_tensor_coding.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort::runtime {
namespace {

using ::testing::HasSubstr;

TensorProto FloatProto(std::initializer_list<int64_t> dims,
                       size_t content_bytes) {
  TensorProto p;
  p.set_dtype(DT_FLOAT);
  for (int64_t d : dims) p.mutable_tensor_shape()->add_dim()->set_size(d);
  p.set_tensor_content(std::string(content_bytes, '\0'));
  return p;
}

TEST(WorkerTensorCodingTest, RoundTripKeepsDtypeShapeAndValues) {
  Tensor t =
      *Tensor::FromVector<float>({1, 2, 3, 4, 5, 6}, TensorShape({2, 3}));
  TensorProto p;
  ASSERT_TRUE(EncodeWireTensor(t, "x", &p).ok());
  auto back = DecodeWireTensor(p, "x");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(back->Equals(t));

  Tensor s(DT_STRING, TensorShape({2}));
  s.flat<std::string>()(0) = "a";
  s.flat<std::string>()(1) = std::string(100, 'b');
  ASSERT_TRUE(EncodeWireTensor(s, "s", &p).ok());
  back = DecodeWireTensor(p, "s");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(back->Equals(s));
}

TEST(WorkerTensorCodingTest, WrongContentLengthIsInvalidArgumentWithSizes) {
  auto t = DecodeWireTensor(FloatProto({2, 3}, 5), "feed 'x'");
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(t.status().message(),
            "feed 'x': tensor_content has 5 bytes but shape [2,3] of float "
            "needs 24");
  // One byte too many is refused too.
  EXPECT_EQ(DecodeWireTensor(FloatProto({2, 3}, 25), "x").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(WorkerTensorCodingTest, NegativeDimensionIsNamed) {
  auto t = DecodeWireTensor(FloatProto({2, -3}, 0), "feed 'x'");
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(t.status().message(),
              HasSubstr("dimension 1 of the shape is negative (-3)"));
}

TEST(WorkerTensorCodingTest, AbsurdSizesAreRefusedBeforeAllocating) {
  // Element count overflows int64.
  auto t = DecodeWireTensor(FloatProto({int64_t{1} << 40, int64_t{1} << 40}, 4),
                            "x");
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(t.status().message(), HasSubstr("overflows int64"));
  // 4 TiB of floats declared by a few bytes: over the 2 GiB - 1 cap.
  t = DecodeWireTensor(FloatProto({int64_t{1} << 40}, 4), "x");
  EXPECT_EQ(t.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(t.status().message(), HasSubstr("2147483647"));
  // Bytes times element size overflows.
  t = DecodeWireTensor(FloatProto({int64_t{1} << 62}, 0), "x");
  EXPECT_EQ(t.status().code(), absl::StatusCode::kResourceExhausted);
  // The cap is configurable: 1 KiB refuses 1,000 floats.
  t = DecodeWireTensor(FloatProto({1000}, 4000), "x", 1024);
  EXPECT_EQ(t.status().code(), absl::StatusCode::kResourceExhausted);
}

TEST(WorkerTensorCodingTest, UnknownDtypeIsInvalidArgument) {
  TensorProto p = FloatProto({1}, 4);
  p.set_dtype(static_cast<DataType>(77));
  auto t = DecodeWireTensor(p, "feed 'x'");
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(t.status().message(), "feed 'x': unknown dtype 77");
  p.set_dtype(DT_INVALID);
  EXPECT_EQ(DecodeWireTensor(p, "x").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(WorkerTensorCodingTest, UnknownRankAndValueCountMismatch) {
  TensorProto p = FloatProto({2}, 0);
  p.mutable_tensor_shape()->set_unknown_rank(true);
  EXPECT_EQ(DecodeWireTensor(p, "x").status().code(),
            absl::StatusCode::kInvalidArgument);
  TensorProto q = FloatProto({3}, 0);
  q.add_float_val(1);
  q.add_float_val(2);  // 2 values for 3 elements, not a broadcast.
  EXPECT_EQ(DecodeWireTensor(q, "x").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(WorkerTensorCodingTest, EncodeRefusesTensorsOverTheCap) {
  Tensor t(DT_FLOAT, TensorShape({300}));
  TensorProto p;
  absl::Status s = EncodeWireTensor(t, "fetch 'y'", &p, 1024);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(), HasSubstr("fetch 'y'"));
}

}  // namespace
}  // namespace cohort::runtime
