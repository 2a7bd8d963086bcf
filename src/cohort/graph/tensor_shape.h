// Tensor shapes: TensorShape (every dimension known, used by Tensor) and
// PartialTensorShape (unknown rank or unknown dimensions as -1, used by shape
// inference and Placeholder's "shape" attribute).
//
// Thread safety: value types; const methods may be called concurrently.
#ifndef COHORT_GRAPH_TENSOR_SHAPE_H_
#define COHORT_GRAPH_TENSOR_SHAPE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "cohort/graph.pb.h"

namespace cohort {

class TensorShape {
 public:
  // A scalar (rank 0, one element).
  TensorShape() = default;
  // CHECK-fails on a negative dimension; use Make for untrusted input.
  TensorShape(std::initializer_list<int64_t> dims);
  explicit TensorShape(absl::Span<const int64_t> dims);

  // InvalidArgument on a negative dimension or an element count that
  // overflows int64.
  static absl::StatusOr<TensorShape> Make(absl::Span<const int64_t> dims);
  // InvalidArgument for unknown rank/dimensions or the errors of Make.
  static absl::StatusOr<TensorShape> FromProto(const TensorShapeProto& proto);

  int dims() const { return static_cast<int>(dims_.size()); }
  int64_t dim_size(int i) const { return dims_[i]; }
  absl::Span<const int64_t> dim_sizes() const { return dims_; }
  int64_t num_elements() const { return num_elements_; }

  // CHECK-fail on a negative size (bugs only).
  void AddDim(int64_t size);
  void InsertDim(int d, int64_t size);
  void RemoveDim(int d);
  void set_dim(int d, int64_t size);

  bool IsSameSize(const TensorShape& o) const { return dims_ == o.dims_; }
  bool operator==(const TensorShape& o) const { return dims_ == o.dims_; }
  bool operator!=(const TensorShape& o) const { return dims_ != o.dims_; }

  void AsProto(TensorShapeProto* proto) const;
  // "[2,3]"; "[]" for a scalar.
  std::string DebugString() const;

 private:
  void Recompute();
  absl::InlinedVector<int64_t, 4> dims_;
  int64_t num_elements_ = 1;
};

class PartialTensorShape {
 public:
  // Unknown rank.
  PartialTensorShape() = default;
  // Known rank; -1 marks an unknown dimension.
  PartialTensorShape(std::initializer_list<int64_t> dims);
  explicit PartialTensorShape(absl::Span<const int64_t> dims);
  // Fully known.
  PartialTensorShape(const TensorShape& shape);  // NOLINT: implicit on purpose

  static PartialTensorShape UnknownRank() { return PartialTensorShape(); }
  // Rank 0. (Note: `PartialTensorShape()` and `{}` mean unknown rank.)
  static PartialTensorShape Scalar() {
    return PartialTensorShape(TensorShape());
  }
  // Known rank `rank`, every dimension unknown.
  static PartialTensorShape UnknownDims(int rank);
  static PartialTensorShape FromProto(const TensorShapeProto& proto);

  bool unknown_rank() const { return unknown_rank_; }
  // -1 when the rank is unknown.
  int dims() const {
    return unknown_rank_ ? -1 : static_cast<int>(dims_.size());
  }
  // -1 when unknown. Requires a known rank.
  int64_t dim_size(int i) const { return dims_[i]; }
  absl::Span<const int64_t> dim_sizes() const { return dims_; }
  // Known rank and every dimension known.
  bool IsFullyDefined() const;
  // -1 unless fully defined.
  int64_t num_elements() const;
  // Requires IsFullyDefined().
  TensorShape ToTensorShape() const;

  // True when `shape` could be a value of this partial shape.
  bool IsCompatibleWith(const TensorShape& shape) const;
  bool IsCompatibleWith(const PartialTensorShape& shape) const;
  // The most specific shape compatible with both; InvalidArgument when they
  // conflict.
  absl::StatusOr<PartialTensorShape> MergeWith(
      const PartialTensorShape& other) const;

  bool operator==(const PartialTensorShape& o) const {
    return unknown_rank_ == o.unknown_rank_ && dims_ == o.dims_;
  }
  void AsProto(TensorShapeProto* proto) const;
  // "<unknown>", "[?,3]".
  std::string DebugString() const;

 private:
  bool unknown_rank_ = true;
  absl::InlinedVector<int64_t, 4> dims_;
};

}  // namespace cohort

#endif  // COHORT_GRAPH_TENSOR_SHAPE_H_
