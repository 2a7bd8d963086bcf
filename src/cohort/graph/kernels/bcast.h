// NumPy broadcasting for binary elementwise kernels.
//
// BCast takes two shapes and computes the broadcast output shape and an
// equivalent low-rank description for Eigen: both operands reshaped to
// `x_reshape()`/`y_reshape()` (same rank, adjacent dimensions with the same
// broadcast pattern collapsed) and broadcast by `x_bcast()`/`y_bcast()`.
// It also gives the axes each input's gradient must be summed over
// (`grad_x_reduce_idx()`), which the BroadcastGradientArgs op and the
// gradients of Add/Sub/Mul/... use.
//
//   BCast b(x.shape(), y.shape());
//   if (!b.valid()) -> InvalidArgument("incompatible shapes ...")
//
// Thread safety: immutable after construction.
#ifndef COHORT_GRAPH_KERNELS_BCAST_H_
#define COHORT_GRAPH_KERNELS_BCAST_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/types/span.h"
#include "cohort/graph/tensor_shape.h"

namespace cohort {

class BCast {
 public:
  using Vec = std::vector<int64_t>;
  BCast(absl::Span<const int64_t> x, absl::Span<const int64_t> y);
  BCast(const TensorShape& x, const TensorShape& y)
      : BCast(x.dim_sizes(), y.dim_sizes()) {}

  // False when the shapes cannot be broadcast together.
  bool valid() const { return valid_; }
  // "incompatible shapes for broadcasting: [2,3] and [4]"
  std::string ErrorMessage() const;

  // Both shapes are equal: no broadcasting needed.
  bool same_shape() const { return same_shape_; }
  const Vec& x_reshape() const { return x_reshape_; }
  const Vec& x_bcast() const { return x_bcast_; }
  const Vec& y_reshape() const { return y_reshape_; }
  const Vec& y_bcast() const { return y_bcast_; }
  const Vec& result_shape() const { return result_; }  // Collapsed.
  const TensorShape& output_shape() const { return output_shape_; }
  // Axes of the (uncollapsed) output to sum for each input's gradient.
  const Vec& grad_x_reduce_idx() const { return grad_x_reduce_; }
  const Vec& grad_y_reduce_idx() const { return grad_y_reduce_; }

 private:
  bool valid_ = true;
  // Why the shapes are invalid beyond being incompatible (a negative
  // dimension or an element count that overflows, from shapes given as
  // data, e.g. BroadcastGradientArgs); empty otherwise.
  std::string problem_;
  bool same_shape_ = false;
  Vec x_in_, y_in_;
  Vec x_reshape_, x_bcast_, y_reshape_, y_bcast_, result_;
  TensorShape output_shape_;
  Vec grad_x_reduce_, grad_y_reduce_;
};

}  // namespace cohort

#endif  // COHORT_GRAPH_KERNELS_BCAST_H_
