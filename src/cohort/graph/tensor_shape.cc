#include "cohort/graph/tensor_shape.h"

#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cohort/base/logging.h"

namespace cohort {

TensorShape::TensorShape(std::initializer_list<int64_t> dims)
    : TensorShape(absl::Span<const int64_t>(dims.begin(), dims.size())) {}

TensorShape::TensorShape(absl::Span<const int64_t> dims)
    : dims_(dims.begin(), dims.end()) {
  for (int64_t d : dims_) COHORT_CHECK(d >= 0) << "negative dimension " << d;
  Recompute();
}

absl::StatusOr<TensorShape> TensorShape::Make(absl::Span<const int64_t> dims) {
  int64_t n = 1;
  for (int64_t d : dims) {
    if (d < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("shape [", absl::StrJoin(dims, ","),
                       "] has a negative dimension ", d));
    }
    if (d != 0 && n > std::numeric_limits<int64_t>::max() / d) {
      return absl::InvalidArgumentError(absl::StrCat(
          "shape [", absl::StrJoin(dims, ","), "] has too many elements"));
    }
    n *= d;
  }
  TensorShape s;
  s.dims_.assign(dims.begin(), dims.end());
  s.num_elements_ = n;
  return s;
}

absl::StatusOr<TensorShape> TensorShape::FromProto(
    const TensorShapeProto& proto) {
  if (proto.unknown_rank()) {
    return absl::InvalidArgumentError(
        "expected a fully defined shape, got one of unknown rank");
  }
  absl::InlinedVector<int64_t, 4> dims;
  for (const auto& d : proto.dim()) dims.push_back(d.size());
  return Make(dims);
}

void TensorShape::Recompute() {
  int64_t n = 1;
  for (int64_t d : dims_) n *= d;
  num_elements_ = n;
}

void TensorShape::AddDim(int64_t size) {
  COHORT_CHECK(size >= 0);
  dims_.push_back(size);
  num_elements_ *= size;
}

void TensorShape::InsertDim(int d, int64_t size) {
  COHORT_CHECK(size >= 0 && d >= 0 && d <= dims());
  dims_.insert(dims_.begin() + d, size);
  Recompute();
}

void TensorShape::RemoveDim(int d) {
  COHORT_CHECK(d >= 0 && d < dims());
  dims_.erase(dims_.begin() + d);
  Recompute();
}

void TensorShape::set_dim(int d, int64_t size) {
  COHORT_CHECK(size >= 0 && d >= 0 && d < dims());
  dims_[d] = size;
  Recompute();
}

void TensorShape::AsProto(TensorShapeProto* proto) const {
  proto->Clear();
  for (int64_t d : dims_) proto->add_dim()->set_size(d);
}

std::string TensorShape::DebugString() const {
  return absl::StrCat("[", absl::StrJoin(dims_, ","), "]");
}

PartialTensorShape::PartialTensorShape(std::initializer_list<int64_t> dims)
    : unknown_rank_(false), dims_(dims.begin(), dims.end()) {
  for (auto& d : dims_)
    if (d < 0) d = -1;
}

PartialTensorShape::PartialTensorShape(absl::Span<const int64_t> dims)
    : unknown_rank_(false), dims_(dims.begin(), dims.end()) {
  for (auto& d : dims_)
    if (d < 0) d = -1;
}

PartialTensorShape::PartialTensorShape(const TensorShape& shape)
    : unknown_rank_(false),
      dims_(shape.dim_sizes().begin(), shape.dim_sizes().end()) {}

PartialTensorShape PartialTensorShape::UnknownDims(int rank) {
  PartialTensorShape s;
  s.unknown_rank_ = false;
  s.dims_.assign(rank, -1);
  return s;
}

PartialTensorShape PartialTensorShape::FromProto(
    const TensorShapeProto& proto) {
  if (proto.unknown_rank()) return PartialTensorShape();
  PartialTensorShape s;
  s.unknown_rank_ = false;
  for (const auto& d : proto.dim())
    s.dims_.push_back(d.size() < 0 ? -1 : d.size());
  return s;
}

bool PartialTensorShape::IsFullyDefined() const {
  if (unknown_rank_) return false;
  for (int64_t d : dims_)
    if (d < 0) return false;
  return true;
}

int64_t PartialTensorShape::num_elements() const {
  if (!IsFullyDefined()) return -1;
  int64_t n = 1;
  for (int64_t d : dims_) n *= d;
  return n;
}

TensorShape PartialTensorShape::ToTensorShape() const {
  COHORT_CHECK(IsFullyDefined()) << DebugString();
  return TensorShape(absl::Span<const int64_t>(dims_.data(), dims_.size()));
}

bool PartialTensorShape::IsCompatibleWith(const TensorShape& shape) const {
  if (unknown_rank_) return true;
  if (static_cast<int>(dims_.size()) != shape.dims()) return false;
  for (size_t i = 0; i < dims_.size(); ++i) {
    if (dims_[i] >= 0 && dims_[i] != shape.dim_size(i)) return false;
  }
  return true;
}

bool PartialTensorShape::IsCompatibleWith(const PartialTensorShape& o) const {
  return MergeWith(o).ok();
}

absl::StatusOr<PartialTensorShape> PartialTensorShape::MergeWith(
    const PartialTensorShape& o) const {
  if (unknown_rank_) return o;
  if (o.unknown_rank_) return *this;
  if (dims_.size() != o.dims_.size()) {
    return absl::InvalidArgumentError(absl::StrCat("shapes ", DebugString(),
                                                   " and ", o.DebugString(),
                                                   " have different ranks"));
  }
  PartialTensorShape r = *this;
  for (size_t i = 0; i < dims_.size(); ++i) {
    if (r.dims_[i] < 0) {
      r.dims_[i] = o.dims_[i];
    } else if (o.dims_[i] >= 0 && o.dims_[i] != r.dims_[i]) {
      return absl::InvalidArgumentError(
          absl::StrCat("shapes ", DebugString(), " and ", o.DebugString(),
                       " differ in dimension ", i));
    }
  }
  return r;
}

void PartialTensorShape::AsProto(TensorShapeProto* proto) const {
  proto->Clear();
  if (unknown_rank_) {
    proto->set_unknown_rank(true);
    return;
  }
  for (int64_t d : dims_) proto->add_dim()->set_size(d);
}

std::string PartialTensorShape::DebugString() const {
  if (unknown_rank_) return "<unknown>";
  return absl::StrCat("[",
                      absl::StrJoin(dims_, ",",
                                    [](std::string* out, int64_t d) {
                                      absl::StrAppend(
                                          out, d < 0 ? "?" : absl::StrCat(d));
                                    }),
                      "]");
}

}  // namespace cohort
