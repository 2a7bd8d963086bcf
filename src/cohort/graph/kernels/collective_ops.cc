#include "cohort/graph/kernels/collective_ops.h"

#include <algorithm>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cohort/base/status.h"
#include "cohort/graph/collective.h"
#include "cohort/graph/device.h"

namespace cohort {
namespace {

// TensorFlow's timeout_seconds 0 means "none"; every cohort wait has one.
constexpr absl::Duration kDefaultTimeout = absl::Minutes(10);
constexpr int64_t kMaxGroupSize = CollectiveGroups::kMaxGroupSize;

// The attrs every collective op has, and the group they name.
class CollectiveOpBase : public OpKernel {
 public:
  explicit CollectiveOpBase(OpKernelConstruction* ctx) : OpKernel(ctx) {
    COHORT_OP_REQUIRES_OK(ctx, ctx->GetAttr("group_size", &group_size_));
    COHORT_OP_REQUIRES(ctx, group_size_ >= 1 && group_size_ <= kMaxGroupSize,
                       absl::InvalidArgumentError(
                           absl::StrCat("group_size ", group_size_,
                                        " is out of range: a collective "
                                        "group has 1 to ",
                                        kMaxGroupSize, " members")));
    COHORT_OP_REQUIRES_OK(ctx, ctx->GetAttr("group_key", &group_key_));
    COHORT_OP_REQUIRES_OK(ctx, ctx->GetAttr("instance_key", &instance_key_));
    COHORT_OP_REQUIRES_OK(
        ctx, ctx->GetAttr("communication_hint", &communication_hint_));
    COHORT_OP_REQUIRES(
        ctx, communication_hint_ == "auto" || communication_hint_ == "ring",
        absl::InvalidArgumentError(absl::StrCat(
            "communication_hint '", communication_hint_,
            "' is not supported: \"auto\" (shared memory when every member "
            "is on one host, else the TCP ring) or \"ring\" (the TCP ring)")));
    float timeout_seconds = 0;
    COHORT_OP_REQUIRES_OK(ctx,
                          ctx->GetAttr("timeout_seconds", &timeout_seconds));
    timeout_ =
        timeout_seconds > 0 ? absl::Seconds(timeout_seconds) : kDefaultTimeout;
  }

 protected:
  // The group of group_key, checked against group_size.
  absl::StatusOr<std::shared_ptr<CollectiveGroups::Group>> FindGroup(
      OpKernelContext* ctx) const {
    COHORT_ASSIGN_OR_RETURN(std::shared_ptr<CollectiveGroups> groups,
                            CollectiveGroupsOf(ctx->resource_manager()));
    COHORT_ASSIGN_OR_RETURN(
        std::shared_ptr<CollectiveGroups::Group> group,
        groups->FindOrResolve(group_key_, static_cast<int>(group_size_),
                              communication_hint_, Deadline(ctx)));
    if (group->size() != group_size_) {
      return absl::InvalidArgumentError(absl::StrCat(
          name(), ": group_size ", group_size_, " but collective group ",
          group_key_, " has ", group->size(), " members"));
    }
    return group;
  }
  // The op's own timeout, cut to the step's deadline: a step that timed
  // out must not leave its collective waiting for minutes more.
  absl::Time Deadline(OpKernelContext* ctx) const {
    return std::min(absl::Now() + timeout_, ctx->deadline());
  }
  absl::Status Named(const absl::Status& s) const {
    if (s.ok()) return s;
    return absl::Status(
        s.code(),
        absl::StrCat(name(), " (group_key ", group_key_, ", instance_key ",
                     instance_key_, "): ", s.message()));
  }

  int64_t group_size_ = 0;
  int64_t group_key_ = 0;
  int64_t instance_key_ = 0;
  std::string communication_hint_;
  absl::Duration timeout_;
};

class CollectiveReduceOp : public CollectiveOpBase {
 public:
  explicit CollectiveReduceOp(OpKernelConstruction* ctx)
      : CollectiveOpBase(ctx) {
    std::string merge_op, final_op;
    COHORT_OP_REQUIRES_OK(ctx, ctx->GetAttr("merge_op", &merge_op));
    COHORT_OP_REQUIRES_OK(ctx, ctx->GetAttr("final_op", &final_op));
    COHORT_OP_REQUIRES(ctx, merge_op == "Add",
                       absl::InvalidArgumentError(absl::StrCat(
                           "CollectiveReduce merge_op '", merge_op,
                           "' is not supported; cohort reduces with \"Add\"")));
    COHORT_OP_REQUIRES(
        ctx, final_op == "Id" || final_op == "Div",
        absl::InvalidArgumentError(absl::StrCat(
            "CollectiveReduce final_op '", final_op,
            "' is not supported; use \"Id\" (sum) or \"Div\" (mean)")));
    mean_ = final_op == "Div";
  }

  void Compute(OpKernelContext* ctx) override {
    absl::StatusOr<std::shared_ptr<CollectiveGroups::Group>> group =
        FindGroup(ctx);
    COHORT_OP_REQUIRES_OK(ctx, Named(group.status()));
    // In place when the step holds the only reference to the input (a
    // gradient computed for this op alone); a copy when others read it.
    Tensor out;
    if (!ctx->ForwardInput(0, &out)) out = ctx->input(0).DeepCopy();
    COHORT_OP_REQUIRES_OK(ctx, Named((*group)->AllReduce(
                                   &out, mean_, instance_key_, Deadline(ctx))));
    ctx->set_output(0, std::move(out));
  }

 private:
  bool mean_ = false;
};

class CollectiveBcastOp : public CollectiveOpBase {
 public:
  CollectiveBcastOp(OpKernelConstruction* ctx, bool is_root)
      : CollectiveOpBase(ctx), is_root_(is_root) {
    COHORT_OP_REQUIRES_OK(ctx, ctx->GetAttr("shape", &shape_));
  }

  void Compute(OpKernelContext* ctx) override {
    absl::StatusOr<std::shared_ptr<CollectiveGroups::Group>> group =
        FindGroup(ctx);
    COHORT_OP_REQUIRES_OK(ctx, Named(group.status()));
    Tensor out;
    if (is_root_) {
      const Tensor& in = ctx->input(0);
      COHORT_OP_REQUIRES(
          ctx, in.shape() == shape_,
          absl::InvalidArgumentError(absl::StrCat(
              name(), ": input shape ", in.shape().DebugString(),
              " differs from the shape attr ", shape_.DebugString())));
      out = in.DeepCopy();
    } else {
      Tensor* allocated = nullptr;
      COHORT_OP_REQUIRES_OK(ctx, ctx->allocate_output(0, shape_, &allocated));
      out = *allocated;
    }
    COHORT_OP_REQUIRES_OK(
        ctx, Named((*group)->Broadcast(&out, is_root_, instance_key_,
                                       Deadline(ctx))));
    ctx->set_output(0, std::move(out));
  }

 private:
  const bool is_root_;
  TensorShape shape_;
};

class CollectiveBcastSendOp : public CollectiveBcastOp {
 public:
  explicit CollectiveBcastSendOp(OpKernelConstruction* ctx)
      : CollectiveBcastOp(ctx, true) {}
};

class CollectiveBcastRecvOp : public CollectiveBcastOp {
 public:
  explicit CollectiveBcastRecvOp(OpKernelConstruction* ctx)
      : CollectiveBcastOp(ctx, false) {}
};

class CollectiveGatherOp : public CollectiveOpBase {
 public:
  explicit CollectiveGatherOp(OpKernelConstruction* ctx)
      : CollectiveOpBase(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    absl::StatusOr<std::shared_ptr<CollectiveGroups::Group>> group =
        FindGroup(ctx);
    COHORT_OP_REQUIRES_OK(ctx, Named(group.status()));
    const Tensor& in = ctx->input(0);
    COHORT_OP_REQUIRES(
        ctx, in.dims() >= 1,
        absl::InvalidArgumentError(absl::StrCat(
            name(), ": CollectiveGather needs an input of rank 1 or more, got ",
            in.shape().DebugString())));
    TensorShape shape = in.shape();
    shape.set_dim(0, shape.dim_size(0) * group_size_);
    Tensor* out = nullptr;
    COHORT_OP_REQUIRES_OK(ctx, ctx->allocate_output(0, shape, &out));
    COHORT_OP_REQUIRES_OK(
        ctx, Named((*group)->AllGather(in, out, instance_key_, Deadline(ctx))));
  }
};

absl::Status GatherShape(InferenceContext* c) {
  int64_t group_size = 0;
  COHORT_RETURN_IF_ERROR(c->GetAttr("group_size", &group_size));
  const PartialTensorShape& in = c->input(0);
  if (in.unknown_rank() || in.dims() == 0) {
    c->set_output(0, PartialTensorShape::UnknownRank());
    return absl::OkStatus();
  }
  std::vector<int64_t> dims;
  for (int i = 0; i < in.dims(); ++i) dims.push_back(in.dim_size(i));
  if (dims[0] >= 0) dims[0] *= group_size;
  c->set_output(0, PartialTensorShape(dims));
  return absl::OkStatus();
}

OpDefBuilder CommonAttrs(OpDefBuilder b) {
  return b.Attr("group_size: int")
      .Attr("group_key: int")
      .Attr("instance_key: int")
      .Attr("communication_hint: string = 'auto'")
      .Attr("timeout_seconds: float = 0")
      .SetIsStateful();
}

}  // namespace

absl::Status RegisterCollectiveOps(OpRegistry* r) {
  COHORT_RETURN_IF_ERROR(
      r->Register(CommonAttrs(OpDefBuilder("CollectiveReduce")
                                  .Input("input: T")
                                  .Output("data: T")
                                  .Attr("T: {float, double}")
                                  .Attr("merge_op: string = 'Add'")
                                  .Attr("final_op: string = 'Id'")
                                  .Attr("subdiv_offsets: list(int) = []")
                                  .Attr("wait_for: list(int) = []"))
                      .SetShapeFn(shape_fns::Unchanged)));
  COHORT_RETURN_IF_ERROR(r->Register(
      CommonAttrs(OpDefBuilder("CollectiveBcastSend")
                      .Input("input: T")
                      .Output("data: T")
                      .Attr("T: {float, double, int32, int64, bool}")
                      .Attr("shape: shape"))
          .SetShapeFn(shape_fns::Unchanged)));
  COHORT_RETURN_IF_ERROR(r->Register(
      CommonAttrs(OpDefBuilder("CollectiveBcastRecv")
                      .Output("data: T")
                      .Attr("T: {float, double, int32, int64, bool}")
                      .Attr("shape: shape"))
          .SetShapeFn(shape_fns::Unknown)));
  COHORT_RETURN_IF_ERROR(
      r->Register(CommonAttrs(OpDefBuilder("CollectiveGather")
                                  .Input("input: T")
                                  .Output("data: T")
                                  .Attr("T: {float, double, int32, int64}")
                                  .Attr("shape: shape = <unknown>"))
                      .SetShapeFn(GatherShape)));
  return absl::OkStatus();
}

absl::Status RegisterCollectiveKernels(KernelRegistry* r) {
  COHORT_RETURN_IF_ERROR(
      r->Register<CollectiveReduceOp>(KernelDefBuilder("CollectiveReduce")));
  COHORT_RETURN_IF_ERROR(r->Register<CollectiveBcastSendOp>(
      KernelDefBuilder("CollectiveBcastSend")));
  COHORT_RETURN_IF_ERROR(r->Register<CollectiveBcastRecvOp>(
      KernelDefBuilder("CollectiveBcastRecv")));
  COHORT_RETURN_IF_ERROR(
      r->Register<CollectiveGatherOp>(KernelDefBuilder("CollectiveGather")));
  return absl::OkStatus();
}

namespace ops {

Output CollectiveReduce(const Scope& scope, Input input, int64_t group_size,
                        int64_t group_key, int64_t instance_key,
                        const std::string& final_op, float timeout_seconds,
                        const std::string& communication_hint) {
  return BuildOp(scope, "CollectiveReduce", {input.ToOutput(scope)},
                 {{"group_size", group_size},
                  {"group_key", group_key},
                  {"instance_key", instance_key},
                  {"merge_op", std::string("Add")},
                  {"final_op", final_op},
                  {"timeout_seconds", timeout_seconds},
                  {"communication_hint", communication_hint}})
      .output(0);
}

Output CollectiveBcastSend(const Scope& scope, Input input, int64_t group_size,
                           int64_t group_key, int64_t instance_key,
                           const TensorShape& shape) {
  return BuildOp(scope, "CollectiveBcastSend", {input.ToOutput(scope)},
                 {{"group_size", group_size},
                  {"group_key", group_key},
                  {"instance_key", instance_key},
                  {"shape", shape}})
      .output(0);
}

Output CollectiveBcastRecv(const Scope& scope, DataType dtype,
                           int64_t group_size, int64_t group_key,
                           int64_t instance_key, const TensorShape& shape) {
  return BuildOp(scope, "CollectiveBcastRecv", {},
                 {{"T", dtype},
                  {"group_size", group_size},
                  {"group_key", group_key},
                  {"instance_key", instance_key},
                  {"shape", shape}})
      .output(0);
}

Output CollectiveGather(const Scope& scope, Input input, int64_t group_size,
                        int64_t group_key, int64_t instance_key,
                        const TensorShape& shape) {
  return BuildOp(scope, "CollectiveGather", {input.ToOutput(scope)},
                 {{"group_size", group_size},
                  {"group_key", group_key},
                  {"instance_key", instance_key},
                  {"shape", shape}})
      .output(0);
}

}  // namespace ops
}  // namespace cohort
