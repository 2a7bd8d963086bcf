// CallDesc: what one member is about to do in a collective call. Every
// transport compares the members' descriptors before moving data, so that
// members that disagree (another size, operation, root or instance) fail
// with both calls named instead of mixing their data.
//
// Thread safety: a plain value (it also lives in shared memory, so it is
// trivially copyable and has no pointers).
#ifndef COHORT_COLLECTIVE_CALL_DESC_H_
#define COHORT_COLLECTIVE_CALL_DESC_H_

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "cohort/collective/communicator.h"

namespace cohort::collective {

enum class CallKind : uint32_t { kAllReduce = 1, kBroadcast, kAllGather };

struct CallDesc {
  uint32_t kind = 0;
  uint32_t type = 0;
  uint32_t op = 0;
  int32_t root = 0;
  uint64_t bytes = 0;
  int64_t instance = 0;

  static CallDesc AllReduce(ElementType type, ReduceOp op, uint64_t bytes,
                            int64_t instance);
  static CallDesc Broadcast(int root, uint64_t bytes, int64_t instance);
  static CallDesc AllGather(uint64_t bytes, int64_t instance);

  bool operator==(const CallDesc& o) const {
    return kind == o.kind && type == o.type && op == o.op && root == o.root &&
           bytes == o.bytes && instance == o.instance;
  }
  bool operator!=(const CallDesc& o) const { return !(*this == o); }
  // "AllReduce SUM of 100 float32 (instance 3)".
  std::string ToString() const;

  // Fixed-size little-endian wire form (kEncodedBytes).
  static constexpr size_t kEncodedBytes = 32;
  void AppendTo(std::string* out) const;
  // `in` must hold kEncodedBytes.
  static CallDesc Decode(absl::string_view in);
};

}  // namespace cohort::collective

#endif  // COHORT_COLLECTIVE_CALL_DESC_H_
