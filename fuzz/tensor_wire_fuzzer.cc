// Fuzzes what a tensor data plane consumer reads from a producer's socket
// before it allocates anything (src/cohort/runtime/tensor_wire.h and the
// payload-reply framing of src/cohort/rpc/frame.h).
//
// Input: byte 0 picks the tensor cap, the rest is an OK reply body as a
// producer would send it (u64 payload length + tensor header). Checked:
//   - ParsePayloadReply refuses any length over the cap, else splits;
//   - DecodeTensorHeader never crashes, and when it accepts, the header is
//     self-consistent: raw bytes are exactly elements x dtype size and
//     within the cap, a same-host reference is kSameHostRefBytes long and
//     its shape's bytes within the cap (DecodeSameHostRef accepts only a
//     reference to exactly those bytes), rank within kMaxWireRank;
//   - DecodeErrorBody on the same bytes never crashes;
//   - DecodeDataPlaneRequest on the same bytes accepts only a known method
//     byte and hands back exactly the rest.
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "cohort/base/logging.h"
#include "cohort/graph/types.h"
#include "cohort/rpc/frame.h"
#include "cohort/runtime/tensor_wire.h"

namespace {

constexpr uint64_t kCaps[] = {
    0, 1, 64, 4096, uint64_t{1} << 31, (uint64_t{1} << 31) - 1};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace cohort::runtime;  // NOLINT: fuzz harness
  if (size < 1) return 0;
  const uint64_t cap = kCaps[data[0] % (sizeof(kCaps) / sizeof(kCaps[0]))];
  const absl::string_view body(reinterpret_cast<const char*>(data + 1),
                               size - 1);
  (void)DecodeErrorBody(absl::StatusCode::kAborted, body);
  // The same bytes as a request frame: a known method and the rest, or an
  // error; the request is always the frame minus the method byte.
  absl::string_view request;
  auto method = DecodeDataPlaneRequest(body, &request);
  if (method.ok()) COHORT_CHECK(request.size() + 1 == body.size());
  auto reply = cohort::rpc::ParsePayloadReply(body, cap);
  if (!reply.ok()) return 0;
  COHORT_CHECK(reply->payload_bytes <= cap);
  auto header =
      DecodeTensorHeader(reply->header, reply->payload_bytes, cap, "fuzz peer");
  if (!header.ok()) return 0;
  if (header->encoding == TensorEncoding::kTensorProto) return 0;
  COHORT_CHECK(header->shape.dims() <= static_cast<int>(kMaxWireRank));
  const uint64_t bytes =
      static_cast<uint64_t>(header->shape.num_elements()) *
      static_cast<uint64_t>(cohort::DataTypeSize(header->dtype));
  if (header->encoding == TensorEncoding::kSameHostRef) {
    // A reference: 20 bytes on the wire, and the shape it sizes the
    // consumer's buffer by within the cap.
    COHORT_CHECK(reply->payload_bytes == kSameHostRefBytes);
    COHORT_CHECK(bytes <= cap) << bytes;
    // The reference itself (the body's last bytes stand for it): accepted
    // only when it points at exactly the shape's bytes.
    if (body.size() >= kSameHostRefBytes) {
      auto ref = DecodeSameHostRef(body.substr(body.size() - kSameHostRefBytes),
                                   bytes, "fuzz peer");
      if (ref.ok()) COHORT_CHECK(ref->bytes == bytes && ref->pid > 0);
    }
  } else {
    COHORT_CHECK(bytes == reply->payload_bytes) << bytes;
  }
  for (int i = 0; i < header->shape.dims(); ++i) {
    COHORT_CHECK(header->shape.dim_size(i) >= 0);
  }
  return 0;
}
