#include "cohort/rpc/frame.h"

#include <sys/random.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "cohort/base/logging.h"
#include "cohort/rpc/coding.h"
#include "openssl/crypto.h"
#include "openssl/evp.h"
#include "openssl/hmac.h"

namespace cohort::rpc {
namespace {

// Binds a proof to this protocol, so an HMAC of the same token computed for
// another purpose is never a valid hello.
constexpr absl::string_view kHelloLabel = "cohort-framed/2 hello ";
constexpr absl::string_view kServerLabel = "cohort-framed/2 server ";

std::string Hmac(absl::string_view token, absl::string_view message) {
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int mac_len = 0;
  const unsigned char* ok =
      HMAC(EVP_sha256(), token.data(), static_cast<int>(token.size()),
           reinterpret_cast<const unsigned char*>(message.data()),
           message.size(), mac, &mac_len);
  COHORT_CHECK(ok != nullptr && mac_len == kProofBytes) << "HMAC-SHA256 failed";
  return std::string(reinterpret_cast<const char*>(mac), mac_len);
}

}  // namespace

void AppendFrame(std::string* out, absl::string_view payload) {
  PutFixed32(out, static_cast<uint32_t>(payload.size()));
  out->append(payload.data(), payload.size());
}

void AppendReplyFrame(std::string* out, absl::StatusCode code,
                      absl::string_view body) {
  PutFixed32(out, static_cast<uint32_t>(body.size() + 1));
  out->push_back(static_cast<char>(code));
  out->append(body.data(), body.size());
}

void AppendPayloadReplyFrame(std::string* out, absl::string_view header,
                             uint64_t payload_bytes) {
  PutFixed32(out, static_cast<uint32_t>(1 + 8 + header.size()));
  out->push_back(static_cast<char>(absl::StatusCode::kOk));
  PutFixed64(out, payload_bytes);
  out->append(header.data(), header.size());
}

absl::StatusOr<PayloadReply> ParsePayloadReply(absl::string_view body,
                                               uint64_t max_payload) {
  if (body.size() < 8) {
    return absl::DataLossError(absl::StrCat(
        "malformed payload reply (", body.size(),
        " bytes, fewer than its 8-byte length field): the peer does not "
        "speak this protocol or the stream is corrupt"));
  }
  PayloadReply reply;
  reply.payload_bytes = DecodeFixed64(body.data());
  if (reply.payload_bytes > max_payload) {
    return absl::DataLossError(
        absl::StrCat("payload reply announces ", reply.payload_bytes,
                     " bytes, over the cap of ", max_payload, " bytes"));
  }
  reply.header.assign(body.data() + 8, body.size() - 8);
  return reply;
}

void FrameReader::Append(const char* data, size_t size) {
  if (buffer_.size() < end_ + size) {
    buffer_.resize(std::max(end_ + size, 2 * buffer_.size()));
  }
  std::memcpy(&buffer_[end_], data, size);
  end_ += size;
}

size_t FrameReader::TakeBuffered(char* dst, size_t size) {
  const size_t n = std::min(size, end_ - offset_);
  std::memcpy(dst, buffer_.data() + offset_, n);
  offset_ += n;
  if (offset_ == end_) offset_ = end_ = 0;
  return n;
}

absl::Span<char> FrameReader::ReadSpace(size_t max_read) {
  into_large_ = large_active_ && large_filled_ < large_size_;
  if (into_large_) {
    // The frame's string grows with what arrived (doubling, from 1 MiB),
    // never by what the header announced alone: a peer that sends a header
    // and stalls holds no more memory than it sent.
    if (large_filled_ == large_.size()) {
      large_.resize(
          std::min(large_size_, std::max(2 * large_.size(), size_t{1} << 20)));
    }
    const size_t room = large_.size() - large_filled_;
    return absl::Span<char>(&large_[large_filled_], std::min(room, max_read));
  }
  // A complete large frame waits for Next(); what follows it is staged.
  staged_ = end_;
  // Grows (zero-filling) only when the room is not there already.
  if (buffer_.size() < end_ + max_read) buffer_.resize(end_ + max_read);
  return absl::Span<char>(&buffer_[staged_], max_read);
}

void FrameReader::Commit(size_t n) {
  if (into_large_) {
    large_filled_ += n;
    return;
  }
  end_ = staged_ + n;
  if (!large_active_) MaybeStartLarge();
}

size_t FrameReader::partial_frame_size() const {
  if (large_active_) return large_size_;
  if (end_ - offset_ < 4) return 0;
  return DecodeFixed32(buffer_.data() + offset_);
}

void FrameReader::MaybeStartLarge() {
  const size_t have = end_ - offset_;
  if (have < 4) return;
  const size_t size = DecodeFixed32(buffer_.data() + offset_);
  // Over the cap: Next() refuses it. Complete: Next() hands it out.
  if (size > max_frame_ || size < kDirectFrameBytes || have >= 4 + size) {
    return;
  }
  large_size_ = size;
  large_filled_ = have - 4;
  large_.resize(large_filled_);
  std::memcpy(&large_[0], buffer_.data() + offset_ + 4, large_filled_);
  large_active_ = true;
  offset_ = end_ = 0;
}

FrameReader::Result FrameReader::Next(std::string* payload,
                                      uint64_t* announced) {
  if (large_active_) {
    if (large_filled_ < large_size_) return Result::kNeedMore;
    *payload = std::move(large_);
    large_ = std::string();
    large_size_ = 0;
    large_filled_ = 0;
    large_active_ = false;
    // Bytes staged behind it may start the next large frame.
    MaybeStartLarge();
    return Result::kFrame;
  }
  if (buffered() < 4) return Result::kNeedMore;
  // size_t arithmetic: `4 + size` in 32 bits wraps for sizes near 2^32.
  const size_t size = DecodeFixed32(buffer_.data() + offset_);
  if (size > max_frame_) {
    if (announced != nullptr) *announced = size;
    return Result::kTooLarge;
  }
  if (buffered() < 4 + size) return Result::kNeedMore;
  payload->assign(buffer_, offset_ + 4, size);
  offset_ += 4 + size;
  // Compact once the consumed prefix dominates: amortised O(1) per byte,
  // instead of moving the tail after every frame.
  if (offset_ == end_) {
    offset_ = end_ = 0;
  } else if (offset_ > end_ / 2) {
    std::memmove(&buffer_[0], buffer_.data() + offset_, end_ - offset_);
    end_ -= offset_;
    offset_ = 0;
  }
  return Result::kFrame;
}

std::string GreetingPayload(absl::string_view nonce) {
  return absl::StrCat(kGreetingMagic, nonce);
}

absl::StatusOr<std::string> ParseGreeting(absl::string_view payload) {
  if (payload.size() != kGreetingMagic.size() + kNonceBytes ||
      payload.substr(0, kGreetingMagic.size()) != kGreetingMagic) {
    return absl::InvalidArgumentError(
        "the server's first frame is not a cohort framed-transport greeting "
        "(is the address that of another service?)");
  }
  return std::string(payload.substr(kGreetingMagic.size()));
}

// The server's identity, length-prefixed so that no identity and nonce can
// be read as another pair.
std::string BoundIdentity(absl::string_view identity) {
  std::string out;
  PutFixed32(&out, static_cast<uint32_t>(identity.size()));
  out.append(identity.data(), identity.size());
  return out;
}

std::string HelloProof(absl::string_view token, absl::string_view nonce,
                       absl::string_view identity) {
  return Hmac(token, absl::StrCat(kHelloLabel, BoundIdentity(identity), nonce));
}

bool VerifyHello(absl::string_view token, absl::string_view nonce,
                 absl::string_view proof, absl::string_view identity) {
  if (token.empty()) return true;
  if (proof.size() != kProofBytes &&
      proof.size() != kProofBytes + kNonceBytes) {
    return false;
  }
  const std::string expected = HelloProof(token, nonce, identity);
  return CRYPTO_memcmp(expected.data(), proof.data(), kProofBytes) == 0;
}

std::string HelloPayload(absl::string_view token, absl::string_view nonce,
                         absl::string_view client_nonce,
                         absl::string_view identity) {
  return absl::StrCat(HelloProof(token, nonce, identity), client_nonce);
}

absl::string_view HelloClientNonce(absl::string_view hello) {
  return hello.size() == kProofBytes + kNonceBytes ? hello.substr(kProofBytes)
                                                   : absl::string_view();
}

std::string ServerProof(absl::string_view token, absl::string_view nonce,
                        absl::string_view client_nonce,
                        absl::string_view identity) {
  return Hmac(token, absl::StrCat(kServerLabel, BoundIdentity(identity),
                                  client_nonce, nonce));
}

bool VerifyServerProof(absl::string_view token, absl::string_view nonce,
                       absl::string_view client_nonce, absl::string_view proof,
                       absl::string_view identity) {
  if (proof.size() != kProofBytes) return false;
  const std::string expected =
      ServerProof(token, nonce, client_nonce, identity);
  return CRYPTO_memcmp(expected.data(), proof.data(), kProofBytes) == 0;
}

std::string RandomNonce() {
  std::string nonce(kNonceBytes, '\0');
  size_t done = 0;
  while (done < nonce.size()) {
    const ssize_t n = getrandom(nonce.data() + done, nonce.size() - done, 0);
    if (n < 0 && errno == EINTR) continue;
    COHORT_CHECK(n > 0) << "getrandom failed: " << strerror(errno);
    done += static_cast<size_t>(n);
  }
  return nonce;
}

namespace {

bool IsStatusCode(int code) {
  return code >= 0 &&
         code <= static_cast<int>(absl::StatusCode::kUnauthenticated);
}

}  // namespace

void AppendTaggedRequestFrame(std::string* out, uint32_t tag,
                              absl::string_view head, absl::string_view body) {
  PutFixed32(out, static_cast<uint32_t>(4 + head.size() + body.size()));
  PutFixed32(out, tag);
  out->append(head.data(), head.size());
  out->append(body.data(), body.size());
}

void AppendTaggedReplyFrame(std::string* out, uint32_t tag,
                            absl::StatusCode code, absl::string_view body) {
  PutFixed32(out, static_cast<uint32_t>(1 + 4 + body.size()));
  out->push_back(static_cast<char>(code));
  PutFixed32(out, tag);
  out->append(body.data(), body.size());
}

absl::StatusOr<TaggedReply> ParseTaggedReply(std::string payload) {
  const int code = payload.empty() ? -1 : static_cast<uint8_t>(payload[0]);
  if (payload.size() < 5 || !IsStatusCode(code)) {
    return absl::DataLossError(absl::StrCat(
        "malformed tagged reply frame (", payload.size(),
        " bytes, status code byte ", code,
        "): the peer is not a cohort framed server or the stream is corrupt"));
  }
  TaggedReply reply;
  reply.code = static_cast<absl::StatusCode>(code);
  reply.tag = DecodeFixed32(payload.data() + 1);
  payload.erase(0, 5);
  reply.body = std::move(payload);
  return reply;
}

absl::StatusOr<std::pair<uint32_t, absl::string_view>> SplitTaggedRequest(
    absl::string_view payload) {
  if (payload.size() < 4) {
    return absl::InvalidArgumentError(
        absl::StrCat("malformed tagged request (", payload.size(),
                     " bytes, shorter than its 4-byte tag)"));
  }
  return std::make_pair(DecodeFixed32(payload.data()), payload.substr(4));
}

absl::StatusOr<std::string> ParseReply(std::string payload) {
  const int code = payload.empty() ? -1 : static_cast<uint8_t>(payload[0]);
  if (!IsStatusCode(code)) {
    return absl::DataLossError(
        absl::StrCat("malformed reply frame (", payload.size(),
                     " bytes, status code byte ", code,
                     "): the peer is not a cohort "
                     "framed server or the stream is corrupt"));
  }
  payload.erase(0, 1);
  if (code == 0) return payload;
  return absl::Status(static_cast<absl::StatusCode>(code), payload);
}

}  // namespace cohort::rpc
