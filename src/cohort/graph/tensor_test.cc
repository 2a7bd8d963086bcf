#include "cohort/graph/tensor.h"

#include <sys/mman.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "absl/base/config.h"
#include "cohort/graph/memory_budget.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort {
namespace {

TEST(TensorShapeTest, BasicsAndErrors) {
  TensorShape s({2, 3});
  EXPECT_EQ(s.dims(), 2);
  EXPECT_EQ(s.num_elements(), 6);
  EXPECT_EQ(s.DebugString(), "[2,3]");
  EXPECT_EQ(TensorShape().num_elements(), 1);
  EXPECT_EQ(TensorShape::Make({2, -1}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(TensorShape::Make({int64_t{1} << 40, int64_t{1} << 40}).ok());
  s.AddDim(4);
  EXPECT_EQ(s.num_elements(), 24);
  s.RemoveDim(0);
  EXPECT_EQ(s.DebugString(), "[3,4]");
}

TEST(PartialTensorShapeTest, CompatibilityAndMerge) {
  PartialTensorShape p({-1, 3});
  EXPECT_EQ(p.DebugString(), "[?,3]");
  EXPECT_TRUE(p.IsCompatibleWith(TensorShape({5, 3})));
  EXPECT_FALSE(p.IsCompatibleWith(TensorShape({5, 4})));
  EXPECT_FALSE(p.IsCompatibleWith(TensorShape({3})));
  EXPECT_TRUE(PartialTensorShape().IsCompatibleWith(TensorShape({1, 2, 3})));
  auto m = p.MergeWith(PartialTensorShape({7, -1}));
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->DebugString(), "[7,3]");
  EXPECT_FALSE(p.MergeWith(PartialTensorShape({7, 4})).ok());
  TensorShapeProto proto;
  PartialTensorShape().AsProto(&proto);
  EXPECT_TRUE(PartialTensorShape::FromProto(proto).unknown_rank());
}

TEST(TensorTest, BufferIsAlignedAndShared) {
  Tensor a(DT_FLOAT, TensorShape({3, 5}));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a.raw_data()) % kTensorAlignment, 0u);
  EXPECT_TRUE(a.RefCountIsOne());
  Tensor b = a;
  EXPECT_TRUE(b.SharesBufferWith(a));
  EXPECT_FALSE(a.RefCountIsOne());
  a.flat<float>().setConstant(2.f);
  EXPECT_EQ(b.data<float>()[14], 2.f);
  Tensor c = a.DeepCopy();
  EXPECT_FALSE(c.SharesBufferWith(a));
  c.data<float>()[0] = 5.f;
  EXPECT_EQ(a.data<float>()[0], 2.f);
  Tensor moved = std::move(b);
  EXPECT_FALSE(b.IsInitialized());  // NOLINT(bugprone-use-after-move)
  EXPECT_TRUE(moved.SharesBufferWith(a));
}

TEST(TensorTest, TypedViews) {
  Tensor m(DT_INT32, TensorShape({2, 3}));
  auto mm = m.matrix<int32_t>();
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j) mm(i, j) = i * 10 + j;
  EXPECT_EQ(m.flat<int32_t>()(4), 11);
  auto r = m.Reshaped(TensorShape({3, 2}));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->matrix<int32_t>()(2, 1), 12);
  EXPECT_TRUE(r->SharesBufferWith(m));
  EXPECT_FALSE(m.Reshaped(TensorShape({4})).ok());
  EXPECT_EQ((m.shaped<int32_t, 3>({1, 2, 3})(0, 1, 2)), 12);
  EXPECT_EQ(Tensor(7.5).scalar<double>(), 7.5);
  EXPECT_EQ(Tensor(int64_t{9}).dtype(), DT_INT64);
}

TEST(TensorTest, TypeMismatchIsABug) {
  Tensor t(1.f);
  EXPECT_DEATH(t.data<double>(), "accessed as double");
}

TEST(TensorTest, ProtoRoundTripAllTypes) {
  std::vector<Tensor> ts = {
      Tensor::Vec<float>({1.5f, -2.f, 3.f}),
      Tensor::Vec<double>({1e300, -0.5}),
      Tensor::Vec<int32_t>({1, -2, 2147483647}),
      Tensor::Vec<int64_t>({int64_t{1} << 50, -1}),
      Tensor::Vec<bool>({true, false, true}),
      Tensor::Vec<std::string>({"a", std::string("b\0c", 3), ""}),
      Tensor(ResourceHandle{"/cpu:0", "c", "v", "Var"}),
      Tensor(DT_FLOAT, TensorShape({0, 4})),
  };
  for (const Tensor& t : ts) {
    TensorProto p;
    t.AsProto(&p);
    if (DataTypeIsPod(t.dtype())) {
      EXPECT_EQ(p.tensor_content().size(), t.TotalBytes());
    }
    auto back = Tensor::FromProto(p);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_TRUE(back->Equals(t))
        << t.DebugString() << " vs " << back->DebugString();
  }
}

// A proto read from a file or the wire may not make this side allocate what
// it only declares (found by fuzz_checkpoint and fuzz_graph_def: a 58-byte
// entry asked for 4 GiB, and shapes whose byte count wraps got a 64-byte
// buffer that was then written past).
TEST(TensorTest, FromProtoRefusesDeclaredSizesItDoesNotCarry) {
  auto proto = [](DataType dtype, std::vector<int64_t> dims) {
    TensorProto p;
    p.set_dtype(dtype);
    for (int64_t d : dims) p.mutable_tensor_shape()->add_dim()->set_size(d);
    return p;
  };
  TensorProto wraps = proto(DT_FLOAT, {int64_t{1} << 62});
  wraps.add_float_val(1.f);
  EXPECT_TRUE(absl::IsInvalidArgument(Tensor::FromProto(wraps).status()));
  TensorProto strings = proto(DT_STRING, {int64_t{1} << 59});
  strings.add_string_val("x");
  EXPECT_TRUE(absl::IsInvalidArgument(Tensor::FromProto(strings).status()));
  TensorProto broadcast = proto(DT_FLOAT, {int64_t{1} << 30});  // 4 GiB
  broadcast.add_float_val(0.f);
  absl::Status big = Tensor::FromProto(broadcast).status();
  EXPECT_TRUE(absl::IsInvalidArgument(big)) << big;
  EXPECT_NE(big.message().find("cap"), absl::string_view::npos) << big;
  TensorProto short_content = proto(DT_FLOAT, {int64_t{1} << 30});
  short_content.set_tensor_content(std::string(16, '\0'));
  EXPECT_TRUE(
      absl::IsInvalidArgument(Tensor::FromProto(short_content).status()));
  TensorProto some_values = proto(DT_INT32, {4});
  some_values.add_int_val(1);
  some_values.add_int_val(2);
  EXPECT_TRUE(absl::IsInvalidArgument(Tensor::FromProto(some_values).status()));
  // A modest broadcast is still fine.
  TensorProto ok = proto(DT_FLOAT, {1000});
  ok.add_float_val(2.f);
  auto t = Tensor::FromProto(ok);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->NumElements(), 1000);
}

TEST(TensorTest, FromProtoTypedFieldsAndBroadcast) {
  TensorProto p;
  p.set_dtype(DT_FLOAT);
  p.mutable_tensor_shape()->add_dim()->set_size(3);
  p.add_float_val(4.f);
  auto t = Tensor::FromProto(p);
  ASSERT_TRUE(t.ok());
  EXPECT_TRUE(t->Equals(Tensor::Vec<float>({4, 4, 4})));
  p.add_float_val(1.f);
  EXPECT_EQ(Tensor::FromProto(p).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(TensorTest, FromProtoRejectsBadContent) {
  TensorProto p;
  p.set_dtype(DT_INT32);
  p.mutable_tensor_shape()->add_dim()->set_size(2);
  p.set_tensor_content(std::string(7, '\0'));
  auto t = Tensor::FromProto(p);
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(t.status().message().find("needs 8 bytes"), std::string::npos);
  p.set_dtype(static_cast<DataType>(42));
  EXPECT_FALSE(Tensor::FromProto(p).ok());
  p.set_dtype(DT_INT32);
  p.mutable_tensor_shape()->mutable_dim(0)->set_size(-3);
  EXPECT_FALSE(Tensor::FromProto(p).ok());
}

TEST(TypesTest, Names) {
  for (DataType t : AllDataTypes()) {
    DataType back;
    ASSERT_TRUE(DataTypeFromName(DataTypeName(t), &back));
    EXPECT_EQ(back, t);
  }
  DataType t;
  EXPECT_TRUE(DataTypeFromName("float32", &t));
  EXPECT_EQ(t, DT_FLOAT);
  EXPECT_FALSE(DataTypeFromName("complex64", &t));
}

}  // namespace
namespace {

using ::testing::HasSubstr;

// The VmFlags line of the mapping of /proc/self/smaps that holds `p`, or
// "" when none does.
std::string VmFlagsOf(const void* p) {
  std::ifstream smaps("/proc/self/smaps");
  const auto addr = reinterpret_cast<uintptr_t>(p);
  bool inside = false;
  for (std::string line; std::getline(smaps, line);) {
    unsigned long long lo = 0, hi = 0;  // NOLINT(runtime/int): sscanf's %llx
    if (std::sscanf(line.c_str(), "%llx-%llx ", &lo, &hi) == 2 &&
        line.find(':') > line.find(' ')) {
      inside = addr >= lo && addr < hi;
    } else if (inside && line.rfind("VmFlags:", 0) == 0) {
      return line;
    }
  }
  return "";
}

}  // namespace

// Whether this kernel shows madvise(MADV_HUGEPAGE) in smaps (as "hg"), on
// a mapping of the test's own; some sandboxes and kernels do not.
bool KernelShowsHugePageAdvice() {
  const size_t bytes = size_t{4} << 20;
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return false;
  const bool shown = madvise(p, bytes, MADV_HUGEPAGE) == 0 &&
                     VmFlagsOf(p).find(" hg") != std::string::npos;
  munmap(p, bytes);
  return shown;
}

// Blocks of 2 MiB and more start on a 2 MiB boundary and their whole 2 MiB
// pages are advised onto transparent huge pages; sizes keep the 64-byte
// rounding, so budgets are charged as before.
TEST(TensorBufferTest, BlocksOfTwoMiBOrMoreStartOnAHugePage) {
  auto budget =
      MemoryBudget::Create("the test's budget", int64_t{64} << 20, nullptr, "");
  const int64_t two_mib = int64_t{2} << 20;
  const bool shown = KernelShowsHugePageAdvice();
  // 2 MiB - 64 bytes; 2 MiB - 60, which rounds to 2 MiB; 2 MiB + 4.
  for (const int64_t floats :
       {two_mib / 4 - 16, two_mib / 4 - 15, two_mib / 4 + 1}) {
    SCOPED_TRACE(floats);
    auto t = Tensor::Allocate(DT_FLOAT, TensorShape({floats}), budget.get(),
                              "a tensor");
    ASSERT_TRUE(t.ok()) << t.status();
    const int64_t charged = (floats * 4 + 63) / 64 * 64;
    EXPECT_EQ(budget->used(), charged);
    if (charged < two_mib) continue;  // Small pages.
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t->raw_data()) % two_mib, 0u);
    if (shown) {
      EXPECT_THAT(VmFlagsOf(t->raw_data()), HasSubstr(" hg"));
    } else {
      std::cout << "this kernel does not show huge-page advice in "
                   "/proc/self/smaps: the advice is not checked\n";
    }
  }
  EXPECT_EQ(budget->used(), 0);
}

TEST(TensorBufferTest, LargeBuffersAreReusedAndTheCacheIsBounded) {
#ifdef ABSL_HAVE_ADDRESS_SANITIZER
  GTEST_SKIP() << "ASan builds free large buffers (tensor.h)";
#endif
  const TensorShape big({8 << 20});  // 32 MiB of floats
  const size_t before = TensorBuffer::CachedLargeBufferBytes();
  const void* first = nullptr;
  {
    Tensor t(DT_FLOAT, big);
    first = t.raw_data();
  }
  EXPECT_EQ(TensorBuffer::CachedLargeBufferBytes(), before + (32u << 20));
  {
    Tensor again(DT_FLOAT, big);  // the freed block, mapped and faulted in
    EXPECT_EQ(again.raw_data(), first);
    EXPECT_EQ(TensorBuffer::CachedLargeBufferBytes(), before);
  }
  // Another size does not take it: the cached block stays cached.
  const size_t with_one = TensorBuffer::CachedLargeBufferBytes();
  {
    Tensor other(DT_FLOAT, TensorShape({(8 << 20) + 16}));
    EXPECT_NE(other.raw_data(), first);
    EXPECT_EQ(TensorBuffer::CachedLargeBufferBytes(), with_one);
  }
  // Buffers under 1 MiB are not cached; one of exactly 1 MiB is.
  const size_t cached = TensorBuffer::CachedLargeBufferBytes();
  { Tensor small(DT_FLOAT, TensorShape({(1 << 18) - 16})); }
  EXPECT_EQ(TensorBuffer::CachedLargeBufferBytes(), cached);
  size_t while_held = 0;
  {
    Tensor mib(DT_FLOAT, TensorShape({1 << 18}));
    while_held = TensorBuffer::CachedLargeBufferBytes();
  }
  EXPECT_EQ(TensorBuffer::CachedLargeBufferBytes(), while_held + (1u << 20));
  // Freeing more than the cap keeps the cache within it.
  {
    std::vector<Tensor> many;
    const size_t n = TensorBuffer::kLargeBufferCacheBytes / (32u << 20) + 2;
    for (size_t i = 0; i < n; ++i) many.emplace_back(DT_FLOAT, big);
  }
  EXPECT_LE(TensorBuffer::CachedLargeBufferBytes(),
            TensorBuffer::kLargeBufferCacheBytes);
}

}  // namespace cohort
