// The wire format of cohort's framed transport (FramedServer/FramedClient):
// pure functions over bytes, tested and fuzzed on their own.
//
// Every frame is a u32 little-endian length followed by that many bytes.
// A connection runs:
//   server -> client  greeting: kGreetingMagic + 32-byte random nonce
//   client -> server  hello:    HMAC-SHA256(job token, kHelloLabel +
//                               server identity + nonce)
//                               + the client's own 32-byte random nonce
//   server -> client  reply:    OK with HMAC-SHA256(job token, kServerLabel +
//                               server identity + client nonce + nonce), or
//                               Unauthenticated and the server closes
// The server's proof lets the client refuse an impostor that bound the port
// before the real server: a client that checks it never sends a request, and
// so nothing it learned from the job, to a server without the token. (A
// hello without the client nonce gets an empty OK, for peers that do not
// check the server.)
//   then any number of request frames (client -> server), each answered by
//   one reply frame (server -> client), in order.
// A reply frame's payload is a u8 absl::StatusCode followed by the body: the
// answer when the code is OK, the error message otherwise.
//
// Payload replies (bulk data such as tensors, written zero-copy): an OK
// reply frame whose body is a u64 payload length followed by a small
// application header, then exactly that many raw bytes outside any frame.
// Only a request the handler's protocol answers this way gets one; the
// client knows from its own request which kind to expect. The payload is
// capped separately from frames (kDefaultMaxPayload), and the client checks
// the announced length against its cap before it allocates anything.
//
// Tagged calls (FramedChannel): many calls in flight on one connection. A
// tagged request's payload starts with a u32 tag the client chose; the
// reply frame to it carries the same tag first in its body (after the code
// byte), and replies may come in any order. Which of the two a connection
// speaks is the application protocol's choice, fixed per endpoint.
//
// The token never crosses the wire, and a proof is good for one nonce only,
// so neither a local sniffer nor a replay of a captured hello gets in.
//
// Thread safety: FrameReader is thread-compatible; the rest is stateless.
#ifndef COHORT_RPC_FRAME_H_
#define COHORT_RPC_FRAME_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace cohort::rpc {

inline constexpr absl::string_view kGreetingMagic = "cohort-framed/1";
inline constexpr size_t kNonceBytes = 32;
inline constexpr size_t kProofBytes = 32;
// The largest frame a client may send before it has authenticated.
inline constexpr size_t kMaxHandshakeFrame = 64;
// The largest frame a client accepts during the handshake (a greeting or a
// refusal with its message).
inline constexpr size_t kMaxHandshakeReply = 1024;
// Default cap on any frame after the handshake, both directions.
inline constexpr size_t kDefaultMaxFrame = size_t{64} << 20;
// Default cap on the raw payload of a payload reply: 2 GiB - 1, the largest
// tensor TensorFlow's wire accepts.
inline constexpr uint64_t kDefaultMaxPayload = (uint64_t{1} << 31) - 1;

// Appends one frame holding `payload`.
void AppendFrame(std::string* out, absl::string_view payload);
// Appends one reply frame: code byte + body.
void AppendReplyFrame(std::string* out, absl::StatusCode code,
                      absl::string_view body);

// Appends the frame that precedes a payload of `payload_bytes`: an OK reply
// whose body is the payload length and `header`.
void AppendPayloadReplyFrame(std::string* out, absl::string_view header,
                             uint64_t payload_bytes);

// The body of an OK reply frame to a payload request, split.
struct PayloadReply {
  std::string header;          // the application's header
  uint64_t payload_bytes = 0;  // raw bytes that follow the frame
};
// DataLoss when the body is shorter than the length field or announces more
// than `max_payload` bytes (the stream must then be closed: the payload
// cannot be skipped safely). Nothing is allocated by the announced size.
absl::StatusOr<PayloadReply> ParsePayloadReply(absl::string_view body,
                                               uint64_t max_payload);

// Splits a byte stream into frames, refusing any frame longer than
// `max_frame` before buffering it.
class FrameReader {
 public:
  explicit FrameReader(size_t max_frame) : max_frame_(max_frame) {}

  void set_max_frame(size_t max_frame) { max_frame_ = max_frame; }
  void Append(const char* data, size_t size);
  // The length the partial frame at the front announced (its header has
  // arrived), or 0 when no header is buffered.
  size_t partial_frame_size() const;
  // Bytes received but not yet returned as frames.
  size_t buffered() const {
    return end_ - offset_ + (large_active_ ? 4 + large_filled_ : 0);
  }

  // Reading without a staging copy, for servers that receive large frames:
  // ReadSpace returns where the next read() should put at most `max_read`
  // bytes, and Commit(n) takes the n bytes it read (0 after a failed
  // read). Once the header of a frame of kDirectFrameBytes or more has
  // arrived (and passed the cap), its bytes go straight into the string
  // Next() will return, so a large frame is copied once, by the kernel.
  // Never mix with Append() on one reader.
  static constexpr size_t kDirectFrameBytes = 64 << 10;
  absl::Span<char> ReadSpace(size_t max_read);
  void Commit(size_t n);

  enum class Result { kNeedMore, kFrame, kTooLarge };
  // kFrame: the next frame's payload is in *payload. kTooLarge: the next
  // frame announces more than max_frame bytes (its length is in
  // *announced); the stream cannot be resynchronised and must be closed.
  Result Next(std::string* payload, uint64_t* announced = nullptr);
  // Moves up to `size` buffered bytes (those after the last frame, e.g. the
  // start of a payload read together with its frame) to `dst`; returns how
  // many.
  size_t TakeBuffered(char* dst, size_t size);

 private:
  // After a Commit: moves a started large frame out of the staging buffer.
  void MaybeStartLarge();

  size_t max_frame_;
  // Received bytes are buffer_[offset_, end_). The string keeps its size
  // (capacity for the next reads) so that ReadSpace does not zero-fill
  // 64 KiB for every small read.
  std::string buffer_;
  size_t offset_ = 0;        // start of the unread bytes in buffer_
  size_t end_ = 0;           // end of the received bytes in buffer_
  size_t staged_ = 0;        // end_ before the last ReadSpace
  bool into_large_ = false;  // the last ReadSpace pointed into large_
  // A large frame being received into its own string (its header consumed).
  bool large_active_ = false;
  std::string large_;      // grows as the frame arrives, up to large_size_
  size_t large_size_ = 0;  // the frame's announced (capped) size
  size_t large_filled_ = 0;
};

// The greeting payload for `nonce` (kNonceBytes).
std::string GreetingPayload(absl::string_view nonce);
// The nonce of a greeting. InvalidArgument when it is not one (wrong magic
// or length: the peer is not a cohort framed server).
absl::StatusOr<std::string> ParseGreeting(absl::string_view payload);

// `identity` in the proofs below is the server's name as the client means
// it ("tensor data plane of /job:ps/replica:0/task:0"), bound into both
// proofs: a process that binds a dead server's port cannot relay a client's
// handshake to another live server of the job, since that one has another
// identity and refuses the proof (and the client refuses its answer).

// kProofBytes of HMAC-SHA256(token, kHelloLabel + identity + nonce).
std::string HelloProof(absl::string_view token, absl::string_view nonce,
                       absl::string_view identity = {});
// Constant-time check of a client's hello. An empty `token` accepts anything
// (a server explicitly started without authentication).
bool VerifyHello(absl::string_view token, absl::string_view nonce,
                 absl::string_view proof, absl::string_view identity = {});
// The hello a server-checking client sends: HelloProof + `client_nonce`.
std::string HelloPayload(absl::string_view token, absl::string_view nonce,
                         absl::string_view client_nonce,
                         absl::string_view identity = {});
// The client nonce of a hello; "" for a hello of the proof alone.
absl::string_view HelloClientNonce(absl::string_view hello);
// The server's proof: kProofBytes of HMAC-SHA256(token, kServerLabel +
// identity + client_nonce + nonce).
std::string ServerProof(absl::string_view token, absl::string_view nonce,
                        absl::string_view client_nonce,
                        absl::string_view identity = {});
bool VerifyServerProof(absl::string_view token, absl::string_view nonce,
                       absl::string_view client_nonce, absl::string_view proof,
                       absl::string_view identity = {});

// kNonceBytes from the kernel's CSPRNG.
std::string RandomNonce();

// Tagged calls (see the top): appends a request frame of `tag` + `head` +
// `body`, and a reply frame of `code` + `tag` + `body`.
void AppendTaggedRequestFrame(std::string* out, uint32_t tag,
                              absl::string_view head, absl::string_view body);
void AppendTaggedReplyFrame(std::string* out, uint32_t tag,
                            absl::StatusCode code, absl::string_view body);
// A tagged reply frame's payload, split. The body is the answer when `code`
// is OK, the error message otherwise.
struct TaggedReply {
  uint32_t tag = 0;
  absl::StatusCode code = absl::StatusCode::kOk;
  std::string body;
};
// DataLoss when the payload is shorter than code + tag or its code byte is
// not an absl::StatusCode.
absl::StatusOr<TaggedReply> ParseTaggedReply(std::string payload);
// Splits a tagged request's payload into its tag and the rest
// (InvalidArgument when it is shorter than a tag).
absl::StatusOr<std::pair<uint32_t, absl::string_view>> SplitTaggedRequest(
    absl::string_view payload);

// A reply payload as a status: the body when the code is OK, else
// Status(code, body). DataLoss for an empty payload or a code byte that is
// not an absl::StatusCode.
absl::StatusOr<std::string> ParseReply(std::string payload);

}  // namespace cohort::rpc

#endif  // COHORT_RPC_FRAME_H_
