// Tensor: a typed, shaped, reference-counted n-dimensional array.
//
// Contract:
//  - A Tensor is a (dtype, shape, buffer) triple. Copying a Tensor shares the
//    buffer (no data copy); the buffer is freed when the last Tensor that
//    refers to it goes away. Use DeepCopy() for an independent copy.
//  - Buffers are 64-byte aligned (Eigen's vectorised code and MatMul rely on
//    alignment). Numeric and bool buffers are uninitialised after
//    construction; string and resource elements are default-constructed.
//  - Typed access checks the dtype (COHORT_CHECK: a type mismatch in a kernel
//    is a bug, because kernels are selected by dtype); shape-changing views
//    (shaped, matrix) check the element count.
//  - flat<T>(), matrix<T>(), tensor<T, N>() return Eigen::TensorMap views
//    (row-major) for kernels; data<T>() the raw pointer; scalar<T>() a
//    reference to the single element (the tensor must have one element).
//  - Writes through a shared buffer are visible to every Tensor sharing it:
//    kernels write only to outputs they allocated (or to a variable's tensor
//    under the variable's lock, see resource_mgr.h).
//  - FromProto/AsProto convert to and from TensorProto; numeric and bool
//    contents travel as raw bytes in tensor_content.
//  - Memory: numeric and bool buffers of 1 MiB and more are kept for reuse
//    when freed (at most kLargeBufferCacheBytes in all, the least recently
//    freed going first), because the C library gives such blocks back to
//    the kernel (unmapped, or trimmed off the heap): a training step that
//    allocates its large tensors afresh each time would pay for every page
//    again (a page fault each, and zeroing). A freed buffer of the same size is
//    handed out again.
//  - Budgets (memory_budget.h): Tensor::Allocate and FromProto(proto,
//    budget) charge a MemoryBudget before allocating and fail with
//    ResourceExhausted instead; the buffer gives the bytes back when freed.
//    Kernels reach these through OpKernelContext::allocate_output. The
//    plain constructor is for trusted sizes only (it CHECK-fails when the
//    C library cannot allocate).
//
// Thread safety: a Tensor object is not synchronised (like std::string);
// distinct Tensor objects that share one buffer may be used from different
// threads (the reference count is atomic), as long as writers and readers of
// the elements are ordered by the caller.
#ifndef COHORT_GRAPH_TENSOR_H_
#define COHORT_GRAPH_TENSOR_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "cohort/base/logging.h"
#include "cohort/graph.pb.h"
#include "cohort/graph/memory_budget.h"
#include "cohort/graph/tensor_shape.h"
#include "cohort/graph/types.h"
#include "unsupported/Eigen/CXX11/Tensor"

namespace cohort {

inline constexpr size_t kTensorAlignment = 64;

// Bytes one element takes in a tensor's buffer: DataTypeSize, except that a
// DT_STRING element is a std::string and a DT_RESOURCE element a
// ResourceHandle (their payloads live elsewhere); 0 for a dtype no tensor
// can hold (DT_INVALID, or a value this build does not know).
size_t ElementBytes(DataType dtype);

// Eigen views used by kernels (row-major, int64 indices).
template <typename T, int NDIMS = 1>
struct TTypes {
  using Tensor = Eigen::TensorMap<
      Eigen::Tensor<T, NDIMS, Eigen::RowMajor, Eigen::DenseIndex>>;
  using ConstTensor = Eigen::TensorMap<
      Eigen::Tensor<const T, NDIMS, Eigen::RowMajor, Eigen::DenseIndex>>;
  using Flat =
      Eigen::TensorMap<Eigen::Tensor<T, 1, Eigen::RowMajor, Eigen::DenseIndex>>;
  using ConstFlat = Eigen::TensorMap<
      Eigen::Tensor<const T, 1, Eigen::RowMajor, Eigen::DenseIndex>>;
  using Matrix =
      Eigen::TensorMap<Eigen::Tensor<T, 2, Eigen::RowMajor, Eigen::DenseIndex>>;
  using ConstMatrix = Eigen::TensorMap<
      Eigen::Tensor<const T, 2, Eigen::RowMajor, Eigen::DenseIndex>>;
};

// A reference-counted, 64-byte aligned block of elements of one dtype.
// Internal to Tensor; exposed for zero-copy transports (runtime/).
class TensorBuffer {
 public:
  // The most memory that freed large buffers may hold (file comment).
  static constexpr size_t kLargeBufferCacheBytes = size_t{512} << 20;
  // Freed large buffers held now (tests).
  static size_t CachedLargeBufferBytes();

  // Allocates room for `num_elements` of `dtype`, constructing string and
  // resource elements.
  static TensorBuffer* Allocate(DataType dtype, int64_t num_elements);
  // Like Allocate, after charging `budget` (null: none) the buffer's bytes
  // (released when the buffer is freed). InvalidArgument when the byte
  // count overflows; ResourceExhausted naming `what` when over the budget
  // or when the C library has no memory.
  static absl::StatusOr<TensorBuffer*> TryAllocate(DataType dtype,
                                                   int64_t num_elements,
                                                   MemoryBudget* budget,
                                                   absl::string_view what);

  void Ref() { refs_.fetch_add(1, std::memory_order_relaxed); }
  void Unref();
  bool RefCountIsOne() const {
    return refs_.load(std::memory_order_acquire) == 1;
  }
  void* data() const { return data_; }
  size_t size_bytes() const { return size_bytes_; }
  // The budget charged for this buffer, or null.
  MemoryBudget* budget() const { return budget_; }

 private:
  friend class Tensor;  // DeepCopy charges the copy to budget_.
  TensorBuffer(DataType dtype, int64_t n, void* data, size_t bytes)
      : dtype_(dtype), num_elements_(n), data_(data), size_bytes_(bytes) {}
  ~TensorBuffer();

  std::atomic<int32_t> refs_{1};
  DataType dtype_;
  int64_t num_elements_;
  void* data_;
  size_t size_bytes_;
  // Referenced and charged AllocationBytes(size_bytes_) while alive; null
  // for unbudgeted buffers.
  MemoryBudget* budget_ = nullptr;
};

class Tensor {
 public:
  // An uninitialised tensor: dtype DT_INVALID, shape scalar, no buffer.
  Tensor() = default;
  // Allocates a buffer for `shape` elements of `dtype` (trusted sizes only;
  // see the file comment).
  Tensor(DataType dtype, const TensorShape& shape);
  // Allocates a buffer charged to `budget` (null: none); see
  // TensorBuffer::TryAllocate for the errors. `what` names the tensor in
  // them ("output 0").
  static absl::StatusOr<Tensor> Allocate(DataType dtype,
                                         const TensorShape& shape,
                                         MemoryBudget* budget,
                                         absl::string_view what);
  // Scalars: Tensor(3.0f), Tensor(int64_t{7}), Tensor(std::string("a")).
  explicit Tensor(float v) : Tensor(DT_FLOAT, TensorShape()) {
    scalar<float>() = v;
  }
  explicit Tensor(double v) : Tensor(DT_DOUBLE, TensorShape()) {
    scalar<double>() = v;
  }
  explicit Tensor(int32_t v) : Tensor(DT_INT32, TensorShape()) {
    scalar<int32_t>() = v;
  }
  explicit Tensor(int64_t v) : Tensor(DT_INT64, TensorShape()) {
    scalar<int64_t>() = v;
  }
  explicit Tensor(bool v) : Tensor(DT_BOOL, TensorShape()) {
    scalar<bool>() = v;
  }
  explicit Tensor(std::string v) : Tensor(DT_STRING, TensorShape()) {
    scalar<std::string>() = std::move(v);
  }
  explicit Tensor(const char* v) : Tensor(std::string(v)) {}
  explicit Tensor(ResourceHandle v) : Tensor(DT_RESOURCE, TensorShape()) {
    scalar<ResourceHandle>() = std::move(v);
  }

  // Builds a tensor of `shape` from `values` (row-major);
  // InvalidArgument when the counts differ.
  template <typename T>
  static absl::StatusOr<Tensor> FromVector(absl::Span<const T> values,
                                           const TensorShape& shape);
  // A 1-D tensor holding `values`.
  template <typename T>
  static Tensor Vec(std::initializer_list<T> values);
  // A tensor of `shape` whose elements are all `value`.
  template <typename T>
  static Tensor Filled(const TensorShape& shape, T value);

  ~Tensor() {
    if (buf_ != nullptr) buf_->Unref();
  }
  Tensor(const Tensor& o) : dtype_(o.dtype_), shape_(o.shape_), buf_(o.buf_) {
    if (buf_ != nullptr) buf_->Ref();
  }
  Tensor(Tensor&& o) noexcept
      : dtype_(o.dtype_), shape_(std::move(o.shape_)), buf_(o.buf_) {
    o.buf_ = nullptr;
    o.dtype_ = DT_INVALID;
  }
  Tensor& operator=(const Tensor& o) {
    if (this != &o) {
      if (o.buf_ != nullptr) o.buf_->Ref();
      if (buf_ != nullptr) buf_->Unref();
      dtype_ = o.dtype_;
      shape_ = o.shape_;
      buf_ = o.buf_;
    }
    return *this;
  }
  Tensor& operator=(Tensor&& o) noexcept {
    if (this != &o) {
      if (buf_ != nullptr) buf_->Unref();
      dtype_ = o.dtype_;
      shape_ = std::move(o.shape_);
      buf_ = o.buf_;
      o.buf_ = nullptr;
      o.dtype_ = DT_INVALID;
    }
    return *this;
  }

  // True once the tensor has a dtype and a buffer.
  bool IsInitialized() const { return buf_ != nullptr; }
  DataType dtype() const { return dtype_; }
  const TensorShape& shape() const { return shape_; }
  int dims() const { return shape_.dims(); }
  int64_t dim_size(int i) const { return shape_.dim_size(i); }
  int64_t NumElements() const { return shape_.num_elements(); }
  size_t TotalBytes() const;
  // True when this is the only Tensor referring to its buffer (so a kernel
  // may overwrite it in place).
  bool RefCountIsOne() const {
    return buf_ != nullptr && buf_->RefCountIsOne();
  }
  // True when both share one buffer.
  bool SharesBufferWith(const Tensor& o) const {
    return buf_ != nullptr && buf_ == o.buf_;
  }

  // A tensor sharing this one's buffer with another shape of the same
  // element count; InvalidArgument otherwise.
  absl::StatusOr<Tensor> Reshaped(const TensorShape& shape) const;
  // An independent copy of the elements, charged (unchecked) to the same
  // budget as this tensor's buffer.
  Tensor DeepCopy() const;

  // --- Typed access (dtype must match T; CHECK-fails otherwise) ------------
  template <typename T>
  T* data() {
    CheckType<T>();
    return static_cast<T*>(raw_data());
  }
  template <typename T>
  const T* data() const {
    CheckType<T>();
    return static_cast<const T*>(raw_data());
  }
  template <typename T>
  absl::Span<T> span() {
    return absl::Span<T>(data<T>(), NumElements());
  }
  template <typename T>
  absl::Span<const T> span() const {
    return absl::Span<const T>(data<T>(), NumElements());
  }
  template <typename T>
  T& scalar() {
    COHORT_CHECK(NumElements() == 1)
        << "scalar() on shape " << shape_.DebugString();
    return *data<T>();
  }
  template <typename T>
  const T& scalar() const {
    COHORT_CHECK(NumElements() == 1)
        << "scalar() on shape " << shape_.DebugString();
    return *data<T>();
  }
  template <typename T>
  typename TTypes<T>::Flat flat() {
    return typename TTypes<T>::Flat(data<T>(), NumElements());
  }
  template <typename T>
  typename TTypes<T>::ConstFlat flat() const {
    return typename TTypes<T>::ConstFlat(data<T>(), NumElements());
  }
  // Requires dims() == NDIMS.
  template <typename T, int NDIMS>
  typename TTypes<T, NDIMS>::Tensor tensor() {
    return typename TTypes<T, NDIMS>::Tensor(data<T>(), EigenDims<NDIMS>());
  }
  template <typename T, int NDIMS>
  typename TTypes<T, NDIMS>::ConstTensor tensor() const {
    return
        typename TTypes<T, NDIMS>::ConstTensor(data<T>(), EigenDims<NDIMS>());
  }
  template <typename T>
  typename TTypes<T>::Matrix matrix() {
    return tensor<T, 2>();
  }
  template <typename T>
  typename TTypes<T>::ConstMatrix matrix() const {
    return tensor<T, 2>();
  }
  // A view of the elements with another shape of the same element count
  // (e.g. for broadcasting: shaped<float, 3>({a, b, c})).
  template <typename T, int NDIMS>
  typename TTypes<T, NDIMS>::Tensor shaped(absl::Span<const int64_t> dims) {
    return
        typename TTypes<T, NDIMS>::Tensor(data<T>(), ShapedDims<NDIMS>(dims));
  }
  template <typename T, int NDIMS>
  typename TTypes<T, NDIMS>::ConstTensor shaped(
      absl::Span<const int64_t> dims) const {
    return typename TTypes<T, NDIMS>::ConstTensor(data<T>(),
                                                  ShapedDims<NDIMS>(dims));
  }

  // Raw bytes (numeric and bool only; nullptr for an empty tensor).
  void* raw_data() const { return buf_ == nullptr ? nullptr : buf_->data(); }
  TensorBuffer* buffer() const { return buf_; }

  // --- Proto conversion ---------------------------------------------------
  // InvalidArgument (naming the problem) for an unknown dtype, a bad shape,
  // or contents whose size does not match the shape.
  static absl::StatusOr<Tensor> FromProto(const TensorProto& proto);
  // The same, charging `budget` (null: none) before allocating:
  // ResourceExhausted naming `what` when over it.
  static absl::StatusOr<Tensor> FromProto(const TensorProto& proto,
                                          MemoryBudget* budget,
                                          absl::string_view what);
  // The bytes FromProto would allocate for `proto` (elements x element
  // size; strings count their headers only), or InvalidArgument for a bad
  // dtype or shape. Allocates nothing.
  static absl::StatusOr<int64_t> DeclaredBytes(const TensorProto& proto);
  void AsProto(TensorProto* proto) const;

  // "float [2,3] {1, 2, 3, 4, 5, 6}" with at most `max_entries` values.
  std::string DebugString(int max_entries = 10) const;
  // Elementwise equality of dtype, shape and values (for tests).
  bool Equals(const Tensor& o) const;

 private:
  template <typename T>
  void CheckType() const {
    COHORT_CHECK(DataTypeToEnum<T>::value == dtype_)
        << "tensor has dtype " << DataTypeName(dtype_) << ", accessed as "
        << DataTypeName(DataTypeToEnum<T>::value);
  }
  template <int NDIMS>
  Eigen::DSizes<Eigen::DenseIndex, NDIMS> EigenDims() const {
    COHORT_CHECK(shape_.dims() == NDIMS)
        << "tensor<" << NDIMS << ">() on shape " << shape_.DebugString();
    Eigen::DSizes<Eigen::DenseIndex, NDIMS> d;
    for (int i = 0; i < NDIMS; ++i) d[i] = shape_.dim_size(i);
    return d;
  }
  template <int NDIMS>
  Eigen::DSizes<Eigen::DenseIndex, NDIMS> ShapedDims(
      absl::Span<const int64_t> dims) const {
    COHORT_CHECK(static_cast<int>(dims.size()) == NDIMS);
    Eigen::DSizes<Eigen::DenseIndex, NDIMS> d;
    int64_t n = 1;
    for (int i = 0; i < NDIMS; ++i) {
      d[i] = dims[i];
      n *= dims[i];
    }
    COHORT_CHECK(n == NumElements())
        << "shaped() to " << n << " elements from " << shape_.DebugString();
    return d;
  }

  DataType dtype_ = DT_INVALID;
  TensorShape shape_;
  TensorBuffer* buf_ = nullptr;
};

template <typename T>
absl::StatusOr<Tensor> Tensor::FromVector(absl::Span<const T> values,
                                          const TensorShape& shape) {
  if (static_cast<int64_t>(values.size()) != shape.num_elements()) {
    return absl::InvalidArgumentError(
        "Tensor::FromVector: " + std::to_string(values.size()) +
        " values for shape " + shape.DebugString() + " which needs " +
        std::to_string(shape.num_elements()));
  }
  Tensor t(DataTypeToEnum<T>::value, shape);
  T* d = t.data<T>();
  for (size_t i = 0; i < values.size(); ++i) d[i] = values[i];
  return t;
}

template <typename T>
Tensor Tensor::Vec(std::initializer_list<T> values) {
  Tensor t(DataTypeToEnum<T>::value,
           TensorShape({static_cast<int64_t>(values.size())}));
  T* d = t.data<T>();
  for (const T& v : values) *d++ = v;
  return t;
}

template <typename T>
Tensor Tensor::Filled(const TensorShape& shape, T value) {
  Tensor t(DataTypeToEnum<T>::value, shape);
  T* d = t.data<T>();
  for (int64_t i = 0; i < t.NumElements(); ++i) d[i] = value;
  return t;
}

}  // namespace cohort

#endif  // COHORT_GRAPH_TENSOR_H_
