#include "cohort/graph/kernels/bcast.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace cohort {

BCast::BCast(absl::Span<const int64_t> x, absl::Span<const int64_t> y)
    : x_in_(x.begin(), x.end()), y_in_(y.begin(), y.end()) {
  same_shape_ = x_in_ == y_in_;
  const size_t rank = std::max(x.size(), y.size());
  Vec xp(rank, 1), yp(rank, 1), out(rank);
  std::copy(x.begin(), x.end(), xp.begin() + (rank - x.size()));
  std::copy(y.begin(), y.end(), yp.begin() + (rank - y.size()));
  for (size_t i = 0; i < rank; ++i) {
    if (xp[i] == yp[i]) {
      out[i] = xp[i];
    } else if (xp[i] == 1) {
      out[i] = yp[i];
    } else if (yp[i] == 1) {
      out[i] = xp[i];
    } else {
      valid_ = false;
      return;
    }
  }
  // Shapes may come from tensors (BroadcastGradientArgs): a negative
  // dimension or an overflowing element count is an error, not a CHECK
  // failure or a wrapped count.
  auto shape = TensorShape::Make(absl::Span<const int64_t>(out));
  if (!shape.ok()) {
    valid_ = false;
    problem_ = std::string(shape.status().message());
    return;
  }
  output_shape_ = *std::move(shape);
  // Gradient reduction axes: where an input's (padded) size is 1 but the
  // output's is not, or where the input had no such dimension.
  for (size_t i = 0; i < rank; ++i) {
    bool x_missing = i < rank - x.size();
    bool y_missing = i < rank - y.size();
    if (x_missing || (xp[i] == 1 && out[i] != 1)) grad_x_reduce_.push_back(i);
    if (y_missing || (yp[i] == 1 && out[i] != 1)) grad_y_reduce_.push_back(i);
  }
  // Collapse adjacent dimensions that share a broadcast pattern
  // (0 = neither broadcast, 1 = x broadcast, 2 = y broadcast); size-1 output
  // dimensions are dropped.
  int prev = -1;
  for (size_t i = 0; i < rank; ++i) {
    if (out[i] == 1) continue;
    int pattern = xp[i] == out[i] ? (yp[i] == out[i] ? 0 : 2) : 1;
    if (pattern == prev) {
      x_reshape_.back() *= xp[i];
      y_reshape_.back() *= yp[i];
      x_bcast_.back() *= xp[i] == out[i] ? 1 : out[i];
      y_bcast_.back() *= yp[i] == out[i] ? 1 : out[i];
      result_.back() *= out[i];
    } else {
      x_reshape_.push_back(xp[i]);
      y_reshape_.push_back(yp[i]);
      x_bcast_.push_back(xp[i] == out[i] ? 1 : out[i]);
      y_bcast_.push_back(yp[i] == out[i] ? 1 : out[i]);
      result_.push_back(out[i]);
      prev = pattern;
    }
  }
  if (result_.empty()) {  // Every dimension is 1 (or a scalar).
    x_reshape_ = y_reshape_ = x_bcast_ = y_bcast_ = result_ = Vec{1};
  }
}

std::string BCast::ErrorMessage() const {
  return absl::StrCat(
      problem_.empty() ? "incompatible shapes" : "invalid shapes",
      " for broadcasting: [", absl::StrJoin(x_in_, ","), "] and [",
      absl::StrJoin(y_in_, ","), "]",
      problem_.empty() ? "" : absl::StrCat(" (the result's ", problem_, ")"));
}

}  // namespace cohort
