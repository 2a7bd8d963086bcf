#include "cohort/rpc/frame.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "cohort/rpc/coding.h"
#include "gtest/gtest.h"

namespace cohort::rpc {
namespace {

TEST(CodingTest, Fixed32RoundTripsLittleEndian) {
  std::string out;
  PutFixed32(&out, 0x01020304u);
  ASSERT_EQ(out, std::string("\x04\x03\x02\x01", 4));
  EXPECT_EQ(DecodeFixed32(out.data()), 0x01020304u);
  out.clear();
  PutFixed32(&out, 0xffffffffu);
  EXPECT_EQ(DecodeFixed32(out.data()), 0xffffffffu);
}

TEST(FrameReaderTest, SplitsAStreamFedOneByteAtATime) {
  std::string stream;
  AppendFrame(&stream, "first");
  AppendFrame(&stream, "");
  AppendFrame(&stream, std::string(1000, 'x'));
  FrameReader reader(4096);
  std::vector<std::string> frames;
  std::string payload;
  for (char c : stream) {
    reader.Append(&c, 1);
    while (reader.Next(&payload) == FrameReader::Result::kFrame) {
      frames.push_back(payload);
    }
  }
  ASSERT_EQ(frames.size(), 3u);
  EXPECT_EQ(frames[0], "first");
  EXPECT_EQ(frames[1], "");
  EXPECT_EQ(frames[2], std::string(1000, 'x'));
  EXPECT_EQ(reader.buffered(), 0u);
}

TEST(FrameReaderTest, RefusesAnOversizedFrameFromItsHeaderAlone) {
  // The 2 GiB announcement must be refused from the 4 header bytes, before
  // anything of that size is buffered or allocated.
  std::string header;
  PutFixed32(&header, 0x7fffffffu);
  FrameReader reader(1 << 20);
  reader.Append(header.data(), header.size());
  std::string payload;
  uint64_t announced = 0;
  EXPECT_EQ(reader.Next(&payload, &announced), FrameReader::Result::kTooLarge);
  EXPECT_EQ(announced, 0x7fffffffu);
  EXPECT_TRUE(payload.empty());
}

TEST(FrameReaderTest, FrameAtTheCapIsAcceptedOneAboveIsNot) {
  std::string stream;
  AppendFrame(&stream, std::string(16, 'a'));
  FrameReader at(16);
  at.Append(stream.data(), stream.size());
  std::string payload;
  EXPECT_EQ(at.Next(&payload), FrameReader::Result::kFrame);
  FrameReader below(15);
  below.Append(stream.data(), stream.size());
  EXPECT_EQ(below.Next(&payload), FrameReader::Result::kTooLarge);
}

// A length near 2^32 must not wrap when the header is added to it (found
// by fuzz_framed_stream with a cap above 4 GiB).
TEST(FrameReaderTest, LengthsNear4GiBDoNotWrap) {
  std::string header;
  PutFixed32(&header, 0xFFFFFFFFu);
  FrameReader reader(size_t{1} << 33);
  reader.Append(header.data(), header.size());
  reader.Append("abc", 3);
  std::string payload;
  EXPECT_EQ(reader.Next(&payload), FrameReader::Result::kNeedMore);
  EXPECT_TRUE(payload.empty());
}

TEST(FrameReaderTest, PartialFrameNeedsMore) {
  std::string stream;
  AppendFrame(&stream, "hello");
  FrameReader reader(64);
  reader.Append(stream.data(), stream.size() - 1);
  std::string payload;
  EXPECT_EQ(reader.Next(&payload), FrameReader::Result::kNeedMore);
  reader.Append(stream.data() + stream.size() - 1, 1);
  EXPECT_EQ(reader.Next(&payload), FrameReader::Result::kFrame);
  EXPECT_EQ(payload, "hello");
}

// Feeds `stream` through ReadSpace/Commit in reads of `chunk` bytes, as a
// server's read loop does, and returns the frames in order.
std::vector<std::string> ReadDirect(const std::string& stream, size_t chunk,
                                    size_t max_frame, bool* too_large) {
  FrameReader reader(max_frame);
  std::vector<std::string> frames;
  size_t at = 0;
  *too_large = false;
  while (true) {
    absl::Span<char> space = reader.ReadSpace(chunk);
    const size_t n = std::min(space.size(), stream.size() - at);
    std::memcpy(space.data(), stream.data() + at, n);
    reader.Commit(n);
    at += n;
    std::string frame;
    FrameReader::Result r;
    while ((r = reader.Next(&frame)) == FrameReader::Result::kFrame) {
      frames.push_back(frame);
    }
    if (r == FrameReader::Result::kTooLarge) {
      *too_large = true;
      return frames;
    }
    if (at == stream.size() && n == 0) return frames;
  }
}

TEST(FrameReaderTest, DirectReadsKeepLargeAndSmallFramesInOrder) {
  // Small, large (read straight into its string), large again right behind
  // it, small: every boundary position of a 4 KiB read relative to them.
  const std::string big1(FrameReader::kDirectFrameBytes + 5, 'a');
  const std::string big2(3 * FrameReader::kDirectFrameBytes + 1, 'b');
  // Larger than the first step the frame's string grows by (1 MiB).
  const std::string big3((size_t{5} << 20) + 3, 'c');
  std::string stream;
  AppendFrame(&stream, "one");
  AppendFrame(&stream, big1);
  AppendFrame(&stream, big2);
  AppendFrame(&stream, big3);
  AppendFrame(&stream, "two");
  for (size_t chunk : {size_t{1} << 12, size_t{4093}, size_t{1} << 20}) {
    bool too_large = false;
    std::vector<std::string> frames =
        ReadDirect(stream, chunk, size_t{8} << 20, &too_large);
    EXPECT_FALSE(too_large);
    ASSERT_EQ(frames.size(), 5u) << "chunk " << chunk;
    EXPECT_EQ(frames[0], "one");
    EXPECT_EQ(frames[1], big1);
    EXPECT_EQ(frames[2], big2);
    EXPECT_EQ(frames[3], big3);
    EXPECT_EQ(frames[4], "two");
  }
  // The cap still holds: nothing is allocated for an oversized frame.
  bool too_large = false;
  ReadDirect(stream, 4096, FrameReader::kDirectFrameBytes, &too_large);
  EXPECT_TRUE(too_large);
}

TEST(GreetingTest, RoundTripsAndRejectsOtherBytes) {
  const std::string nonce = RandomNonce();
  ASSERT_EQ(nonce.size(), kNonceBytes);
  absl::StatusOr<std::string> parsed = ParseGreeting(GreetingPayload(nonce));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(*parsed, nonce);
  EXPECT_TRUE(
      absl::IsInvalidArgument(ParseGreeting("HTTP/1.1 200 OK").status()));
  std::string wrong_magic = GreetingPayload(nonce);
  wrong_magic[0] = 'X';
  EXPECT_TRUE(absl::IsInvalidArgument(ParseGreeting(wrong_magic).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(
      ParseGreeting(GreetingPayload(nonce.substr(1))).status()));
}

TEST(HelloTest, ProofHoldsOnlyForTheSameTokenAndNonce) {
  const std::string nonce = RandomNonce();
  const std::string other_nonce = RandomNonce();
  ASSERT_NE(nonce, other_nonce);
  const std::string proof = HelloProof("job-token", nonce);
  EXPECT_EQ(proof.size(), kProofBytes);
  EXPECT_TRUE(VerifyHello("job-token", nonce, proof));
  EXPECT_FALSE(VerifyHello("job-tokeN", nonce, proof));
  EXPECT_FALSE(VerifyHello("job-token", other_nonce, proof));  // replay
  EXPECT_FALSE(VerifyHello("job-token", nonce, proof.substr(1)));
  EXPECT_FALSE(VerifyHello("job-token", nonce, ""));
  // A server without a token accepts any hello.
  EXPECT_TRUE(VerifyHello("", nonce, "anything"));
}

// Both proofs bind the server's identity: a hello meant for one server is
// refused by another of the same job, and the other's answer by the client.
TEST(FrameTest, ProofsBindTheServersIdentity) {
  const std::string nonce = RandomNonce();
  const std::string client_nonce = RandomNonce();
  const std::string hello =
      HelloPayload("job-token", nonce, client_nonce, "server A");
  EXPECT_TRUE(VerifyHello("job-token", nonce, hello, "server A"));
  EXPECT_FALSE(VerifyHello("job-token", nonce, hello, "server B"));
  EXPECT_FALSE(VerifyHello("job-token", nonce, hello));
  const std::string proof =
      ServerProof("job-token", nonce, client_nonce, "server B");
  EXPECT_FALSE(
      VerifyServerProof("job-token", nonce, client_nonce, proof, "server A"));
  EXPECT_TRUE(
      VerifyServerProof("job-token", nonce, client_nonce, proof, "server B"));
  // The length prefix keeps identity and nonce apart.
  EXPECT_NE(HelloProof("job-token", nonce, "a"),
            HelloProof("job-token", nonce, ""));
}

// The server proves the token too: over both nonces, so an impostor that
// bound the port cannot answer, and a proof for one client fits no other.
TEST(FrameTest, ServerProofBindsTokenAndBothNonces) {
  const std::string nonce = RandomNonce();
  const std::string client_nonce = RandomNonce();
  const std::string hello = HelloPayload("job-token", nonce, client_nonce);
  EXPECT_TRUE(VerifyHello("job-token", nonce, hello));
  EXPECT_EQ(HelloClientNonce(hello), client_nonce);
  EXPECT_EQ(HelloClientNonce(HelloProof("job-token", nonce)), "");
  const std::string proof = ServerProof("job-token", nonce, client_nonce);
  EXPECT_TRUE(VerifyServerProof("job-token", nonce, client_nonce, proof));
  EXPECT_FALSE(VerifyServerProof("job-tokeN", nonce, client_nonce, proof));
  EXPECT_FALSE(VerifyServerProof("job-token", nonce, RandomNonce(), proof));
  EXPECT_FALSE(
      VerifyServerProof("job-token", RandomNonce(), client_nonce, proof));
  EXPECT_FALSE(VerifyServerProof("job-token", nonce, client_nonce, ""));
  EXPECT_NE(proof, HelloProof("job-token", nonce));
}

TEST(ReplyTest, DecodesBodiesAndErrorsAndRejectsBadCodes) {
  std::string frame;
  AppendReplyFrame(&frame, absl::StatusCode::kOk, "body");
  FrameReader reader(64);
  reader.Append(frame.data(), frame.size());
  std::string payload;
  ASSERT_EQ(reader.Next(&payload), FrameReader::Result::kFrame);
  absl::StatusOr<std::string> ok = ParseReply(payload);
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(*ok, "body");

  frame.clear();
  AppendReplyFrame(&frame, absl::StatusCode::kAborted, "stage stopped");
  reader.Append(frame.data(), frame.size());
  ASSERT_EQ(reader.Next(&payload), FrameReader::Result::kFrame);
  absl::StatusOr<std::string> error = ParseReply(payload);
  EXPECT_EQ(error.status().code(), absl::StatusCode::kAborted);
  EXPECT_EQ(error.status().message(), "stage stopped");

  EXPECT_TRUE(absl::IsDataLoss(ParseReply("").status()));
  EXPECT_TRUE(absl::IsDataLoss(ParseReply(std::string(1, '\x11')).status()));
  EXPECT_TRUE(absl::IsDataLoss(ParseReply(std::string(1, '\xff')).status()));
}

TEST(CodingTest, Fixed64RoundTripsLittleEndian) {
  std::string s;
  PutFixed64(&s, 0x0102030405060708ull);
  ASSERT_EQ(s.size(), 8u);
  EXPECT_EQ(s[0], '\x08');
  EXPECT_EQ(DecodeFixed64(s.data()), 0x0102030405060708ull);
}

TEST(PayloadReplyTest, RoundTripsHeaderAndLength) {
  std::string frame;
  AppendPayloadReplyFrame(&frame, "hdr", 12345);
  FrameReader reader(kDefaultMaxFrame);
  reader.Append(frame.data(), frame.size());
  std::string payload;
  ASSERT_EQ(reader.Next(&payload), FrameReader::Result::kFrame);
  absl::StatusOr<std::string> body = ParseReply(payload);
  ASSERT_TRUE(body.ok()) << body.status();
  absl::StatusOr<PayloadReply> reply = ParsePayloadReply(*body, 1 << 20);
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_EQ(reply->header, "hdr");
  EXPECT_EQ(reply->payload_bytes, 12345u);
}

TEST(PayloadReplyTest, RefusesShortBodiesAndLengthsOverTheCap) {
  EXPECT_TRUE(absl::IsDataLoss(ParsePayloadReply("1234567", 100).status()));
  std::string body;
  PutFixed64(&body, ~uint64_t{0});
  absl::Status huge = ParsePayloadReply(body, kDefaultMaxPayload).status();
  EXPECT_TRUE(absl::IsDataLoss(huge)) << huge;
  EXPECT_NE(huge.message().find("over the cap"), std::string::npos) << huge;
  body.clear();
  PutFixed64(&body, 101);
  EXPECT_TRUE(absl::IsDataLoss(ParsePayloadReply(body, 100).status()));
  body.clear();
  PutFixed64(&body, 100);
  EXPECT_TRUE(ParsePayloadReply(body, 100).ok());
}

TEST(FrameReaderTest, TakeBufferedHandsOutBytesAfterTheLastFrame) {
  std::string stream;
  AppendFrame(&stream, "ab");
  stream += "rawbytes";
  FrameReader reader(100);
  reader.Append(stream.data(), stream.size());
  std::string payload;
  ASSERT_EQ(reader.Next(&payload), FrameReader::Result::kFrame);
  char buf[5];
  EXPECT_EQ(reader.TakeBuffered(buf, 5), 5u);
  EXPECT_EQ(std::string(buf, 5), "rawby");
  EXPECT_EQ(reader.TakeBuffered(buf, 5), 3u);
  EXPECT_EQ(reader.buffered(), 0u);
}

}  // namespace
}  // namespace cohort::rpc
