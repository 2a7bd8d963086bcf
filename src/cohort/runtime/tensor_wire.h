// The tensor data plane's wire format (tensor_data_service.h): what a
// producer writes in front of a tensor's bytes, and how a consumer checks it
// before it allocates anything. Pure functions over bytes, tested and fuzzed
// on their own (fuzz/tensor_wire_fuzzer.cc).
//
// Every request on the data plane is one frame: a u8 DataPlaneMethod, then
// the serialized request message.
//
// A RunGraph is a RunGraphRequest answered by an OK reply whose body is the
// serialized RunGraphResponse, or an error reply (EncodeErrorBody's body).
//
// A RecvTensor is a RecvTensorRequest answered by either
//  - a payload reply (rpc/frame.h) whose header is EncodeTensorHeader's and
//    whose payload is the tensor's bytes, straight from its buffer
//    (kRawBytes: numeric and bool dtypes), or a serialized TensorProto
//    (kTensorProto: strings and resource handles, which have no flat
//    representation); or
//  - an error reply whose body is EncodeErrorBody's: the message and the
//    status payloads, so codes, messages and typed details (derived errors,
//    "worker possibly restarted") arrive as the gRPC path delivers them.
//
// Header, little-endian: u8 encoding, u32 dtype, u8 is_dead, i64
// send_start_micros, u32 rank, rank x i64 dims.
//
// Thread safety: pure functions.
#ifndef COHORT_RUNTIME_TENSOR_WIRE_H_
#define COHORT_RUNTIME_TENSOR_WIRE_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "cohort/graph/tensor.h"

namespace cohort::runtime {

// Ranks above this are refused: TensorFlow's TensorShape limit, so that a
// tensor TensorFlow can make can cross tasks (the header is 8 bytes a
// dimension, 2 KiB at most).
inline constexpr uint32_t kMaxWireRank = 254;

// kRecvTensorSameHost: a RecvTensor from a consumer that can copy out of
// the producer's memory (process_vm_readv, one copy instead of TCP's two):
// the body is a u64 SameHostKey() then the RecvTensorRequest. A producer
// whose own key is equal (same boot, pid and network namespaces, user) may
// answer a large raw tensor with a kSameHostRef reply instead of its bytes,
// and then holds the tensor for that connection until the connection's
// next request or its end; kRelease (empty body, one-way: never answered), sent
// as soon as the consumer copied the bytes, ends the hold at once (a variable's
// buffer still lent when its update runs would be copied first:
// copy-on-write). kFetchHeld (empty body), sent next on that connection, asks
// for the held tensor's bytes after all (the consumer could not read them:
// a sandbox refusing process_vm_readv): an ordinary kRawBytes payload
// reply, or FailedPrecondition when nothing is held.
enum class DataPlaneMethod : uint8_t {
  kRecvTensor = 1,
  kRunGraph = 2,
  kRecvTensorSameHost = 3,
  kFetchHeld = 4,
  kRelease = 5,
};

// The request frame for `method` with the serialized `request`.
std::string EncodeDataPlaneRequest(DataPlaneMethod method,
                                   absl::string_view request);
// Splits a request frame; *request is a view into `frame`.
// InvalidArgument for an empty frame or an unknown method.
absl::StatusOr<DataPlaneMethod> DecodeDataPlaneRequest(
    absl::string_view frame, absl::string_view* request);

// kSameHostRef: dtype and shape as kRawBytes, and the payload is a
// SameHostRef (kSameHostRefBytes) saying where the bytes are.
enum class TensorEncoding : uint8_t {
  kRawBytes = 0,
  kTensorProto = 1,
  kSameHostRef = 2,
};

struct TensorHeader {
  TensorEncoding encoding = TensorEncoding::kRawBytes;
  DataType dtype = DT_INVALID;  // kRawBytes only
  TensorShape shape;            // kRawBytes only
  bool is_dead = false;
  int64_t send_start_micros = 0;
};

// The header for `tensor`; *encoding tells whether the payload is the
// tensor's own bytes (kRawBytes) or a TensorProto the caller serializes.
std::string EncodeTensorHeader(const Tensor& tensor, bool is_dead,
                               int64_t send_start_micros,
                               TensorEncoding* encoding);

// Turns a kRawBytes header into the kSameHostRef header of the same
// tensor.
void MarkSameHostRef(std::string* header);

// Checks a header against the payload length the frame announced, before
// anything is allocated. Errors name `peer`:
//  - DataLoss: truncated or trailing header bytes, an unknown encoding, an
//    unknown or non-POD dtype for kRawBytes, rank over kMaxWireRank, a
//    negative dimension, an element count or byte count that overflows, or
//    a byte count that is not shape x dtype size;
//  - ResourceExhausted: a payload over `max_bytes`.
// For kSameHostRef the payload must be kSameHostRefBytes long and the
// shape's byte count (what the consumer allocates) at most `max_bytes`.
absl::StatusOr<TensorHeader> DecodeTensorHeader(absl::string_view header,
                                                uint64_t payload_bytes,
                                                uint64_t max_bytes,
                                                absl::string_view peer);

// This process's same-host key: equal for two processes exactly when they
// run on the same boot of one kernel, in one pid namespace (so a pid means
// the same process to both) and one network namespace (a namespace with
// its own link is another host, whose tensors cross that link), as the
// same user (whom process_vm_readv allows). 0 when it cannot be known (no
// /proc): never same-host then.
uint64_t SameHostKey();

// kRecvTensorSameHost's body, and back (InvalidArgument when shorter than
// the key).
std::string EncodeSameHostRecvRequest(uint64_t key, absl::string_view request);
absl::Status DecodeSameHostRecvRequest(absl::string_view body, uint64_t* key,
                                       absl::string_view* request);

// Where a kSameHostRef tensor's bytes are: process `pid`, `bytes` bytes from
// `address`. Little-endian i32 pid, u64 address, u64 bytes.
struct SameHostRef {
  int32_t pid = 0;
  uint64_t address = 0;
  uint64_t bytes = 0;
};
inline constexpr size_t kSameHostRefBytes = 4 + 8 + 8;
std::string EncodeSameHostRef(const SameHostRef& ref);
// DataLoss naming `peer` unless `payload` is kSameHostRefBytes long, the
// pid positive and `bytes` exactly `expected_bytes` (what the header's
// shape says, and what the consumer allocated).
absl::StatusOr<SameHostRef> DecodeSameHostRef(absl::string_view payload,
                                              uint64_t expected_bytes,
                                              absl::string_view peer);

// The body of an error reply for `status` (not OK), and back: the code
// comes from the reply frame. A body that does not parse becomes the
// message as is, without payloads.
std::string EncodeErrorBody(const absl::Status& status);
absl::Status DecodeErrorBody(absl::StatusCode code, absl::string_view body);

}  // namespace cohort::runtime

#endif  // COHORT_RUNTIME_TENSOR_WIRE_H_
