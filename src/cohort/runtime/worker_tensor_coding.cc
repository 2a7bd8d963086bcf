#include "cohort/runtime/worker_tensor_coding.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "cohort/base/status.h"
#include "cohort/graph/types.h"

namespace cohort::runtime {
namespace {

absl::Status CheckDtype(const TensorProto& proto, absl::string_view what) {
  // An enum value this build does not know arrives as an int (proto3 open
  // enums); DataTypeSize would treat it as size 0, so it is refused first.
  const int raw = static_cast<int>(proto.dtype());
  if (!DataType_IsValid(raw) || proto.dtype() == DT_INVALID ||
      ElementBytes(proto.dtype()) == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": unknown dtype ", raw));
  }
  return absl::OkStatus();
}

// The element count, checked dimension by dimension so that a hostile
// shape is named precisely (TensorShape::FromProto would also refuse it,
// with a less specific message).
absl::StatusOr<int64_t> CheckedNumElements(const TensorProto& proto,
                                           absl::string_view what) {
  const TensorShapeProto& shape = proto.tensor_shape();
  if (shape.unknown_rank()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": shape has unknown rank"));
  }
  int64_t n = 1;
  for (int i = 0; i < shape.dim_size(); ++i) {
    const int64_t d = shape.dim(i).size();
    if (d < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": dimension ", i, " of the shape is negative (", d, ")"));
    }
    if (__builtin_mul_overflow(n, d, &n)) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": the shape's element count overflows int64 at dimension ",
          i));
    }
  }
  return n;
}

}  // namespace

absl::StatusOr<Tensor> DecodeWireTensor(const TensorProto& proto,
                                        absl::string_view what,
                                        int64_t max_bytes) {
  COHORT_RETURN_IF_ERROR(CheckDtype(proto, what));
  COHORT_ASSIGN_OR_RETURN(const int64_t n, CheckedNumElements(proto, what));
  const DataType dtype = proto.dtype();
  int64_t bytes = 0;
  if (__builtin_mul_overflow(n, ElementBytes(dtype), &bytes) ||
      bytes > max_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat(what, ": a tensor of ", n, " ", DataTypeName(dtype),
                     " elements is over the limit of ", max_bytes,
                     " bytes for one tensor on the wire"));
  }
  if (DataTypeIsPod(dtype) && !proto.tensor_content().empty() &&
      static_cast<int64_t>(proto.tensor_content().size()) != bytes) {
    TensorShape shape;
    auto made = TensorShape::FromProto(proto.tensor_shape());
    if (made.ok()) shape = *made;
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": tensor_content has ", proto.tensor_content().size(),
        " bytes but shape ", shape.DebugString(), " of ", DataTypeName(dtype),
        " needs ", bytes));
  }
  auto tensor = Tensor::FromProto(proto);
  if (!tensor.ok()) return Annotate(tensor.status(), what);
  return tensor;
}

absl::Status EncodeWireTensor(const Tensor& tensor, absl::string_view what,
                              TensorProto* proto, int64_t max_bytes) {
  if (!tensor.IsInitialized()) {
    return absl::InternalError(
        absl::StrCat(what, ": the tensor to send is uninitialized"));
  }
  const int64_t bytes = tensor.NumElements() * ElementBytes(tensor.dtype());
  if (bytes > max_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        what, ": a tensor of ", bytes, " bytes (", DataTypeName(tensor.dtype()),
        " ", tensor.shape().DebugString(), ") is over the limit of ", max_bytes,
        " bytes for one tensor on the wire"));
  }
  tensor.AsProto(proto);
  return absl::OkStatus();
}

}  // namespace cohort::runtime
