// Gradients of elementwise math ops, reductions and MatMul (see gradients.h
// for the contract). Broadcasting binary ops reduce each input's gradient
// over the broadcast axes (BroadcastGradientArgs + Sum + Reshape).
#include "cohort/base/status.h"
#include "cohort/graph/gradients/all_gradients.h"
#include "cohort/graph/kernels/array_ops.h"
#include "cohort/graph/kernels/elementwise_ops.h"
#include "cohort/graph/kernels/math_ops.h"
#include "cohort/graph/kernels/reduction_ops.h"
#include "cohort/graph/kernels/shape_ops.h"

namespace cohort {
namespace {

using Grads = std::vector<Output>;

// Pushes the gradients of x and y of a broadcasting binary op, given the
// gradients `gx`, `gy` in the broadcast output's shape (invalid = none).
void ReduceBroadcastGrads(const Scope& s, const Output& x, const Output& y,
                          const Output& gx, const Output& gy, Grads* out) {
  const PartialTensorShape& xs = x.shape();
  const PartialTensorShape& ys = y.shape();
  if (xs.IsFullyDefined() && ys.IsFullyDefined() && xs == ys) {
    out->push_back(gx);
    out->push_back(gy);
    return;
  }
  Output sx = ops::Shape(s, x);
  Output sy = ops::Shape(s, y);
  auto r = ops::BroadcastGradientArgs(s, sx, sy);
  out->push_back(gx.valid() ? ops::Reshape(s, ops::Sum(s, gx, r.r0), sx) : gx);
  out->push_back(gy.valid() ? ops::Reshape(s, ops::Sum(s, gy, r.r1), sy) : gy);
}

absl::Status AddGrad(const Scope& s, const Operation& op, const Grads& dz,
                     Grads* dx) {
  ReduceBroadcastGrads(s, op.input(0), op.input(1), dz[0], dz[0], dx);
  return s.status();
}

absl::Status SubGrad(const Scope& s, const Operation& op, const Grads& dz,
                     Grads* dx) {
  ReduceBroadcastGrads(s, op.input(0), op.input(1), dz[0], ops::Neg(s, dz[0]),
                       dx);
  return s.status();
}

absl::Status MulGrad(const Scope& s, const Operation& op, const Grads& dz,
                     Grads* dx) {
  Output x = op.input(0), y = op.input(1);
  ReduceBroadcastGrads(s, x, y, ops::Mul(s, dz[0], y), ops::Mul(s, x, dz[0]),
                       dx);
  return s.status();
}

absl::Status DivGrad(const Scope& s, const Operation& op, const Grads& dz,
                     Grads* dx) {
  Output x = op.input(0), y = op.input(1);
  Output gx = ops::Div(s, dz[0], y);
  Output gy =
      ops::Div(s, ops::Mul(s, ops::Neg(s, dz[0]), x), ops::Square(s, y));
  ReduceBroadcastGrads(s, x, y, gx, gy, dx);
  return s.status();
}

absl::Status PowGrad(const Scope& s, const Operation& op, const Grads& dz,
                     Grads* dx) {
  Output x = op.input(0), y = op.input(1), z = op.output(0);
  // dz/dx = y * x^(y-1); dz/dy = z * log(x) (0 where x <= 0).
  Output gx = ops::Mul(
      s, dz[0],
      ops::Mul(s, y, ops::Pow(s, x, ops::Sub(s, y, ops::OnesLike(s, y)))));
  // log(x) where x > 0, else 0 (the Log sees 1 there, so no NaN appears).
  Output positive = ops::Greater(s, x, ops::ZerosLike(s, x));
  Output safe_x = ops::Select(s, positive, x, ops::OnesLike(s, x));
  Output log_x =
      ops::Select(s, positive, ops::Log(s, safe_x), ops::ZerosLike(s, x));
  Output gy = ops::Mul(s, ops::Mul(s, dz[0], z), log_x);
  ReduceBroadcastGrads(s, x, y, gx, gy, dx);
  return s.status();
}

// Maximum (is_max) / Minimum: the gradient goes to x where x wins (ties to
// x), else to y.
absl::Status MaxMinGrad(bool is_max, const Scope& s, const Operation& op,
                        const Grads& dz, Grads* dx) {
  Output x = op.input(0), y = op.input(1);
  Output y_wins = is_max ? ops::Less(s, x, y) : ops::Greater(s, x, y);
  Output zeros = ops::ZerosLike(s, dz[0]);
  ReduceBroadcastGrads(s, x, y, ops::Select(s, y_wins, zeros, dz[0]),
                       ops::Select(s, y_wins, dz[0], zeros), dx);
  return s.status();
}

absl::Status NegGrad(const Scope& s, const Operation& op, const Grads& dz,
                     Grads* dx) {
  dx->push_back(ops::Neg(s, dz[0]));
  return s.status();
}

absl::Status SquareGrad(const Scope& s, const Operation& op, const Grads& dz,
                        Grads* dx) {
  dx->push_back(ops::Mul(s, dz[0], ops::Mul(s, op.input(0), 2)));
  return s.status();
}

absl::Status SqrtGrad(const Scope& s, const Operation& op, const Grads& dz,
                      Grads* dx) {
  dx->push_back(ops::Div(s, ops::Mul(s, dz[0], 0.5), op.output(0)));
  return s.status();
}

absl::Status ExpGrad(const Scope& s, const Operation& op, const Grads& dz,
                     Grads* dx) {
  dx->push_back(ops::Mul(s, dz[0], op.output(0)));
  return s.status();
}

absl::Status LogGrad(const Scope& s, const Operation& op, const Grads& dz,
                     Grads* dx) {
  dx->push_back(ops::Div(s, dz[0], op.input(0)));
  return s.status();
}

absl::Status AddNGrad(const Scope& s, const Operation& op, const Grads& dz,
                      Grads* dx) {
  for (int i = 0; i < op.num_inputs(); ++i) dx->push_back(dz[0]);
  return s.status();
}

absl::Status CastGrad(const Scope& s, const Operation& op, const Grads& dz,
                      Grads* dx) {
  DataType src = op.input(0).dtype();
  if (DataTypeIsFloating(src) && DataTypeIsFloating(dz[0].dtype())) {
    dx->push_back(ops::Cast(s, dz[0], src));
  } else {
    dx->push_back(NoGradient());
  }
  return s.status();
}

absl::Status SelectGrad(const Scope& s, const Operation& op, const Grads& dz,
                        Grads* dx) {
  Output c = op.input(0);
  Output zeros = ops::ZerosLike(s, dz[0]);
  dx->push_back(NoGradient());
  dx->push_back(ops::Select(s, c, dz[0], zeros));
  dx->push_back(ops::Select(s, c, zeros, dz[0]));
  return s.status();
}

absl::Status MatMulGrad(const Scope& s, const Operation& op, const Grads& dz,
                        Grads* dx) {
  bool ta = false, tb = false;
  COHORT_RETURN_IF_ERROR(op.GetAttr("transpose_a", &ta));
  COHORT_RETURN_IF_ERROR(op.GetAttr("transpose_b", &tb));
  Output a = op.input(0), b = op.input(1), g = dz[0];
  if (!ta && !tb) {
    dx->push_back(ops::MatMul(s, g, b, false, true));
    dx->push_back(ops::MatMul(s, a, g, true, false));
  } else if (!ta && tb) {
    dx->push_back(ops::MatMul(s, g, b, false, false));
    dx->push_back(ops::MatMul(s, g, a, true, false));
  } else if (ta && !tb) {
    dx->push_back(ops::MatMul(s, b, g, false, true));
    dx->push_back(ops::MatMul(s, a, g, false, false));
  } else {
    dx->push_back(ops::MatMul(s, b, g, true, true));
    dx->push_back(ops::MatMul(s, g, a, true, true));
  }
  return s.status();
}

// dz reshaped to the keep_dims shape of the reduction and broadcast back to
// the input's shape.
Output BroadcastToInput(const Scope& s, const Operation& op, const Output& dz) {
  Output x = op.input(0);
  Output kept = ops::ReducedShape(s, ops::Shape(s, x), op.input(1));
  return ops::Add(s, ops::ZerosLike(s, x), ops::Reshape(s, dz, kept));
}

absl::Status SumGrad(const Scope& s, const Operation& op, const Grads& dz,
                     Grads* dx) {
  dx->push_back(BroadcastToInput(s, op, dz[0]));
  dx->push_back(NoGradient());
  return s.status();
}

absl::Status MeanGrad(const Scope& s, const Operation& op, const Grads& dz,
                      Grads* dx) {
  Output sum_grad = BroadcastToInput(s, op, dz[0]);
  Output count = ops::Div(s, ops::Size(s, op.input(0)),
                          ops::Maximum(s, ops::Size(s, op.output(0)), 1));
  dx->push_back(ops::Div(s, sum_grad, ops::Cast(s, count, dz[0].dtype())));
  dx->push_back(NoGradient());
  return s.status();
}

absl::Status MaxGrad(const Scope& s, const Operation& op, const Grads& dz,
                     Grads* dx) {
  Output x = op.input(0), axes = op.input(1);
  Output kept = ops::ReducedShape(s, ops::Shape(s, x), axes);
  Output y = ops::Reshape(s, op.output(0), kept);
  Output g = ops::Reshape(s, dz[0], kept);
  // The gradient is shared equally by every element equal to the maximum.
  Output ind = ops::Cast(s, ops::Equal(s, x, y), dz[0].dtype());
  Output num = ops::Sum(s, ind, axes, /*keep_dims=*/true);
  dx->push_back(ops::Div(s, ops::Mul(s, ind, g), num));
  dx->push_back(NoGradient());
  return s.status();
}

}  // namespace

absl::Status RegisterMathGradients(GradientRegistry* r) {
  COHORT_RETURN_IF_ERROR(r->Register("Add", AddGrad));
  COHORT_RETURN_IF_ERROR(r->Register("Sub", SubGrad));
  COHORT_RETURN_IF_ERROR(r->Register("Mul", MulGrad));
  COHORT_RETURN_IF_ERROR(r->Register("Div", DivGrad));
  COHORT_RETURN_IF_ERROR(r->Register("Pow", PowGrad));
  COHORT_RETURN_IF_ERROR(r->Register(
      "Maximum", [](const Scope& s, const Operation& op, const Grads& dz,
                    Grads* dx) { return MaxMinGrad(true, s, op, dz, dx); }));
  COHORT_RETURN_IF_ERROR(r->Register(
      "Minimum", [](const Scope& s, const Operation& op, const Grads& dz,
                    Grads* dx) { return MaxMinGrad(false, s, op, dz, dx); }));
  COHORT_RETURN_IF_ERROR(r->Register("Neg", NegGrad));
  COHORT_RETURN_IF_ERROR(r->Register("Square", SquareGrad));
  COHORT_RETURN_IF_ERROR(r->Register("Sqrt", SqrtGrad));
  COHORT_RETURN_IF_ERROR(r->Register("Exp", ExpGrad));
  COHORT_RETURN_IF_ERROR(r->Register("Log", LogGrad));
  COHORT_RETURN_IF_ERROR(r->Register("AddN", AddNGrad));
  COHORT_RETURN_IF_ERROR(r->Register("Cast", CastGrad));
  COHORT_RETURN_IF_ERROR(r->Register("Select", SelectGrad));
  COHORT_RETURN_IF_ERROR(r->Register("MatMul", MatMulGrad));
  COHORT_RETURN_IF_ERROR(r->Register("Sum", SumGrad));
  COHORT_RETURN_IF_ERROR(r->Register("Mean", MeanGrad));
  COHORT_RETURN_IF_ERROR(r->Register("Max", MaxGrad));
  for (const char* op : {"Greater", "Less", "Equal"}) {
    COHORT_RETURN_IF_ERROR(r->RegisterNoGradient(op));
  }
  return absl::OkStatus();
}

}  // namespace cohort
