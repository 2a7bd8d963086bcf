// Fuzzes the wire format of the framed transport (src/cohort/rpc/frame.h),
// which every framed peer feeds with bytes straight from a socket.
//
// Input: byte 0 picks the FrameReader's cap, byte 1 seeds the sizes of the
// chunks the rest of the input is fed in (as a socket delivers it) and, by
// its lowest bit, whether they are appended or read into the reader's own
// space (ReadSpace/Commit), and the rest is the byte stream. Checked
// against a reference model of the framing:
//   - every frame the reader returns is exactly the announced bytes at the
//     position the model expects, and buffered() counts the unread bytes;
//   - a frame announcing more than the cap is refused (kTooLarge, with the
//     announced length) before its payload is buffered;
//   - ParseGreeting / ParseReply / ParseTaggedReply / SplitTaggedRequest /
//     VerifyHello on every frame answer
//     consistently with the payload, never crash, and round-trip with
//     GreetingPayload / AppendFrame / AppendReplyFrame /
//     AppendTagged{Request,Reply}Frame / HelloProof.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "cohort/base/logging.h"
#include "cohort/rpc/frame.h"

namespace {

using cohort::rpc::FrameReader;

// Caps a reader runs with: the handshake caps, small ones (so the fuzzer
// reaches kTooLarge with short inputs), the default, and caps at and above
// what a u32 length can announce.
constexpr size_t kCaps[] = {
    0,
    1,
    3,
    4,
    16,
    cohort::rpc::kGreetingMagic.size() + cohort::rpc::kNonceBytes,
    cohort::rpc::kMaxHandshakeFrame,
    255,
    cohort::rpc::kMaxHandshakeReply,
    size_t{1} << 20,
    cohort::rpc::kDefaultMaxFrame,
    size_t{0xFFFFFFFB},
    size_t{0xFFFFFFFC},
    size_t{0xFFFFFFFF},
    std::numeric_limits<size_t>::max(),
    7};

uint32_t Le32(absl::string_view s, size_t pos) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) {
    v |= static_cast<uint32_t>(static_cast<uint8_t>(s[pos + i])) << (8 * i);
  }
  return v;
}

constexpr absl::string_view kToken = "fuzz-job-token";

// The answers of the pure parsers on one frame payload.
void CheckPayload(const std::string& payload, const std::string& nonce) {
  // Greeting.
  auto greeting = cohort::rpc::ParseGreeting(payload);
  if (greeting.ok()) {
    COHORT_CHECK(greeting->size() == cohort::rpc::kNonceBytes);
    COHORT_CHECK(cohort::rpc::GreetingPayload(*greeting) == payload);
  } else {
    COHORT_CHECK(greeting.status().code() == absl::StatusCode::kInvalidArgument)
        << greeting.status();
  }

  // Reply.
  auto reply = cohort::rpc::ParseReply(payload);
  const int code = payload.empty() ? -1 : static_cast<uint8_t>(payload[0]);
  if (code < 0 || code > static_cast<int>(absl::StatusCode::kUnauthenticated)) {
    COHORT_CHECK(!reply.ok() &&
                 reply.status().code() == absl::StatusCode::kDataLoss)
        << "reply code byte " << code;
  } else if (code == 0) {
    COHORT_CHECK(reply.ok() && *reply == payload.substr(1));
  } else {
    COHORT_CHECK(!reply.ok() && static_cast<int>(reply.status().code()) == code)
        << reply.status();
    COHORT_CHECK(reply.status().message() == payload.substr(1));
    // Written back as a reply frame, it reads back the same.
    std::string frame;
    cohort::rpc::AppendReplyFrame(&frame, reply.status().code(),
                                  reply.status().message());
    COHORT_CHECK(frame.substr(4) == payload);
  }

  // Tagged reply (FramedChannel): code byte, tag, body; round-trips.
  auto tagged = cohort::rpc::ParseTaggedReply(payload);
  if (payload.size() < 5 || code < 0 ||
      code > static_cast<int>(absl::StatusCode::kUnauthenticated)) {
    COHORT_CHECK(!tagged.ok() &&
                 tagged.status().code() == absl::StatusCode::kDataLoss);
  } else {
    COHORT_CHECK(tagged.ok()) << tagged.status();
    COHORT_CHECK(static_cast<int>(tagged->code) == code);
    COHORT_CHECK(tagged->body == payload.substr(5));
    std::string frame;
    cohort::rpc::AppendTaggedReplyFrame(&frame, tagged->tag, tagged->code,
                                        tagged->body);
    COHORT_CHECK(frame.substr(4) == payload);
  }
  // Tagged request (the server's side): tag and the rest; round-trips.
  auto request = cohort::rpc::SplitTaggedRequest(payload);
  if (payload.size() < 4) {
    COHORT_CHECK(!request.ok() &&
                 request.status().code() == absl::StatusCode::kInvalidArgument);
  } else {
    COHORT_CHECK(request.ok() && request->second == payload.substr(4));
    std::string frame;
    cohort::rpc::AppendTaggedRequestFrame(&frame, request->first, "",
                                          request->second);
    COHORT_CHECK(frame.substr(4) == payload);
  }

  // Hello: only the proof for this nonce passes, alone or followed by a
  // client nonce; no token accepts anything.
  const std::string proof = cohort::rpc::HelloProof(kToken, nonce);
  const bool hello_sized =
      payload.size() == cohort::rpc::kProofBytes ||
      payload.size() == cohort::rpc::kProofBytes + cohort::rpc::kNonceBytes;
  COHORT_CHECK(cohort::rpc::VerifyHello(kToken, nonce, payload) ==
               (hello_sized && payload.substr(0, proof.size()) == proof));
  // The server's proof answers only this client nonce.
  const std::string client_nonce(cohort::rpc::HelloClientNonce(payload));
  COHORT_CHECK(cohort::rpc::VerifyServerProof(
      kToken, nonce, client_nonce,
      cohort::rpc::ServerProof(kToken, nonce, client_nonce)));
  COHORT_CHECK(
      !cohort::rpc::VerifyServerProof(kToken, nonce, client_nonce, payload) ||
      payload == cohort::rpc::ServerProof(kToken, nonce, client_nonce));
  COHORT_CHECK(cohort::rpc::VerifyHello("", nonce, payload));
  COHORT_CHECK(cohort::rpc::VerifyHello(
      payload.empty() ? "x" : payload, nonce,
      cohort::rpc::HelloProof(payload.empty() ? "x" : payload, nonce)));

  // A frame written by AppendFrame reads back whole under a cap that fits.
  std::string framed;
  cohort::rpc::AppendFrame(&framed, payload);
  FrameReader again(payload.size());
  again.Append(framed.data(), framed.size());
  std::string back;
  COHORT_CHECK(again.Next(&back) == FrameReader::Result::kFrame &&
               back == payload);
  COHORT_CHECK(again.buffered() == 0);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const size_t cap = kCaps[data[0] % (sizeof(kCaps) / sizeof(kCaps[0]))];
  uint32_t rng = data[1] * 2654435761u + 1;
  const absl::string_view stream(reinterpret_cast<const char*>(data) + 2,
                                 size - 2);

  FrameReader reader(cap);
  // Bit 0 of byte 1: feed the reader as FramedServer does (ReadSpace and
  // Commit) instead of with Append.
  const bool read_space = (data[1] & 1) != 0;
  // The nonce a client would prove: from the last greeting seen, else fixed.
  std::string nonce(cohort::rpc::kNonceBytes, 'n');
  size_t fed = 0;       // bytes appended to the reader
  size_t expected = 0;  // model: start of the next frame in `stream`
  while (fed < stream.size()) {
    rng = rng * 1103515245u + 12345u;
    size_t chunk = std::min<size_t>(stream.size() - fed, 1 + (rng >> 16) % 67);
    if (read_space) {
      // As a server reads a socket: into the reader's own space, offered
      // larger than what arrives, then committed.
      const absl::Span<char> space = reader.ReadSpace(chunk + (rng >> 8) % 64);
      chunk = std::min(chunk, space.size());
      std::copy_n(stream.data() + fed, chunk, space.data());
      reader.Commit(chunk);
    } else {
      reader.Append(stream.data() + fed, chunk);
    }
    fed += chunk;
    while (true) {
      COHORT_CHECK(reader.buffered() == fed - expected)
          << "buffered " << reader.buffered() << ", model " << fed - expected;
      std::string payload;
      uint64_t announced = 0;
      const FrameReader::Result r = reader.Next(&payload, &announced);
      if (fed - expected < 4) {
        COHORT_CHECK(r == FrameReader::Result::kNeedMore);
        break;
      }
      const uint32_t length = Le32(stream, expected);
      if (length > cap) {
        COHORT_CHECK(r == FrameReader::Result::kTooLarge && announced == length)
            << "frame of " << length << " bytes over cap " << cap;
        return 0;  // the connection is closed here
      }
      if (fed - expected - 4 < length) {
        COHORT_CHECK(r == FrameReader::Result::kNeedMore)
            << "frame of " << length << " bytes returned with only "
            << fed - expected - 4 << " bytes of it received";
        break;
      }
      COHORT_CHECK(r == FrameReader::Result::kFrame);
      COHORT_CHECK(payload.size() == length &&
                   payload == stream.substr(expected + 4, length))
          << "frame at " << expected << " of " << length << " bytes came back"
          << " as " << payload.size() << " bytes";
      expected += 4 + size_t{length};
      CheckPayload(payload, nonce);
      auto greeting = cohort::rpc::ParseGreeting(payload);
      if (greeting.ok()) nonce = *greeting;
    }
  }
  return 0;
}
