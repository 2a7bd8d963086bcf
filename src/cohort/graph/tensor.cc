#include "cohort/graph/tensor.h"

#include <sanitizer/asan_interface.h>
#include <sys/mman.h>

#include <cstdlib>
#include <cstring>
#include <deque>
#include <iterator>
#include <limits>
#include <new>
#include <string_view>
#include <vector>

#include "absl/base/config.h"
#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "cohort/base/status.h"

namespace cohort {
namespace {

template <typename T>
void ConstructElements(void* data, int64_t n) {
  T* p = static_cast<T*>(data);
  for (int64_t i = 0; i < n; ++i) new (p + i) T();
}

template <typename T>
void DestroyElements(void* data, int64_t n) {
  T* p = static_cast<T*>(data);
  for (int64_t i = 0; i < n; ++i) p[i].~T();
}

// The most a TensorProto may declare by broadcasting one value (its other
// forms carry every byte they declare).
constexpr size_t kMaxBroadcastProtoBytes = size_t{1} << 30;

// Blocks from 1 MiB up are kept for reuse: glibc hands such blocks back to
// the kernel when freed (as mmap chunks, or by trimming the heap's top), and
// a training step that allocates the same activations, gradients and
// received tensors every step then pays for zeroed fresh pages each time
// (page faults and clearing were ~5-15% of a parameter-server step; reuse
// took the 1- and 2-worker PS job from ~6,500 / 8,650 to ~7,100 / 9,200
// examples/s in same-run pairs).
constexpr size_t kLargeBufferBytes = size_t{1} << 20;

// Freed large buffers, by exact allocation size (a step allocates the same
// shapes each time). Bounded by TensorBuffer::kLargeBufferCacheBytes.
class LargeBufferCache {
 public:
  static LargeBufferCache& Get() {
    static auto* cache = new LargeBufferCache;  // Never destroyed.
    return *cache;
  }
  // A cached block of exactly `bytes`, or null.
  void* Take(size_t bytes) {
    absl::MutexLock lock(&mu_);
    for (auto it = blocks_.rbegin(); it != blocks_.rend(); ++it) {
      if (it->bytes != bytes) continue;
      void* data = it->data;
      cached_bytes_ -= bytes;
      blocks_.erase(std::next(it).base());
      ASAN_UNPOISON_MEMORY_REGION(data, bytes);
      return data;
    }
    return nullptr;
  }
  // Keeps `data` for reuse, freeing the oldest blocks to stay in bounds.
  void Put(void* data, size_t bytes) {
    if (bytes > TensorBuffer::kLargeBufferCacheBytes) {
      std::free(data);
      return;
    }
    std::vector<Block> evicted;
    {
      absl::MutexLock lock(&mu_);
      while (cached_bytes_ + bytes > TensorBuffer::kLargeBufferCacheBytes) {
        evicted.push_back(blocks_.front());
        cached_bytes_ -= blocks_.front().bytes;
        blocks_.pop_front();
      }
      // A use after free of a cached block stays an ASan report.
      ASAN_POISON_MEMORY_REGION(data, bytes);
      blocks_.push_back(Block{data, bytes});
      cached_bytes_ += bytes;
    }
    // munmap outside the lock.
    for (const Block& b : evicted) {
      ASAN_UNPOISON_MEMORY_REGION(b.data, b.bytes);
      std::free(b.data);
    }
  }
  size_t cached_bytes() {
    absl::MutexLock lock(&mu_);
    return cached_bytes_;
  }

 private:
  struct Block {
    void* data;
    size_t bytes;
  };
  absl::Mutex mu_;
  std::deque<Block> blocks_ ABSL_GUARDED_BY(mu_);  // Oldest first.
  size_t cached_bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

bool CachesBuffer(DataType dtype, size_t alloc_bytes) {
#ifdef ABSL_HAVE_ADDRESS_SANITIZER
  // ASan builds free every block: its quarantine then catches a use after
  // free, which a reissued cached block would hide.
  return false;
#else
  return alloc_bytes >= kLargeBufferBytes && dtype != DT_STRING &&
         dtype != DT_RESOURCE;
#endif
}

// Blocks from 2 MiB up start on a 2 MiB boundary, and their whole 2 MiB
// pages are advised MADV_HUGEPAGE (the kernel's default THP mode,
// "madvise", gives huge pages only where asked). A training step streams
// megabytes of weights, gradients and optimizer slots through SGEMM's
// packing and the update loops; on 4 KiB pages that is a TLB miss every
// 4 KiB. One task of `cohort bench training` (4 MiB layers) went from
// 26,319 to 28,927 examples/s (medians of 12 repetitions each, runs
// interleaved: bench/training/hugepages-2026-11-27-{off,on}.jsonl). Sizes
// are not rounded up: a tail short of 2 MiB stays on small pages, and the
// budgets are charged the 64-byte rounding as before. The alignment costs
// address space (up to 2 MiB of padding per block), not charged memory.
// 2 MiB is x86-64's huge page (and arm64's with 4 KiB pages; elsewhere the
// advice is harmless). COHORT_HUGE_PAGES=0 turns off the alignment and the
// advice (to compare, or where THP misbehaves).
constexpr size_t kHugePageBytes = size_t{2} << 20;

bool HugePagesWanted() {
  static const bool wanted = [] {
    const char* v = std::getenv("COHORT_HUGE_PAGES");
    return v == nullptr || std::string_view(v) != "0";
  }();
  return wanted;
}

// The bytes a block holds and budgets are charged: a multiple of 64, never
// 0.
size_t AllocationBytes(size_t bytes) {
  const size_t alloc =
      (bytes + kTensorAlignment - 1) / kTensorAlignment * kTensorAlignment;
  return alloc == 0 ? kTensorAlignment : alloc;
}

// A fresh block of `alloc` (AllocationBytes) bytes, its whole 2 MiB pages
// advised onto huge pages; null when the C library has no memory.
void* AllocateBlock(size_t alloc) {
  if (alloc < kHugePageBytes || !HugePagesWanted()) {
    return std::aligned_alloc(kTensorAlignment, alloc);
  }
  // posix_memalign, not aligned_alloc: C11's aligned_alloc wants the size
  // to be a multiple of the alignment, and sanitizers enforce it.
  void* data = nullptr;
  if (posix_memalign(&data, kHugePageBytes, alloc) != 0) return nullptr;
#ifdef MADV_HUGEPAGE
  // Advice only: without THP, or with another page size, the block stays
  // on small pages and works the same.
  (void)madvise(data, alloc / kHugePageBytes * kHugePageBytes, MADV_HUGEPAGE);
#endif
  return data;
}

}  // namespace

size_t ElementBytes(DataType dtype) {
  switch (dtype) {
    case DT_STRING:
      return sizeof(std::string);
    case DT_RESOURCE:
      return sizeof(ResourceHandle);
    default:
      return DataTypeSize(dtype);
  }
}

absl::StatusOr<TensorBuffer*> TensorBuffer::TryAllocate(
    DataType dtype, int64_t num_elements, MemoryBudget* budget,
    absl::string_view what) {
  const size_t elem = ElementBytes(dtype);
  if (elem == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": cannot allocate a tensor of dtype ", DataTypeName(dtype)));
  }
  // Byte counts stay below 2^63 so budgets can count them in int64_t.
  if (num_elements < 0 ||
      static_cast<uint64_t>(num_elements) >
          (static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) -
           kTensorAlignment) /
              elem) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": ", num_elements, " elements of dtype ",
                     DataTypeName(dtype), " overflow the byte count"));
  }
  const size_t bytes = elem * static_cast<size_t>(num_elements);
  const size_t alloc = AllocationBytes(bytes);
  // The budget is charged before anything is allocated: a request over it
  // costs nothing but the error.
  if (budget != nullptr) {
    COHORT_RETURN_IF_ERROR(budget->Charge(static_cast<int64_t>(alloc), what));
  }
  void* data = nullptr;
  if (CachesBuffer(dtype, alloc)) data = LargeBufferCache::Get().Take(alloc);
  if (data == nullptr) data = AllocateBlock(alloc);
  if (data == nullptr) {
    if (budget != nullptr) budget->Release(static_cast<int64_t>(alloc));
    return absl::ResourceExhaustedError(
        absl::StrCat(what, " needs ", alloc,
                     " bytes and the C library could not allocate them"));
  }
  if (dtype == DT_STRING) ConstructElements<std::string>(data, num_elements);
  if (dtype == DT_RESOURCE)
    ConstructElements<ResourceHandle>(data, num_elements);
  auto* buf = new TensorBuffer(dtype, num_elements, data, bytes);
  if (budget != nullptr) {
    budget->Ref();
    buf->budget_ = budget;
  }
  return buf;
}

TensorBuffer* TensorBuffer::Allocate(DataType dtype, int64_t num_elements) {
  auto buf = TryAllocate(dtype, num_elements, nullptr, "a tensor");
  COHORT_CHECK(buf.ok()) << buf.status();
  return *buf;
}

void TensorBuffer::Unref() {
  if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
}

TensorBuffer::~TensorBuffer() {
  if (dtype_ == DT_STRING) DestroyElements<std::string>(data_, num_elements_);
  if (dtype_ == DT_RESOURCE)
    DestroyElements<ResourceHandle>(data_, num_elements_);
  const size_t alloc = AllocationBytes(size_bytes_);
  if (CachesBuffer(dtype_, alloc)) {
    LargeBufferCache::Get().Put(data_, alloc);
  } else {
    std::free(data_);
  }
  if (budget_ != nullptr) {
    budget_->Release(static_cast<int64_t>(alloc));
    budget_->Unref();
  }
}

size_t TensorBuffer::CachedLargeBufferBytes() {
  return LargeBufferCache::Get().cached_bytes();
}

Tensor::Tensor(DataType dtype, const TensorShape& shape)
    : dtype_(dtype),
      shape_(shape),
      buf_(TensorBuffer::Allocate(dtype, shape.num_elements())) {}

absl::StatusOr<Tensor> Tensor::Allocate(DataType dtype,
                                        const TensorShape& shape,
                                        MemoryBudget* budget,
                                        absl::string_view what) {
  COHORT_ASSIGN_OR_RETURN(
      TensorBuffer * buf,
      TensorBuffer::TryAllocate(dtype, shape.num_elements(), budget, what));
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = shape;
  t.buf_ = buf;
  return t;
}

size_t Tensor::TotalBytes() const {
  return ElementBytes(dtype_) * static_cast<size_t>(NumElements());
}

absl::StatusOr<Tensor> Tensor::Reshaped(const TensorShape& shape) const {
  if (shape.num_elements() != NumElements()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot reshape a tensor of shape ", shape_.DebugString(),
                     " (", NumElements(), " elements) to ", shape.DebugString(),
                     " (", shape.num_elements(), " elements)"));
  }
  Tensor t(*this);
  t.shape_ = shape;
  return t;
}

Tensor Tensor::DeepCopy() const {
  if (!IsInitialized()) return Tensor();
  Tensor t(dtype_, shape_);
  // The copy lives as long as the original would have (a variable's value
  // copied before an update), so it counts against the same budget; it was
  // already allowed once, so it is not refused.
  if (MemoryBudget* budget = buf_->budget_; budget != nullptr) {
    budget->ForceCharge(
        static_cast<int64_t>(AllocationBytes(t.buf_->size_bytes_)));
    budget->Ref();
    t.buf_->budget_ = budget;
  }
  if (DataTypeIsPod(dtype_)) {
    if (TotalBytes() > 0) std::memcpy(t.raw_data(), raw_data(), TotalBytes());
  } else if (dtype_ == DT_STRING) {
    auto src = span<std::string>();
    auto dst = t.span<std::string>();
    for (size_t i = 0; i < src.size(); ++i) dst[i] = src[i];
  } else if (dtype_ == DT_RESOURCE) {
    auto src = span<ResourceHandle>();
    auto dst = t.span<ResourceHandle>();
    for (size_t i = 0; i < src.size(); ++i) dst[i] = src[i];
  }
  return t;
}

namespace {

template <typename T, typename Field>
absl::Status FillFromField(const Field& field, Tensor* t, const char* name) {
  int64_t n = t->NumElements();
  T* d = t->data<T>();
  if (field.size() == n) {
    for (int64_t i = 0; i < n; ++i) d[i] = static_cast<T>(field.Get(i));
  } else if (field.size() == 1) {
    for (int64_t i = 0; i < n; ++i) d[i] = static_cast<T>(field.Get(0));
  } else if (field.size() == 0) {
    for (int64_t i = 0; i < n; ++i) d[i] = T();
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "TensorProto has ", field.size(), " values in ", name, " for shape ",
        t->shape().DebugString(), " which needs ", n, " (or 1 to broadcast)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Tensor> Tensor::FromProto(const TensorProto& proto) {
  return FromProto(proto, nullptr, "TensorProto");
}

absl::StatusOr<int64_t> Tensor::DeclaredBytes(const TensorProto& proto) {
  const DataType dtype = proto.dtype();
  if (dtype == DT_INVALID ||
      (!DataTypeIsPod(dtype) && dtype != DT_STRING && dtype != DT_RESOURCE)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "TensorProto has unsupported dtype ", DataTypeName(dtype)));
  }
  auto shape = TensorShape::FromProto(proto.tensor_shape());
  if (!shape.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("TensorProto shape: ", shape.status().message()));
  }
  const int64_t n = shape->num_elements();
  const int64_t elem = static_cast<int64_t>(ElementBytes(dtype));
  if (n > std::numeric_limits<int64_t>::max() / elem) {
    return absl::InvalidArgumentError(absl::StrCat(
        "TensorProto of dtype ", DataTypeName(dtype), " and shape ",
        shape->DebugString(), " is too large to address"));
  }
  return n * elem;
}

absl::StatusOr<Tensor> Tensor::FromProto(const TensorProto& proto,
                                         MemoryBudget* budget,
                                         absl::string_view what) {
  DataType dtype = proto.dtype();
  if (dtype == DT_INVALID ||
      (!DataTypeIsPod(dtype) && dtype != DT_STRING && dtype != DT_RESOURCE)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "TensorProto has unsupported dtype ", DataTypeName(dtype)));
  }
  auto shape_or = TensorShape::FromProto(proto.tensor_shape());
  if (!shape_or.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("TensorProto shape: ", shape_or.status().message()));
  }
  // Everything is checked against the proto's own bytes before anything is
  // allocated: a proto read from a file or the wire must not make this side
  // allocate more than what it carries (plus one broadcast value, capped).
  const int64_t n = shape_or->num_elements();
  const size_t elem = ElementBytes(dtype);
  if (static_cast<uint64_t>(n) > std::numeric_limits<size_t>::max() / elem) {
    return absl::InvalidArgumentError(absl::StrCat(
        "TensorProto of dtype ", DataTypeName(dtype), " and shape ",
        shape_or->DebugString(), " is too large to address"));
  }
  const size_t bytes = elem * static_cast<size_t>(n);
  if (DataTypeIsPod(dtype) && !proto.tensor_content().empty()) {
    if (proto.tensor_content().size() != bytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "TensorProto of dtype ", DataTypeName(dtype), " and shape ",
          shape_or->DebugString(), " needs ", bytes,
          " bytes of tensor_content, has ", proto.tensor_content().size()));
    }
  } else {
    const int64_t values = proto.float_val_size() + proto.double_val_size() +
                           proto.int_val_size() + proto.int64_val_size() +
                           proto.bool_val_size() + proto.string_val_size() +
                           proto.resource_val_size();
    // n values, or at most one value broadcast to the shape (TensorFlow's
    // convention): the broadcast case is the only one where a few bytes
    // declare a large tensor, so it is capped.
    if (values != n && values > 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("TensorProto of dtype ", DataTypeName(dtype),
                       " and shape ", shape_or->DebugString(), " has ", values,
                       " values; needs ", n, " (or 1 to broadcast)"));
    }
    if (values != n && bytes > kMaxBroadcastProtoBytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "TensorProto of dtype ", DataTypeName(dtype), " and shape ",
          shape_or->DebugString(), " broadcasts ", values, " value(s) to ",
          bytes, " bytes, over the cap of ", kMaxBroadcastProtoBytes,
          "; store the values instead"));
    }
  }
  COHORT_ASSIGN_OR_RETURN(Tensor t, Allocate(dtype, *shape_or, budget, what));
  if (DataTypeIsPod(dtype) && !proto.tensor_content().empty()) {
    std::memcpy(t.raw_data(), proto.tensor_content().data(), t.TotalBytes());
    if (dtype == DT_BOOL) {
      // Normalise so every byte is a valid bool.
      uint8_t* b = static_cast<uint8_t*>(t.raw_data());
      for (int64_t i = 0; i < n; ++i) b[i] = b[i] != 0;
    }
    return t;
  }
  switch (dtype) {
    case DT_FLOAT:
      COHORT_RETURN_IF_ERROR(
          FillFromField<float>(proto.float_val(), &t, "float_val"));
      break;
    case DT_DOUBLE:
      COHORT_RETURN_IF_ERROR(
          FillFromField<double>(proto.double_val(), &t, "double_val"));
      break;
    case DT_INT32:
      COHORT_RETURN_IF_ERROR(
          FillFromField<int32_t>(proto.int_val(), &t, "int_val"));
      break;
    case DT_INT64:
      COHORT_RETURN_IF_ERROR(
          FillFromField<int64_t>(proto.int64_val(), &t, "int64_val"));
      break;
    case DT_BOOL:
      COHORT_RETURN_IF_ERROR(
          FillFromField<bool>(proto.bool_val(), &t, "bool_val"));
      break;
    case DT_STRING:
      COHORT_RETURN_IF_ERROR(
          FillFromField<std::string>(proto.string_val(), &t, "string_val"));
      break;
    case DT_RESOURCE: {
      const auto& f = proto.resource_val();
      if (f.size() != n && !(f.size() == 1 || f.empty())) {
        return absl::InvalidArgumentError(
            absl::StrCat("TensorProto has ", f.size(),
                         " resource_val for shape ", t.shape().DebugString()));
      }
      auto d = t.span<ResourceHandle>();
      for (int64_t i = 0; i < n && !f.empty(); ++i) {
        const auto& p = f.Get(f.size() == 1 ? 0 : i);
        d[i] =
            ResourceHandle{p.device(), p.container(), p.name(), p.type_name()};
      }
      break;
    }
    default:
      break;
  }
  return t;
}

void Tensor::AsProto(TensorProto* proto) const {
  proto->Clear();
  proto->set_dtype(dtype_);
  shape_.AsProto(proto->mutable_tensor_shape());
  if (!IsInitialized()) return;
  if (DataTypeIsPod(dtype_)) {
    proto->set_tensor_content(static_cast<const char*>(raw_data()),
                              TotalBytes());
  } else if (dtype_ == DT_STRING) {
    for (const auto& s : span<std::string>()) proto->add_string_val(s);
  } else if (dtype_ == DT_RESOURCE) {
    for (const auto& h : span<ResourceHandle>()) {
      auto* p = proto->add_resource_val();
      p->set_device(h.device);
      p->set_container(h.container);
      p->set_name(h.name);
      p->set_type_name(h.type_name);
    }
  }
}

std::string Tensor::DebugString(int max_entries) const {
  std::string out =
      absl::StrCat(DataTypeName(dtype_), " ", shape_.DebugString());
  if (!IsInitialized()) return out + " <uninitialized>";
  out += " {";
  int64_t n = std::min<int64_t>(NumElements(), max_entries);
  for (int64_t i = 0; i < n; ++i) {
    if (i > 0) out += ", ";
    switch (dtype_) {
      case DT_FLOAT:
        absl::StrAppend(&out, data<float>()[i]);
        break;
      case DT_DOUBLE:
        absl::StrAppend(&out, data<double>()[i]);
        break;
      case DT_INT32:
        absl::StrAppend(&out, data<int32_t>()[i]);
        break;
      case DT_INT64:
        absl::StrAppend(&out, data<int64_t>()[i]);
        break;
      case DT_BOOL:
        absl::StrAppend(&out, data<bool>()[i] ? "true" : "false");
        break;
      case DT_STRING:
        absl::StrAppend(&out, "\"", data<std::string>()[i], "\"");
        break;
      case DT_RESOURCE:
        absl::StrAppend(&out, data<ResourceHandle>()[i].DebugString());
        break;
      default:
        break;
    }
  }
  if (NumElements() > n) out += ", ...";
  return out + "}";
}

bool Tensor::Equals(const Tensor& o) const {
  if (dtype_ != o.dtype_ || shape_ != o.shape_) return false;
  if (IsInitialized() != o.IsInitialized()) return false;
  if (!IsInitialized()) return true;
  if (DataTypeIsPod(dtype_)) {
    return TotalBytes() == 0 ||
           std::memcmp(raw_data(), o.raw_data(), TotalBytes()) == 0;
  }
  if (dtype_ == DT_STRING) {
    auto a = span<std::string>(), b = o.span<std::string>();
    return std::equal(a.begin(), a.end(), b.begin());
  }
  auto a = span<ResourceHandle>(), b = o.span<ResourceHandle>();
  return std::equal(a.begin(), a.end(), b.begin());
}

}  // namespace cohort
