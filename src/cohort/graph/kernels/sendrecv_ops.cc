#include "cohort/graph/kernels/sendrecv_ops.h"

#include "absl/strings/str_cat.h"
#include "cohort/base/status.h"
#include "cohort/graph/rendezvous.h"

namespace cohort {
namespace {

absl::Status ParseKeyFromAttrs(OpKernelConstruction* ctx,
                               Rendezvous::ParsedKey* key) {
  std::string tensor_name, send_device, recv_device;
  int64_t incarnation;
  COHORT_RETURN_IF_ERROR(ctx->GetAttr("tensor_name", &tensor_name));
  COHORT_RETURN_IF_ERROR(ctx->GetAttr("send_device", &send_device));
  COHORT_RETURN_IF_ERROR(ctx->GetAttr("recv_device", &recv_device));
  COHORT_RETURN_IF_ERROR(ctx->GetAttr("send_device_incarnation", &incarnation));
  COHORT_ASSIGN_OR_RETURN(
      *key, Rendezvous::ParseKey(Rendezvous::CreateKey(
                send_device, static_cast<uint64_t>(incarnation), recv_device,
                tensor_name, 0, 0)));
  return absl::OkStatus();
}

absl::Status NoRendezvous(const Rendezvous::ParsedKey& key) {
  return absl::FailedPreconditionError(absl::StrCat(
      "no rendezvous for tensor '", key.edge_name,
      "' in this step; Send/Recv need a session or worker that provides one"));
}

class SendOp : public OpKernel {
 public:
  explicit SendOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    COHORT_OP_REQUIRES_OK(ctx, ParseKeyFromAttrs(ctx, &key_));
  }
  void Compute(OpKernelContext* ctx) override {
    COHORT_OP_REQUIRES(ctx, ctx->rendezvous() != nullptr, NoRendezvous(key_));
    COHORT_OP_REQUIRES_OK(ctx, ctx->rendezvous()->Send(key_, ctx->input(0)));
  }

 private:
  Rendezvous::ParsedKey key_;
};

class RecvOp : public AsyncOpKernel {
 public:
  explicit RecvOp(OpKernelConstruction* ctx) : AsyncOpKernel(ctx) {
    COHORT_OP_REQUIRES_OK(ctx, ParseKeyFromAttrs(ctx, &key_));
  }
  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    if (ctx->rendezvous() == nullptr) {
      ctx->SetStatus(NoRendezvous(key_));
      done();
      return;
    }
    DataType want = output_types()[0];
    ctx->rendezvous()->RecvAsync(
        key_, [this, ctx, want, done = std::move(done)](const absl::Status& s,
                                                        const Tensor& value) {
          if (!s.ok()) {
            ctx->SetStatus(s);
          } else if (value.dtype() != want) {
            ctx->SetStatus(absl::InvalidArgumentError(
                absl::StrCat("received tensor '", key_.edge_name, "' is ",
                             DataTypeName(value.dtype()), ", expected ",
                             DataTypeName(want))));
          } else {
            ctx->set_output(0, value);
          }
          done();
        });
  }

 private:
  Rendezvous::ParsedKey key_;
};

}  // namespace

absl::Status RegisterSendRecvOps(OpRegistry* r) {
  COHORT_RETURN_IF_ERROR(
      r->Register(OpDefBuilder("Send")
                      .Input("tensor: T")
                      .Attr("T: type")
                      .Attr("tensor_name: string")
                      .Attr("send_device: string")
                      .Attr("send_device_incarnation: int = 0")
                      .Attr("recv_device: string")
                      // TensorFlow's: true when a client, not a device,
                      // feeds or fetches the tensor.
                      .Attr("client_terminated: bool = false")
                      .RequireDefault("client_terminated",
                                      "every Send and Recv runs between "
                                      "devices")
                      .SetIsStateful()
                      .SetShapeFn(shape_fns::NoOutputs)));
  COHORT_RETURN_IF_ERROR(
      r->Register(OpDefBuilder("Recv")
                      .Output("tensor: tensor_type")
                      .Attr("tensor_type: type")
                      .Attr("tensor_name: string")
                      .Attr("send_device: string")
                      .Attr("send_device_incarnation: int = 0")
                      .Attr("recv_device: string")
                      // TensorFlow's: true when a client, not a device,
                      // feeds or fetches the tensor.
                      .Attr("client_terminated: bool = false")
                      .RequireDefault("client_terminated",
                                      "every Send and Recv runs between "
                                      "devices")
                      .SetIsStateful()
                      .SetShapeFn(shape_fns::Unknown)));
  return absl::OkStatus();
}

absl::Status RegisterSendRecvKernels(KernelRegistry* r) {
  COHORT_RETURN_IF_ERROR(r->Register<SendOp>(KernelDefBuilder("Send")));
  COHORT_RETURN_IF_ERROR(r->Register<RecvOp>(KernelDefBuilder("Recv")));
  return absl::OkStatus();
}

namespace ops {

Operation Send(const Scope& scope, Input tensor, const std::string& tensor_name,
               const std::string& send_device, const std::string& recv_device,
               int64_t send_device_incarnation) {
  return BuildOp(scope, "Send", {tensor.ToOutput(scope)},
                 {{"tensor_name", tensor_name},
                  {"send_device", send_device},
                  {"recv_device", recv_device},
                  {"send_device_incarnation", send_device_incarnation}});
}

Output Recv(const Scope& scope, DataType dtype, const std::string& tensor_name,
            const std::string& send_device, const std::string& recv_device,
            int64_t send_device_incarnation) {
  return BuildOp(scope, "Recv", {},
                 {{"tensor_type", dtype},
                  {"tensor_name", tensor_name},
                  {"send_device", send_device},
                  {"recv_device", recv_device},
                  {"send_device_incarnation", send_device_incarnation}})
      .output(0);
}

}  // namespace ops
}  // namespace cohort
