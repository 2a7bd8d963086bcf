// CRC-32C (Castagnoli), as used by LevelDB and TensorFlow's checkpoint
// files, with LevelDB's masking for checksums stored next to the data they
// cover.
//
// Thread safety: pure functions.
#ifndef COHORT_GRAPH_CRC32C_H_
#define COHORT_GRAPH_CRC32C_H_

#include <cstddef>
#include <cstdint>

namespace cohort {
namespace crc32c {

// CRC of data[0..n) continuing from `crc` (the CRC of preceding bytes).
uint32_t Extend(uint32_t crc, const char* data, size_t n);
inline uint32_t Value(const char* data, size_t n) { return Extend(0, data, n); }

// Masked CRCs are stored in files (a CRC of data containing CRCs is weak).
inline uint32_t Mask(uint32_t crc) {
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}
inline uint32_t Unmask(uint32_t masked) {
  uint32_t rot = masked - 0xa282ead8u;
  return (rot >> 17) | (rot << 15);
}

}  // namespace crc32c
}  // namespace cohort

#endif  // COHORT_GRAPH_CRC32C_H_
