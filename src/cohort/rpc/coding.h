// Byte coding shared by every framed wire format in cohort: fixed-width
// little-endian integers, as LevelDB's util/coding.h. Pure functions; no
// allocation beyond appending to the caller's string.
//
// Thread safety: stateless; thread-safe.
#ifndef COHORT_RPC_CODING_H_
#define COHORT_RPC_CODING_H_

#include <cstdint>
#include <string>

namespace cohort::rpc {

// Appends `value` as 4 little-endian bytes.
inline void PutFixed32(std::string* dst, uint32_t value) {
  char buf[4];
  for (int i = 0; i < 4; ++i) buf[i] = static_cast<char>(value >> (8 * i));
  dst->append(buf, 4);
}

// Reads 4 little-endian bytes at `p` (the caller checked they exist).
inline uint32_t DecodeFixed32(const char* p) {
  uint32_t value = 0;
  for (int i = 0; i < 4; ++i) {
    value |= static_cast<uint32_t>(static_cast<uint8_t>(p[i])) << (8 * i);
  }
  return value;
}

// Appends `value` as 8 little-endian bytes.
inline void PutFixed64(std::string* dst, uint64_t value) {
  char buf[8];
  for (int i = 0; i < 8; ++i) buf[i] = static_cast<char>(value >> (8 * i));
  dst->append(buf, 8);
}

// Reads 8 little-endian bytes at `p` (the caller checked they exist).
inline uint64_t DecodeFixed64(const char* p) {
  uint64_t value = 0;
  for (int i = 0; i < 8; ++i) {
    value |= static_cast<uint64_t>(static_cast<uint8_t>(p[i])) << (8 * i);
  }
  return value;
}

}  // namespace cohort::rpc

#endif  // COHORT_RPC_CODING_H_
