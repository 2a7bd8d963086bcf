#include "cohort/collective/call_desc.h"

#include "absl/strings/str_cat.h"
#include "cohort/rpc/coding.h"

namespace cohort::collective {

CallDesc CallDesc::AllReduce(ElementType type, ReduceOp op, uint64_t bytes,
                             int64_t instance) {
  return CallDesc{static_cast<uint32_t>(CallKind::kAllReduce),
                  static_cast<uint32_t>(type),
                  static_cast<uint32_t>(op),
                  0,
                  bytes,
                  instance};
}

CallDesc CallDesc::Broadcast(int root, uint64_t bytes, int64_t instance) {
  return CallDesc{
      static_cast<uint32_t>(CallKind::kBroadcast), 0, 0, root, bytes, instance};
}

CallDesc CallDesc::AllGather(uint64_t bytes, int64_t instance) {
  return CallDesc{
      static_cast<uint32_t>(CallKind::kAllGather), 0, 0, 0, bytes, instance};
}

std::string CallDesc::ToString() const {
  std::string call;
  switch (static_cast<CallKind>(kind)) {
    case CallKind::kAllReduce: {
      const auto t = static_cast<ElementType>(type);
      const bool known =
          t == ElementType::kFloat32 || t == ElementType::kFloat64;
      call = absl::StrCat(
          "AllReduce ", ReduceOpName(static_cast<ReduceOp>(op)), " of ",
          known ? absl::StrCat(bytes / ElementSize(t), " ", ElementTypeName(t))
                : absl::StrCat(bytes, " bytes of element type ", type));
      break;
    }
    case CallKind::kBroadcast:
      call = absl::StrCat("Broadcast of ", bytes, " bytes from rank ", root);
      break;
    case CallKind::kAllGather:
      call = absl::StrCat("AllGather of ", bytes, " bytes per member");
      break;
    default:
      call = absl::StrCat("an unknown call (kind ", kind, ")");
  }
  return absl::StrCat(call, " (instance ", instance, ")");
}

void CallDesc::AppendTo(std::string* out) const {
  rpc::PutFixed32(out, kind);
  rpc::PutFixed32(out, type);
  rpc::PutFixed32(out, op);
  rpc::PutFixed32(out, static_cast<uint32_t>(root));
  rpc::PutFixed64(out, bytes);
  rpc::PutFixed64(out, static_cast<uint64_t>(instance));
}

CallDesc CallDesc::Decode(absl::string_view in) {
  const char* p = in.data();
  CallDesc d;
  d.kind = rpc::DecodeFixed32(p);
  d.type = rpc::DecodeFixed32(p + 4);
  d.op = rpc::DecodeFixed32(p + 8);
  d.root = static_cast<int32_t>(rpc::DecodeFixed32(p + 12));
  d.bytes = rpc::DecodeFixed64(p + 16);
  d.instance = static_cast<int64_t>(rpc::DecodeFixed64(p + 24));
  return d;
}

}  // namespace cohort::collective
