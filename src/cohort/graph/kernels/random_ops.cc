#include "cohort/graph/kernels/random_ops.h"

#include <cmath>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "cohort/base/status.h"

namespace cohort {
namespace {

constexpr double kPi = 3.14159265358979323846;

template <typename T>
T UniformFromBits(uint64_t bits);
template <>
float UniformFromBits<float>(uint64_t bits) {
  return static_cast<float>(bits >> 40) * (1.0f / 16777216.0f);
}
template <>
double UniformFromBits<double>(uint64_t bits) {
  return static_cast<double>(bits >> 11) * (1.0 / 9007199254740992.0);
}

template <typename T, bool kNormal>
class RandomOp : public OpKernel {
 public:
  explicit RandomOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    int64_t seed = 0, seed2 = 0;
    COHORT_OP_REQUIRES_OK(ctx, ctx->GetAttr("seed", &seed));
    COHORT_OP_REQUIRES_OK(ctx, ctx->GetAttr("seed2", &seed2));
    uint64_t s = static_cast<uint64_t>(seed) * 0x9E3779B97F4A7C15ULL +
                 static_cast<uint64_t>(seed2);
    if (seed == 0 && seed2 == 0) {
      std::random_device rd;
      s = (static_cast<uint64_t>(rd()) << 32) ^ rd();
    }
    engine_.seed(s);
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& shape_t = ctx->input(0);
    COHORT_OP_REQUIRES(ctx, shape_t.dtype() == DT_INT32 && shape_t.dims() == 1,
                       absl::InvalidArgumentError(absl::StrCat(
                           "shape must be a 1-D int32 tensor, got ",
                           shape_t.shape().DebugString())));
    std::vector<int64_t> dims(shape_t.span<int32_t>().begin(),
                              shape_t.span<int32_t>().end());
    auto shape = TensorShape::Make(dims);
    COHORT_OP_REQUIRES_OK(ctx, shape.status());
    Tensor* out = nullptr;
    COHORT_OP_REQUIRES_OK(ctx, ctx->allocate_output(0, *shape, &out));
    T* o = out->data<T>();
    const int64_t n = out->NumElements();
    absl::MutexLock lock(&mu_);
    if (!kNormal) {
      for (int64_t i = 0; i < n; ++i) o[i] = UniformFromBits<T>(engine_());
      return;
    }
    for (int64_t i = 0; i < n; i += 2) {
      double u1 = 1.0 - UniformFromBits<double>(engine_());  // (0, 1]
      double u2 = UniformFromBits<double>(engine_());
      double r = std::sqrt(-2.0 * std::log(u1));
      double theta = 2.0 * kPi * u2;
      o[i] = static_cast<T>(r * std::cos(theta));
      if (i + 1 < n) o[i + 1] = static_cast<T>(r * std::sin(theta));
    }
  }

 private:
  absl::Mutex mu_;
  std::mt19937_64 engine_ ABSL_GUARDED_BY(mu_);
};

absl::Status RandomShape(InferenceContext* c) {
  const Tensor* t = c->input_tensor(0);
  if (t != nullptr && t->dtype() == DT_INT32 && t->dims() == 1) {
    std::vector<int64_t> dims(t->span<int32_t>().begin(),
                              t->span<int32_t>().end());
    c->set_output(0, PartialTensorShape(absl::Span<const int64_t>(dims)));
  } else if (c->input(0).dims() == 1 && c->input(0).dim_size(0) >= 0) {
    c->set_output(0, PartialTensorShape::UnknownDims(c->input(0).dim_size(0)));
  } else {
    c->set_output(0, PartialTensorShape::UnknownRank());
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status RegisterRandomOps(OpRegistry* r) {
  for (const char* name : {"RandomUniform", "RandomNormal"}) {
    COHORT_RETURN_IF_ERROR(
        r->Register(OpDefBuilder(name)
                        .Input("shape: T")
                        .Output("output: dtype")
                        .Attr("dtype: {float, double}")
                        .Attr("seed: int = 0")
                        .Attr("seed2: int = 0")
                        // TensorFlow: the shape's type,
                        // no default; int32 here so the
                        // refusal of int64 names it.
                        .Attr("T: {int32, int64} = int32")
                        .RequireDefault("T",
                                        "the kernel reads an int32 "
                                        "shape")
                        .SetIsStateful()
                        .SetShapeFn(RandomShape)));
  }
  return absl::OkStatus();
}

absl::Status RegisterRandomKernels(KernelRegistry* r) {
  COHORT_RETURN_IF_ERROR((r->Register<RandomOp<float, false>>(
      KernelDefBuilder("RandomUniform").TypeConstraint<float>("dtype"))));
  COHORT_RETURN_IF_ERROR((r->Register<RandomOp<double, false>>(
      KernelDefBuilder("RandomUniform").TypeConstraint<double>("dtype"))));
  COHORT_RETURN_IF_ERROR((r->Register<RandomOp<float, true>>(
      KernelDefBuilder("RandomNormal").TypeConstraint<float>("dtype"))));
  COHORT_RETURN_IF_ERROR((r->Register<RandomOp<double, true>>(
      KernelDefBuilder("RandomNormal").TypeConstraint<double>("dtype"))));
  return absl::OkStatus();
}

namespace ops {
namespace {
Output Random(const Scope& s, const char* op, const Input& shape,
              DataType dtype, int64_t seed, int64_t seed2) {
  return BuildOp(s, op, {shape.ToOutput(s, DT_INT32)},
                 {{"dtype", dtype}, {"seed", seed}, {"seed2", seed2}})
      .output(0);
}
}  // namespace

Output RandomUniform(const Scope& s, Input shape, DataType dtype, int64_t seed,
                     int64_t seed2) {
  return Random(s, "RandomUniform", shape, dtype, seed, seed2);
}
Output RandomNormal(const Scope& s, Input shape, DataType dtype, int64_t seed,
                    int64_t seed2) {
  return Random(s, "RandomNormal", shape, dtype, seed, seed2);
}

}  // namespace ops
}  // namespace cohort
