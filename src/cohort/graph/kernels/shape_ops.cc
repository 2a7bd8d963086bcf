#include "cohort/graph/kernels/shape_ops.h"

#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cohort/base/status.h"
#include "cohort/graph/kernels/bcast.h"
#include "cohort/graph/kernels/cwise_ops.h"

namespace cohort {
namespace {

constexpr char kPodTypes[] = "T: {float, double, int32, int64, bool}";
// Why TensorFlow's index-type attrs (Tshape, index_type, Index, ...) must
// stay int32: these kernels read shapes and offsets as int32.
constexpr char kInt32Index[] = "the kernel reads int32 shapes and offsets";

// Reads a rank-1 int32 tensor; InvalidArgument naming `what` otherwise.
absl::Status ReadIntVector(const Tensor& t, const char* what,
                           std::vector<int64_t>* out) {
  if (t.dtype() != DT_INT32 || t.dims() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " must be a 1-D int32 tensor, got ",
                     DataTypeName(t.dtype()), " ", t.shape().DebugString()));
  }
  out->assign(t.span<int32_t>().begin(), t.span<int32_t>().end());
  return absl::OkStatus();
}

std::string DimsString(const std::vector<int64_t>& d) {
  return absl::StrCat("[", absl::StrJoin(d, ","), "]");
}

// Resolves a Reshape target (one -1 allowed) for `n` elements.
absl::Status ResolveReshape(const TensorShape& in, std::vector<int64_t>* dims) {
  int unknown = -1;
  int64_t product = 1;
  for (size_t i = 0; i < dims->size(); ++i) {
    int64_t d = (*dims)[i];
    if (d == -1) {
      if (unknown >= 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("shape ", DimsString(*dims), " has more than one -1"));
      }
      unknown = static_cast<int>(i);
    } else if (d < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "shape ", DimsString(*dims), " has a negative dimension"));
    } else if (d != 0 && product > std::numeric_limits<int64_t>::max() / d) {
      // The target comes from a tensor: its count must not wrap around to
      // match the input's.
      return absl::InvalidArgumentError(
          absl::StrCat("shape ", DimsString(*dims), " has too many elements"));
    } else {
      product *= d;
    }
  }
  const int64_t n = in.num_elements();
  if (unknown >= 0) {
    if (product == 0 || n % product != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot reshape a tensor of ", n, " elements (shape ",
                       in.DebugString(), ") into shape ", DimsString(*dims)));
    }
    (*dims)[unknown] = n / product;
  } else if (product != n) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot reshape a tensor of ", n, " elements (shape ",
                     in.DebugString(), ") into shape ", DimsString(*dims)));
  }
  return absl::OkStatus();
}

// Copies the block of `big` (dims `big_dims`) at `begin` of extent
// `small_dims` to/from the dense `small` buffer. `to_small` picks the
// direction. Elements are `es` bytes.
void BlockCopy(bool to_small, char* big, absl::Span<const int64_t> big_dims,
               char* small, const std::vector<int64_t>& small_dims,
               const std::vector<int64_t>& begin, size_t es) {
  const int r = static_cast<int>(big_dims.size());
  int64_t total = 1;
  for (int64_t d : small_dims) total *= d;
  if (total == 0) return;
  if (r == 0) {
    if (to_small) {
      std::memcpy(small, big, es);
    } else {
      std::memcpy(big, small, es);
    }
    return;
  }
  std::vector<int64_t> strides(r, 1);
  for (int i = r - 2; i >= 0; --i)
    strides[i] = strides[i + 1] * big_dims[i + 1];
  const int64_t row = small_dims[r - 1];
  const int64_t rows = total / row;
  std::vector<int64_t> idx(r, 0);
  for (int64_t k = 0; k < rows; ++k) {
    int64_t off = begin[r - 1];
    for (int i = 0; i < r - 1; ++i) off += (begin[i] + idx[i]) * strides[i];
    char* b = big + off * es;
    char* s = small + k * row * es;
    if (to_small) {
      std::memcpy(s, b, row * es);
    } else {
      std::memcpy(b, s, row * es);
    }
    for (int i = r - 2; i >= 0; --i) {
      if (++idx[i] < small_dims[i]) break;
      idx[i] = 0;
    }
  }
}

// Checks and resolves Slice's begin/size against `shape`.
absl::Status ResolveSlice(const TensorShape& shape, std::vector<int64_t>* begin,
                          std::vector<int64_t>* size) {
  if (static_cast<int>(begin->size()) != shape.dims() ||
      static_cast<int>(size->size()) != shape.dims()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "begin ", DimsString(*begin), " and size ", DimsString(*size),
        " must have one entry per dimension of the input ",
        shape.DebugString()));
  }
  for (int i = 0; i < shape.dims(); ++i) {
    int64_t b = (*begin)[i], s = (*size)[i], d = shape.dim_size(i);
    if (s == -1) s = d - b;
    if (b < 0 || s < 0 || b + s > d) {
      return absl::InvalidArgumentError(absl::StrCat(
          "slice out of range in dimension ", i, ": begin ", b, ", size ",
          (*size)[i], " for input shape ", shape.DebugString()));
    }
    (*size)[i] = s;
  }
  return absl::OkStatus();
}

// --- Kernels
// ---------------------------------------------------------------------

class ReshapeOp : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    std::vector<int64_t> dims;
    COHORT_OP_REQUIRES_OK(ctx, ReadIntVector(ctx->input(1), "shape", &dims));
    COHORT_OP_REQUIRES_OK(ctx, ResolveReshape(x.shape(), &dims));
    auto shape = TensorShape::Make(dims);
    COHORT_OP_REQUIRES_OK(ctx, shape.status());
    auto out = x.Reshaped(*shape);
    COHORT_OP_REQUIRES_OK(ctx, out.status());
    ctx->set_output(0, *std::move(out));
  }
};

template <typename OutT>
class ShapeOp : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    Tensor* out = nullptr;
    COHORT_OP_REQUIRES_OK(
        ctx, ctx->allocate_output(0, TensorShape({x.dims()}), &out));
    for (int i = 0; i < x.dims(); ++i) {
      out->data<OutT>()[i] = static_cast<OutT>(x.dim_size(i));
    }
  }
};

class SizeOp : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    Tensor* out = nullptr;
    COHORT_OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape(), &out));
    out->scalar<int32_t>() = static_cast<int32_t>(ctx->input(0).NumElements());
  }
};

template <typename T>
class FillOp : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    std::vector<int64_t> dims;
    COHORT_OP_REQUIRES_OK(ctx, ReadIntVector(ctx->input(0), "dims", &dims));
    const Tensor& value = ctx->input(1);
    COHORT_OP_REQUIRES(ctx, value.dims() == 0,
                       absl::InvalidArgumentError(
                           absl::StrCat("value must be a scalar, got shape ",
                                        value.shape().DebugString())));
    auto shape = TensorShape::Make(dims);
    COHORT_OP_REQUIRES_OK(ctx, shape.status());
    Tensor* out = nullptr;
    COHORT_OP_REQUIRES_OK(ctx, ctx->allocate_output(0, *shape, &out));
    out->flat<T>().setConstant(value.scalar<T>());
  }
};

template <typename T, int kValue>
class ConstantLikeOp : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    Tensor* out = nullptr;
    COHORT_OP_REQUIRES_OK(ctx,
                          ctx->allocate_output(0, ctx->input(0).shape(), &out));
    out->flat<T>().setConstant(static_cast<T>(kValue));
  }
};

class ConcatOp : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    const int n = ctx->num_inputs() - 1;
    const Tensor& axis_t = ctx->input(n);
    COHORT_OP_REQUIRES(
        ctx, axis_t.dtype() == DT_INT32 && axis_t.dims() == 0,
        absl::InvalidArgumentError("axis must be an int32 scalar"));
    const Tensor& first = ctx->input(0);
    const int rank = first.dims();
    int axis = axis_t.scalar<int32_t>();
    COHORT_OP_REQUIRES(
        ctx, axis >= -rank && axis < rank && rank > 0,
        absl::InvalidArgumentError(absl::StrCat(
            "axis ", axis, " is out of range for inputs of rank ", rank)));
    if (axis < 0) axis += rank;
    TensorShape out_shape = first.shape();
    int64_t axis_total = 0;
    for (int i = 0; i < n; ++i) {
      const Tensor& t = ctx->input(i);
      bool ok = t.dims() == rank;
      for (int d = 0; ok && d < rank; ++d) {
        ok = d == axis || t.dim_size(d) == first.dim_size(d);
      }
      COHORT_OP_REQUIRES(
          ctx, ok,
          absl::InvalidArgumentError(absl::StrCat(
              "Concat along axis ", axis, ": input ", i, " has shape ",
              t.shape().DebugString(), " which does not match input 0's ",
              first.shape().DebugString(), " outside the axis")));
      axis_total += t.dim_size(axis);
    }
    out_shape.set_dim(axis, axis_total);
    Tensor* out = nullptr;
    COHORT_OP_REQUIRES_OK(ctx, ctx->allocate_output(0, out_shape, &out));
    if (out->NumElements() == 0) return;
    const size_t es = DataTypeSize(first.dtype());
    int64_t outer = 1;
    for (int d = 0; d < axis; ++d) outer *= first.dim_size(d);
    const int64_t out_row = out->NumElements() / outer * es;
    char* dst = static_cast<char*>(out->raw_data());
    int64_t col = 0;
    for (int i = 0; i < n; ++i) {
      const Tensor& t = ctx->input(i);
      if (t.NumElements() == 0) continue;
      const int64_t row = t.NumElements() / outer * es;
      const char* src = static_cast<const char*>(t.raw_data());
      for (int64_t o = 0; o < outer; ++o) {
        std::memcpy(dst + o * out_row + col, src + o * row, row);
      }
      col += row;
    }
  }
};

class SliceOp : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    std::vector<int64_t> begin, size;
    COHORT_OP_REQUIRES_OK(ctx, ReadIntVector(ctx->input(1), "begin", &begin));
    COHORT_OP_REQUIRES_OK(ctx, ReadIntVector(ctx->input(2), "size", &size));
    COHORT_OP_REQUIRES_OK(ctx, ResolveSlice(x.shape(), &begin, &size));
    Tensor* out = nullptr;
    COHORT_OP_REQUIRES_OK(ctx,
                          ctx->allocate_output(0, TensorShape(size), &out));
    BlockCopy(true, static_cast<char*>(x.raw_data()), x.shape().dim_sizes(),
              static_cast<char*>(out->raw_data()), size, begin,
              DataTypeSize(x.dtype()));
  }
};

class SliceGradOp : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    std::vector<int64_t> dims, begin;
    COHORT_OP_REQUIRES_OK(ctx, ReadIntVector(ctx->input(0), "shape", &dims));
    COHORT_OP_REQUIRES_OK(ctx, ReadIntVector(ctx->input(1), "begin", &begin));
    const Tensor& dy = ctx->input(2);
    auto shape = TensorShape::Make(dims);
    COHORT_OP_REQUIRES_OK(ctx, shape.status());
    std::vector<int64_t> size(dy.shape().dim_sizes().begin(),
                              dy.shape().dim_sizes().end());
    COHORT_OP_REQUIRES_OK(ctx, ResolveSlice(*shape, &begin, &size));
    Tensor* out = nullptr;
    COHORT_OP_REQUIRES_OK(ctx, ctx->allocate_output(0, *shape, &out));
    const size_t es = DataTypeSize(dy.dtype());
    if (out->NumElements() > 0) {
      std::memset(out->raw_data(), 0, out->NumElements() * es);
    }
    BlockCopy(false, static_cast<char*>(out->raw_data()), shape->dim_sizes(),
              static_cast<char*>(dy.raw_data()), size, begin, es);
  }
};

class BroadcastGradientArgsOp : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    std::vector<int64_t> s0, s1;
    COHORT_OP_REQUIRES_OK(ctx, ReadIntVector(ctx->input(0), "s0", &s0));
    COHORT_OP_REQUIRES_OK(ctx, ReadIntVector(ctx->input(1), "s1", &s1));
    BCast b(s0, s1);
    COHORT_OP_REQUIRES(ctx, b.valid(),
                       absl::InvalidArgumentError(b.ErrorMessage()));
    auto emit = [&](int index, const BCast::Vec& v) -> absl::Status {
      Tensor* out = nullptr;
      COHORT_RETURN_IF_ERROR(ctx->allocate_output(
          index, TensorShape({static_cast<int64_t>(v.size())}), &out));
      for (size_t i = 0; i < v.size(); ++i) {
        out->data<int32_t>()[i] = static_cast<int32_t>(v[i]);
      }
      return absl::OkStatus();
    };
    COHORT_OP_REQUIRES_OK(ctx, emit(0, b.grad_x_reduce_idx()));
    COHORT_OP_REQUIRES_OK(ctx, emit(1, b.grad_y_reduce_idx()));
  }
};

class ReducedShapeOp : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    std::vector<int64_t> shape, axes;
    COHORT_OP_REQUIRES_OK(ctx,
                          ReadIntVector(ctx->input(0), "input_shape", &shape));
    const Tensor& a = ctx->input(1);
    COHORT_OP_REQUIRES(
        ctx, a.dtype() == DT_INT32 && a.dims() <= 1,
        absl::InvalidArgumentError("axes must be int32, rank <= 1"));
    Tensor* out = nullptr;
    COHORT_OP_REQUIRES_OK(
        ctx, ctx->allocate_output(
                 0, TensorShape({static_cast<int64_t>(shape.size())}), &out));
    const int r = static_cast<int>(shape.size());
    for (int32_t axis : a.span<int32_t>()) {
      COHORT_OP_REQUIRES(ctx, axis >= -r && axis < r,
                         absl::InvalidArgumentError(absl::StrCat(
                             "axis ", axis, " out of range for rank ", r)));
      shape[axis < 0 ? axis + r : axis] = 1;
    }
    for (int i = 0; i < r; ++i)
      out->data<int32_t>()[i] = static_cast<int32_t>(shape[i]);
  }
};

class ConcatOffsetOp : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    const Tensor& axis_t = ctx->input(0);
    COHORT_OP_REQUIRES(
        ctx, axis_t.dtype() == DT_INT32 && axis_t.dims() == 0,
        absl::InvalidArgumentError("axis must be an int32 scalar"));
    const int n = ctx->num_inputs() - 1;
    std::vector<int64_t> first;
    COHORT_OP_REQUIRES_OK(ctx, ReadIntVector(ctx->input(1), "shape", &first));
    const int r = static_cast<int>(first.size());
    int axis = axis_t.scalar<int32_t>();
    COHORT_OP_REQUIRES(ctx, axis >= -r && axis < r,
                       absl::InvalidArgumentError(absl::StrCat(
                           "axis ", axis, " out of range for rank ", r)));
    if (axis < 0) axis += r;
    // int64_t: the sizes are data, and their sum must not overflow.
    int64_t offset = 0;
    for (int i = 0; i < n; ++i) {
      std::vector<int64_t> s;
      COHORT_OP_REQUIRES_OK(ctx, ReadIntVector(ctx->input(1 + i), "shape", &s));
      COHORT_OP_REQUIRES(
          ctx, static_cast<int>(s.size()) == r,
          absl::InvalidArgumentError("shapes have different ranks"));
      Tensor* out = nullptr;
      COHORT_OP_REQUIRES_OK(ctx,
                            ctx->allocate_output(i, TensorShape({r}), &out));
      COHORT_OP_REQUIRES(ctx, offset <= std::numeric_limits<int32_t>::max(),
                         absl::InvalidArgumentError(absl::StrCat(
                             "the offset of input ", i, " along axis ", axis,
                             " is ", offset, ", beyond int32")));
      for (int d = 0; d < r; ++d) {
        out->data<int32_t>()[d] = d == axis ? static_cast<int32_t>(offset) : 0;
      }
      offset += s[axis];
    }
  }
};

// --- Shape functions
// ---------------------------------------------------------------

// The values of a constant int32 vector input, if known.
bool ConstIntVector(const InferenceContext* c, int i,
                    std::vector<int64_t>* out) {
  const Tensor* t = c->input_tensor(i);
  if (t == nullptr) return false;
  return ReadIntVector(*t, "", out).ok();
}

// A rank-1 shape input's length, or -1.
int ShapeInputRank(const InferenceContext* c, int i) {
  const PartialTensorShape& s = c->input(i);
  if (s.dims() != 1) return -1;
  return static_cast<int>(s.dim_size(0));
}

absl::Status ReshapeShape(InferenceContext* c) {
  std::vector<int64_t> dims;
  if (!ConstIntVector(c, 1, &dims)) {
    int r = ShapeInputRank(c, 1);
    c->set_output(0, r >= 0 ? PartialTensorShape::UnknownDims(r)
                            : PartialTensorShape::UnknownRank());
    return absl::OkStatus();
  }
  const PartialTensorShape& in = c->input(0);
  if (in.IsFullyDefined()) {
    absl::Status s = ResolveReshape(in.ToTensorShape(), &dims);
    if (!s.ok()) return c->InvalidArgument(s.message());
  }
  c->set_output(0, PartialTensorShape(absl::Span<const int64_t>(dims)));
  return absl::OkStatus();
}

absl::Status ShapeShape(InferenceContext* c) {
  c->set_output(0, PartialTensorShape({c->input(0).dims()}));
  return absl::OkStatus();
}

absl::Status FillShape(InferenceContext* c) {
  std::vector<int64_t> dims;
  if (ConstIntVector(c, 0, &dims)) {
    c->set_output(0, PartialTensorShape(absl::Span<const int64_t>(dims)));
  } else {
    int r = ShapeInputRank(c, 0);
    c->set_output(0, r >= 0 ? PartialTensorShape::UnknownDims(r)
                            : PartialTensorShape::UnknownRank());
  }
  return absl::OkStatus();
}

absl::Status ConcatShape(InferenceContext* c) {
  const int n = c->num_inputs() - 1;
  const Tensor* axis_t = c->input_tensor(n);
  int rank = -1;
  for (int i = 0; i < n; ++i) {
    if (c->input(i).dims() >= 0) rank = c->input(i).dims();
  }
  if (rank < 0) {
    c->set_output(0, PartialTensorShape::UnknownRank());
    return absl::OkStatus();
  }
  if (axis_t == nullptr || axis_t->dtype() != DT_INT32 || axis_t->dims() != 0) {
    c->set_output(0, PartialTensorShape::UnknownDims(rank));
    return absl::OkStatus();
  }
  int axis = axis_t->scalar<int32_t>();
  if (axis < -rank || axis >= rank) {
    return c->InvalidArgument(absl::StrCat(
        "axis ", axis, " is out of range for inputs of rank ", rank));
  }
  if (axis < 0) axis += rank;
  std::vector<int64_t> dims(rank, -1);
  int64_t total = 0;
  for (int i = 0; i < n; ++i) {
    const PartialTensorShape& s = c->input(i);
    if (s.unknown_rank()) {
      total = -1;
      continue;
    }
    if (s.dims() != rank) {
      return c->InvalidArgument(absl::StrCat("Concat input ", i, " has rank ",
                                             s.dims(), ", expected ", rank));
    }
    for (int d = 0; d < rank; ++d) {
      if (d == axis) continue;
      if (s.dim_size(d) >= 0) {
        if (dims[d] >= 0 && dims[d] != s.dim_size(d)) {
          return c->InvalidArgument(absl::StrCat(
              "Concat input ", i, " has shape ", s.DebugString(),
              " which does not match the other inputs outside axis ", axis));
        }
        dims[d] = s.dim_size(d);
      }
    }
    if (total >= 0)
      total = s.dim_size(axis) < 0 ? -1 : total + s.dim_size(axis);
  }
  dims[axis] = total;
  c->set_output(0, PartialTensorShape(absl::Span<const int64_t>(dims)));
  return absl::OkStatus();
}

absl::Status SliceShape(InferenceContext* c) {
  std::vector<int64_t> begin, size;
  const PartialTensorShape& in = c->input(0);
  if (ConstIntVector(c, 1, &begin) && ConstIntVector(c, 2, &size)) {
    if (in.IsFullyDefined()) {
      absl::Status s = ResolveSlice(in.ToTensorShape(), &begin, &size);
      if (!s.ok()) return c->InvalidArgument(s.message());
    } else {
      for (int64_t& s : size) s = s < 0 ? -1 : s;
    }
    c->set_output(0, PartialTensorShape(absl::Span<const int64_t>(size)));
    return absl::OkStatus();
  }
  c->set_output(0, in.dims() >= 0 ? PartialTensorShape::UnknownDims(in.dims())
                                  : PartialTensorShape::UnknownRank());
  return absl::OkStatus();
}

absl::Status SliceGradShape(InferenceContext* c) {
  std::vector<int64_t> dims;
  if (ConstIntVector(c, 0, &dims)) {
    c->set_output(0, PartialTensorShape(absl::Span<const int64_t>(dims)));
  } else {
    c->set_output(0, c->input(2).dims() >= 0
                         ? PartialTensorShape::UnknownDims(c->input(2).dims())
                         : PartialTensorShape::UnknownRank());
  }
  return absl::OkStatus();
}

absl::Status VectorOutputs(InferenceContext* c) {
  for (int i = 0; i < c->num_outputs(); ++i)
    c->set_output(i, PartialTensorShape({-1}));
  return absl::OkStatus();
}

absl::Status ConcatOffsetShape(InferenceContext* c) {
  for (int i = 0; i < c->num_outputs(); ++i) c->set_output(i, c->input(1 + i));
  return absl::OkStatus();
}

template <typename T>
absl::Status RegisterTyped(KernelRegistry* r) {
  auto def = [](const char* op) {
    return KernelDefBuilder(op).TypeConstraint("T", DataTypeToEnum<T>::value);
  };
  COHORT_RETURN_IF_ERROR(r->Register<FillOp<T>>(def("Fill")));
  COHORT_RETURN_IF_ERROR((r->Register<ConstantLikeOp<T, 0>>(def("ZerosLike"))));
  COHORT_RETURN_IF_ERROR((r->Register<ConstantLikeOp<T, 1>>(def("OnesLike"))));
  return absl::OkStatus();
}

}  // namespace

absl::Status RegisterShapeOps(OpRegistry* r) {
  COHORT_RETURN_IF_ERROR(r->Register(OpDefBuilder("Reshape")
                                         .Input("tensor: T")
                                         .Input("shape: Tshape")
                                         .Output("output: T")
                                         .Attr("T: type")
                                         .Attr("Tshape: {int32, int64} = int32")
                                         .RequireDefault("Tshape", kInt32Index)
                                         .SetShapeFn(ReshapeShape)));
  COHORT_RETURN_IF_ERROR(
      r->Register(OpDefBuilder("Shape")
                      .Input("input: T")
                      .Output("output: out_type")
                      .Attr("T: type")
                      .Attr("out_type: {int32, int64} = int32")
                      .SetShapeFn(ShapeShape)));
  COHORT_RETURN_IF_ERROR(r->Register(OpDefBuilder("Size")
                                         .Input("input: T")
                                         .Output("output: out_type")
                                         .Attr("T: type")
                                         .Attr("out_type: {int32, int64} = "
                                               "int32")
                                         .RequireDefault("out_type",
                                                         "the kernel writes "
                                                         "an int32 size")
                                         .SetShapeFn(shape_fns::Scalar)));
  COHORT_RETURN_IF_ERROR(
      r->Register(OpDefBuilder("Fill")
                      .Input("dims: index_type")
                      .Input("value: T")
                      .Output("output: T")
                      .Attr(kPodTypes)
                      .Attr("index_type: {int32, int64} = "
                            "int32")
                      .RequireDefault("index_type", kInt32Index)
                      .SetShapeFn(FillShape)));
  for (const char* name : {"ZerosLike", "OnesLike"}) {
    COHORT_RETURN_IF_ERROR(r->Register(OpDefBuilder(name)
                                           .Input("x: T")
                                           .Output("y: T")
                                           .Attr(kPodTypes)
                                           .SetShapeFn(shape_fns::Unchanged)));
  }
  // TensorFlow's ConcatV2 (what tf.concat writes): values first, then the
  // axis. TensorFlow's legacy Concat takes the axis first; it is not
  // registered, so such a node is an unknown op rather than misread.
  // (TensorFlow wants N >= 2; cohort's builder also joins a single value.)
  COHORT_RETURN_IF_ERROR(r->Register(OpDefBuilder("ConcatV2")
                                         .Input("values: N * T")
                                         .Input("axis: Tidx")
                                         .Output("output: T")
                                         .Attr(kPodTypes)
                                         .Attr("Tidx: {int32, int64} = int32")
                                         .RequireDefault("Tidx", kInt32Index)
                                         .SetShapeFn(ConcatShape)));
  COHORT_RETURN_IF_ERROR(r->Register(OpDefBuilder("Slice")
                                         .Input("input: T")
                                         .Input("begin: Index")
                                         .Input("size: Index")
                                         .Output("output: T")
                                         .Attr(kPodTypes)
                                         // TensorFlow declares no default
                                         // (its graphs always carry Index);
                                         // int32 lets RequireDefault refuse
                                         // int64 by name.
                                         .Attr("Index: {int32, int64} = int32")
                                         .RequireDefault("Index", kInt32Index)
                                         .SetShapeFn(SliceShape)));
  COHORT_RETURN_IF_ERROR(r->Register(OpDefBuilder("SliceGrad")
                                         .Input("shape: int32")
                                         .Input("begin: int32")
                                         .Input("dy: T")
                                         .Output("output: T")
                                         .Attr(kPodTypes)
                                         .SetShapeFn(SliceGradShape)));
  COHORT_RETURN_IF_ERROR(r->Register(OpDefBuilder("BroadcastGradientArgs")
                                         .Input("s0: T")
                                         .Input("s1: T")
                                         .Output("r0: T")
                                         .Output("r1: T")
                                         .Attr("T: {int32, int64} = int32")
                                         .RequireDefault("T", kInt32Index)
                                         .SetShapeFn(VectorOutputs)));
  COHORT_RETURN_IF_ERROR(r->Register(OpDefBuilder("ReducedShape")
                                         .Input("input_shape: int32")
                                         .Input("axes: int32")
                                         .Output("output: int32")
                                         .SetShapeFn(shape_fns::Unchanged)));
  COHORT_RETURN_IF_ERROR(r->Register(OpDefBuilder("ConcatOffset")
                                         .Input("axis: int32")
                                         .Input("shapes: N * int32")
                                         .Output("offsets: N * int32")
                                         .SetShapeFn(ConcatOffsetShape)));
  return absl::OkStatus();
}

absl::Status RegisterShapeKernels(KernelRegistry* r) {
  COHORT_RETURN_IF_ERROR(r->Register<ReshapeOp>(KernelDefBuilder("Reshape")));
  COHORT_RETURN_IF_ERROR(r->Register<ShapeOp<int32_t>>(
      KernelDefBuilder("Shape").TypeConstraint<int32_t>("out_type")));
  COHORT_RETURN_IF_ERROR(r->Register<ShapeOp<int64_t>>(
      KernelDefBuilder("Shape").TypeConstraint<int64_t>("out_type")));
  COHORT_RETURN_IF_ERROR(r->Register<SizeOp>(KernelDefBuilder("Size")));
  COHORT_RETURN_IF_ERROR(RegisterTyped<float>(r));
  COHORT_RETURN_IF_ERROR(RegisterTyped<double>(r));
  COHORT_RETURN_IF_ERROR(RegisterTyped<int32_t>(r));
  COHORT_RETURN_IF_ERROR(RegisterTyped<int64_t>(r));
  COHORT_RETURN_IF_ERROR(RegisterTyped<bool>(r));
  COHORT_RETURN_IF_ERROR(r->Register<ConcatOp>(KernelDefBuilder("ConcatV2")));
  COHORT_RETURN_IF_ERROR(r->Register<SliceOp>(KernelDefBuilder("Slice")));
  COHORT_RETURN_IF_ERROR(
      r->Register<SliceGradOp>(KernelDefBuilder("SliceGrad")));
  COHORT_RETURN_IF_ERROR(r->Register<BroadcastGradientArgsOp>(
      KernelDefBuilder("BroadcastGradientArgs")));
  COHORT_RETURN_IF_ERROR(
      r->Register<ReducedShapeOp>(KernelDefBuilder("ReducedShape")));
  COHORT_RETURN_IF_ERROR(
      r->Register<ConcatOffsetOp>(KernelDefBuilder("ConcatOffset")));
  return absl::OkStatus();
}

namespace ops {

Output Reshape(const Scope& s, Input tensor, Input shape) {
  return BuildOp(s, "Reshape",
                 {tensor.ToOutput(s), shape.ToOutput(s, DT_INT32)})
      .output(0);
}

Output Shape(const Scope& s, Input input, DataType out_type) {
  return BuildOp(s, "Shape", {input.ToOutput(s)}, {{"out_type", out_type}})
      .output(0);
}

Output Size(const Scope& s, Input input) {
  return BuildOp(s, "Size", {input.ToOutput(s)}).output(0);
}

Output Fill(const Scope& s, Input dims, Input value) {
  return BuildOp(s, "Fill", {dims.ToOutput(s, DT_INT32), value.ToOutput(s)})
      .output(0);
}

Output ZerosLike(const Scope& s, Input x) {
  return BuildOp(s, "ZerosLike", {x.ToOutput(s)}).output(0);
}

Output OnesLike(const Scope& s, Input x) {
  return BuildOp(s, "OnesLike", {x.ToOutput(s)}).output(0);
}

Output Concat(const Scope& s, const std::vector<Output>& values, Input axis) {
  // Named "Concat" as before: only the op type is TensorFlow's ConcatV2.
  return BuildOp(s, "ConcatV2", {values, axis.ToOutput(s, DT_INT32)}, {},
                 "Concat")
      .output(0);
}

Output Slice(const Scope& s, Input input, Input begin, Input size) {
  return BuildOp(s, "Slice",
                 {input.ToOutput(s), begin.ToOutput(s, DT_INT32),
                  size.ToOutput(s, DT_INT32)})
      .output(0);
}

BroadcastGradientArgsOutputs BroadcastGradientArgs(const Scope& s, Input s0,
                                                   Input s1) {
  Operation op = BuildOp(s, "BroadcastGradientArgs",
                         {s0.ToOutput(s, DT_INT32), s1.ToOutput(s, DT_INT32)});
  return {op.output(0), op.output(1)};
}

Output ReducedShape(const Scope& s, Input input_shape, Input axes) {
  return BuildOp(
             s, "ReducedShape",
             {input_shape.ToOutput(s, DT_INT32), axes.ToOutput(s, DT_INT32)})
      .output(0);
}

std::vector<Output> ConcatOffset(const Scope& s, Input axis,
                                 const std::vector<Output>& shapes) {
  Operation op =
      BuildOp(s, "ConcatOffset", {axis.ToOutput(s, DT_INT32), shapes});
  std::vector<Output> out;
  if (!op.valid()) return std::vector<Output>(shapes.size());
  for (int i = 0; i < op.num_outputs(); ++i) out.push_back(op.output(i));
  return out;
}

Output SliceGrad(const Scope& s, Input shape, Input begin, Input dy) {
  return BuildOp(s, "SliceGrad",
                 {shape.ToOutput(s, DT_INT32), begin.ToOutput(s, DT_INT32),
                  dy.ToOutput(s)})
      .output(0);
}

}  // namespace ops
}  // namespace cohort
