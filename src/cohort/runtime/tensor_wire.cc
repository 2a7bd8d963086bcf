#include "cohort/runtime/tensor_wire.h"

#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <vector>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "cohort/graph/types.h"
#include "cohort/rpc.pb.h"
#include "cohort/rpc/coding.h"

namespace cohort::runtime {
namespace {

// encoding + dtype + is_dead + send_start_micros + rank.
constexpr size_t kFixedHeaderBytes = 1 + 4 + 1 + 8 + 4;

absl::Status Malformed(absl::string_view peer, absl::string_view what) {
  return absl::DataLossError(
      absl::StrCat("malformed tensor header from ", peer, ": ", what,
                   "; closing the connection (is the peer a cohort server "
                   "of the same version?)"));
}

}  // namespace

std::string EncodeDataPlaneRequest(DataPlaneMethod method,
                                   absl::string_view request) {
  std::string out;
  out.reserve(1 + request.size());
  out.push_back(static_cast<char>(method));
  out.append(request.data(), request.size());
  return out;
}

absl::StatusOr<DataPlaneMethod> DecodeDataPlaneRequest(
    absl::string_view frame, absl::string_view* request) {
  if (frame.empty()) {
    return absl::InvalidArgumentError(
        "tensor data plane: an empty request frame (no method byte)");
  }
  const auto method = static_cast<DataPlaneMethod>(frame[0]);
  if (method != DataPlaneMethod::kRecvTensor &&
      method != DataPlaneMethod::kRunGraph &&
      method != DataPlaneMethod::kRecvTensorSameHost &&
      method != DataPlaneMethod::kFetchHeld &&
      method != DataPlaneMethod::kRelease) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor data plane: unknown method ",
                     static_cast<int>(static_cast<uint8_t>(frame[0])),
                     " (is the peer a cohort server of the same version?)"));
  }
  *request = frame.substr(1);
  return method;
}

std::string EncodeTensorHeader(const Tensor& tensor, bool is_dead,
                               int64_t send_start_micros,
                               TensorEncoding* encoding) {
  *encoding = DataTypeIsPod(tensor.dtype()) ? TensorEncoding::kRawBytes
                                            : TensorEncoding::kTensorProto;
  const bool raw = *encoding == TensorEncoding::kRawBytes;
  std::string out;
  out.push_back(static_cast<char>(*encoding));
  rpc::PutFixed32(&out, raw ? static_cast<uint32_t>(tensor.dtype()) : 0);
  out.push_back(is_dead ? 1 : 0);
  rpc::PutFixed64(&out, static_cast<uint64_t>(send_start_micros));
  const int rank = raw ? tensor.shape().dims() : 0;
  rpc::PutFixed32(&out, static_cast<uint32_t>(rank));
  for (int i = 0; i < rank; ++i) {
    rpc::PutFixed64(&out, static_cast<uint64_t>(tensor.shape().dim_size(i)));
  }
  return out;
}

absl::StatusOr<TensorHeader> DecodeTensorHeader(absl::string_view header,
                                                uint64_t payload_bytes,
                                                uint64_t max_bytes,
                                                absl::string_view peer) {
  if (header.size() < kFixedHeaderBytes) {
    return Malformed(peer, absl::StrCat("only ", header.size(), " bytes"));
  }
  const char* p = header.data();
  TensorHeader h;
  const uint8_t encoding = static_cast<uint8_t>(p[0]);
  const uint32_t dtype = rpc::DecodeFixed32(p + 1);
  h.is_dead = p[5] != 0;
  h.send_start_micros = static_cast<int64_t>(rpc::DecodeFixed64(p + 6));
  const uint32_t rank = rpc::DecodeFixed32(p + 14);
  if (encoding > static_cast<uint8_t>(TensorEncoding::kSameHostRef)) {
    return Malformed(peer, absl::StrCat("unknown encoding ", encoding));
  }
  h.encoding = static_cast<TensorEncoding>(encoding);
  if (rank > kMaxWireRank) {
    return Malformed(peer, absl::StrCat("rank ", rank, " is over the cap of ",
                                        kMaxWireRank));
  }
  // Exact length: trailing bytes mean the two sides disagree on the format.
  if (header.size() != kFixedHeaderBytes + 8 * size_t{rank}) {
    return Malformed(
        peer, absl::StrCat(header.size(), " bytes for rank ", rank,
                           " (expected ", kFixedHeaderBytes + 8 * rank, ")"));
  }
  if (payload_bytes > max_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "tensor from ", peer, " has ", payload_bytes,
        " bytes, over the limit of ", max_bytes, " bytes for one tensor"));
  }
  const bool ref = h.encoding == TensorEncoding::kSameHostRef;
  if (ref && payload_bytes != kSameHostRefBytes) {
    return Malformed(peer,
                     absl::StrCat("a same-host reference of ", payload_bytes,
                                  " bytes (expected ", kSameHostRefBytes, ")"));
  }
  if (h.encoding == TensorEncoding::kTensorProto) {
    if (dtype != 0 || rank != 0) {
      return Malformed(peer, "a TensorProto payload with a dtype or shape");
    }
    return h;
  }
  // Raw bytes: the dtype must be one whose elements are plain bytes, or the
  // payload would be reinterpreted as objects (strings, handles).
  if (!DataType_IsValid(static_cast<int>(dtype)) || dtype == DT_INVALID ||
      !DataTypeIsPod(static_cast<DataType>(dtype)) ||
      DataTypeSize(static_cast<DataType>(dtype)) <= 0) {
    return Malformed(
        peer, absl::StrCat("dtype ", dtype, " is unknown or not raw bytes"));
  }
  h.dtype = static_cast<DataType>(dtype);
  std::vector<int64_t> dims(rank);
  int64_t n = 1;
  for (uint32_t i = 0; i < rank; ++i) {
    dims[i] = static_cast<int64_t>(rpc::DecodeFixed64(p + 18 + 8 * i));
    if (dims[i] < 0) {
      return Malformed(
          peer, absl::StrCat("dimension ", i, " is negative (", dims[i], ")"));
    }
    if (__builtin_mul_overflow(n, dims[i], &n)) {
      return Malformed(peer, absl::StrCat("the element count overflows at "
                                          "dimension ",
                                          i));
    }
  }
  int64_t bytes = 0;
  if (ref) {
    // The consumer allocates what the shape says: capped like a payload.
    if (__builtin_mul_overflow(n, int64_t{DataTypeSize(h.dtype)}, &bytes) ||
        static_cast<uint64_t>(bytes) > max_bytes) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "tensor from ", peer, " (same host) has ", n, " elements of ",
          DataTypeName(h.dtype), ", over the limit of ", max_bytes,
          " bytes for one tensor"));
    }
    h.shape = TensorShape(absl::MakeConstSpan(dims));
    return h;
  }
  if (__builtin_mul_overflow(n, int64_t{DataTypeSize(h.dtype)}, &bytes) ||
      static_cast<uint64_t>(bytes) != payload_bytes) {
    return Malformed(
        peer, absl::StrCat(
                  "the payload has ", payload_bytes, " bytes but the shape's ",
                  n, " elements of ", DataTypeName(h.dtype), " need ",
                  __builtin_mul_overflow(n, DataTypeSize(h.dtype), &bytes)
                      ? std::string("more than 2^63")
                      : absl::StrCat(bytes)));
  }
  h.shape = TensorShape(absl::MakeConstSpan(dims));
  return h;
}

void MarkSameHostRef(std::string* header) {
  if (!header->empty()) {
    (*header)[0] = static_cast<char>(TensorEncoding::kSameHostRef);
  }
}

uint64_t SameHostKey() {
  static const uint64_t key = [] {
    std::ifstream boot("/proc/sys/kernel/random/boot_id");
    std::string boot_id;
    struct stat pid_ns {
    }, net_ns{};
    if (!std::getline(boot, boot_id) || boot_id.empty() ||
        stat("/proc/self/ns/pid", &pid_ns) != 0 ||
        stat("/proc/self/ns/net", &net_ns) != 0) {
      return uint64_t{0};
    }
    // FNV-1a: the same in every process (absl::Hash is seeded per process).
    std::string id = boot_id;
    rpc::PutFixed64(&id, static_cast<uint64_t>(pid_ns.st_dev));
    rpc::PutFixed64(&id, static_cast<uint64_t>(pid_ns.st_ino));
    // Network namespaces are hosts of their own (the multi-host lab makes
    // its hosts of them): a tensor between two of them crosses their link.
    rpc::PutFixed64(&id, static_cast<uint64_t>(net_ns.st_dev));
    rpc::PutFixed64(&id, static_cast<uint64_t>(net_ns.st_ino));
    rpc::PutFixed64(&id, static_cast<uint64_t>(getuid()));
    uint64_t h = 14695981039346656037ull;
    for (unsigned char c : id) h = (h ^ c) * 1099511628211ull;
    return h == 0 ? uint64_t{1} : h;
  }();
  return key;
}

std::string EncodeSameHostRecvRequest(uint64_t key, absl::string_view request) {
  std::string out;
  out.reserve(8 + request.size());
  rpc::PutFixed64(&out, key);
  out.append(request.data(), request.size());
  return out;
}

absl::Status DecodeSameHostRecvRequest(absl::string_view body, uint64_t* key,
                                       absl::string_view* request) {
  if (body.size() < 8) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor data plane: a same-host RecvTensor of ", body.size(),
        " bytes has no room for its 8-byte host key"));
  }
  *key = rpc::DecodeFixed64(body.data());
  *request = body.substr(8);
  return absl::OkStatus();
}

std::string EncodeSameHostRef(const SameHostRef& ref) {
  std::string out;
  rpc::PutFixed32(&out, static_cast<uint32_t>(ref.pid));
  rpc::PutFixed64(&out, ref.address);
  rpc::PutFixed64(&out, ref.bytes);
  return out;
}

absl::StatusOr<SameHostRef> DecodeSameHostRef(absl::string_view payload,
                                              uint64_t expected_bytes,
                                              absl::string_view peer) {
  if (payload.size() != kSameHostRefBytes) {
    return Malformed(peer, absl::StrCat("a same-host reference of ",
                                        payload.size(), " bytes"));
  }
  SameHostRef ref;
  ref.pid = static_cast<int32_t>(rpc::DecodeFixed32(payload.data()));
  ref.address = rpc::DecodeFixed64(payload.data() + 4);
  ref.bytes = rpc::DecodeFixed64(payload.data() + 12);
  if (ref.pid <= 0 || ref.bytes != expected_bytes) {
    return Malformed(
        peer,
        absl::StrCat("a same-host reference to ", ref.bytes, " bytes of pid ",
                     ref.pid, " for a tensor of ", expected_bytes, " bytes"));
  }
  return ref;
}

std::string EncodeErrorBody(const absl::Status& status) {
  rpc::StatusDetails details;
  status.ForEachPayload(
      [&details](absl::string_view url, const absl::Cord& payload) {
        (*details.mutable_payloads())[std::string(url)] = std::string(payload);
      });
  details.set_from_service(true);
  std::string out;
  rpc::PutFixed32(&out, static_cast<uint32_t>(status.message().size()));
  out.append(status.message().data(), status.message().size());
  details.AppendToString(&out);
  return out;
}

absl::Status DecodeErrorBody(absl::StatusCode code, absl::string_view body) {
  if (body.size() >= 4) {
    const size_t size = rpc::DecodeFixed32(body.data());
    rpc::StatusDetails details;
    if (size <= body.size() - 4 &&
        details.ParseFromArray(body.data() + 4 + size,
                               static_cast<int>(body.size() - 4 - size))) {
      absl::Status status(code, body.substr(4, size));
      for (const auto& [url, payload] : details.payloads()) {
        status.SetPayload(url, absl::Cord(payload));
      }
      return status;
    }
  }
  return absl::Status(code, body);
}

}  // namespace cohort::runtime
