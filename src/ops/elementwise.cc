// Element-wise ops: validation and dispatch. f16 and bf16 calls run the f32
// drivers through F32Staging (ht/ops/compute_dtype.h), except where the CPU
// driver converts block by block itself (add, scale, GELU); the fused GELU
// backward runs its two parts as separate ops in 16 bits. mul_backward is
// mul's driver (da, and db of a same-shape b) plus a column-sum driver (db of
// a broadcast b).
#include "ht/ops/elementwise.h"

#include "ops/backend_ops.h"
#include "ops/check.h"
#include "ops/f32_staging.h"

namespace ht::ops {

using detail::check_compute_dtype;
using detail::check_numel;
using detail::check_same_device;
using detail::F32Staging;
using detail::Staged;

void add(const Tensor& a, const Tensor& b, Tensor& out) {
  const Device dev = check_same_device("add", {{"a", &a}, {"b", &b}, {"out", &out}});
  check_compute_dtype("add", {{"a", &a}, {"b", &b}, {"out", &out}});
  check_numel("add", "b", b, a.numel());
  check_numel("add", "out", out, a.numel());
  F32Staging s(/*native=*/dev.is_cpu());
  HT_DISPATCH(dev, add, s.in(a), s.in(b), s.out(out, Staged::kOverwrite));
  s.commit();
}

namespace elementwise_check {  // a namespace of its own: the unity build shares file-local names

// Checks mul's b against a: a's shape, or 1-d with a's last dimension.
// Returns whether b broadcasts over a's rows (a 1-d b of a 1-d a's shape is
// the same-shape case).
bool check_mul_operand(const char* op, const Tensor& a, const Tensor& b) {
  if (b.shape() == a.shape()) return false;
  if (a.ndim() >= 1 && b.ndim() == 1 && b.size(0) == a.size(-1)) return true;
  if (a.ndim() == 0)
    throw Error(ErrorKind::kShapeMismatch,
                fmt::format("{}: 'b' must have a's shape [] (a 0-d a has no rows to broadcast over), got {}", op,
                            shape_str(b.shape())));
  throw Error(ErrorKind::kShapeMismatch,
              fmt::format("{}: 'b' must have a's shape {}, or be 1-d with a's last dimension ([{}]) to multiply "
                          "every row of a; got {}",
                          op, shape_str(a.shape()), a.size(-1), shape_str(b.shape())));
}

}  // namespace elementwise_check

void mul(const Tensor& a, const Tensor& b, Tensor& out) {
  const char* op = "mul";
  const Device dev = check_same_device(op, {{"a", &a}, {"b", &b}, {"out", &out}});
  check_compute_dtype(op, {{"a", &a}, {"b", &b}, {"out", &out}});
  elementwise_check::check_mul_operand(op, a, b);
  detail::check_shape(op, "out", out, a.shape());
  F32Staging s;
  HT_DISPATCH(dev, mul, s.in(a), s.in(b), s.out(out, Staged::kOverwrite));
  s.commit();
}

void mul_backward(const Tensor& dy, const Tensor& a, const Tensor& b, Tensor* da, Tensor* db) {
  const char* op = "mul_backward";
  const Tensor none;
  const Device dev = check_same_device(op, {{"dy", &dy}, {"a", &a}, {"b", &b}});
  if (da) check_same_device(op, {{"a", &a}, {"da", da}});
  if (db) check_same_device(op, {{"b", &b}, {"db", db}});
  check_compute_dtype(op, {{"dy", &dy}, {"a", &a}, {"b", &b}, {"da", da ? da : &none}, {"db", db ? db : &none}});
  const bool broadcast = elementwise_check::check_mul_operand(op, a, b);
  detail::check_shape(op, "dy", dy, a.shape());
  if (da) detail::check_shape(op, "da", *da, a.shape());
  if (db) detail::check_shape(op, "db", *db, b.shape());
  // One staging for both gradients, every 16-bit input copied before either
  // driver runs; in f32, db goes first (the header's aliasing rule).
  F32Staging s;
  const Tensor& dy32 = s.in(dy);
  const Tensor& a32 = db ? s.in(a) : a;
  const Tensor& b32 = da ? s.in(b) : b;
  if (db) {
    Tensor& db32 = s.out(*db, Staged::kOverwrite);
    if (broadcast)
      HT_DISPATCH(dev, mul_column_sums, dy32, a32, db32);
    else
      HT_DISPATCH(dev, mul, dy32, a32, db32);
  }
  if (da) HT_DISPATCH(dev, mul, dy32, b32, s.out(*da, Staged::kOverwrite));
  s.commit();
}

void scale(Tensor& x, float factor) {
  const Device dev = check_same_device("scale", {{"x", &x}});
  check_compute_dtype("scale", {{"x", &x}});
  F32Staging s(/*native=*/dev.is_cpu());
  HT_DISPATCH(dev, scale, s.out(x, Staged::kAccumulate), factor);
  s.commit();
}

void bias_add(Tensor& y, const Tensor& bias) {
  const Device dev = check_same_device("bias_add", {{"y", &y}, {"bias", &bias}});
  check_compute_dtype("bias_add", {{"y", &y}, {"bias", &bias}});
  detail::check_ndim("bias_add", "bias", bias, 1);
  HT_CHECK(y.ndim() >= 1 && y.size(-1) == bias.size(0), ErrorKind::kShapeMismatch,
           "bias_add: last dimension of y {} must equal bias size {}", shape_str(y.shape()), bias.size(0));
  F32Staging s;
  HT_DISPATCH(dev, bias_add, s.out(y, Staged::kAccumulate), s.in(bias));
  s.commit();
}

void bias_fill(Tensor& y, const Tensor& bias) {
  const Device dev = check_same_device("bias_fill", {{"y", &y}, {"bias", &bias}});
  check_compute_dtype("bias_fill", {{"y", &y}, {"bias", &bias}});
  detail::check_ndim("bias_fill", "bias", bias, 1);
  HT_CHECK(y.ndim() >= 1 && y.size(-1) == bias.size(0), ErrorKind::kShapeMismatch,
           "bias_fill: last dimension of y {} must equal bias size {}", shape_str(y.shape()), bias.size(0));
  F32Staging s;
  HT_DISPATCH(dev, bias_fill, s.out(y, Staged::kOverwrite), s.in(bias));
  s.commit();
}

void bias_grad(const Tensor& dy, Tensor& dbias) {
  const Device dev = check_same_device("bias_grad", {{"dy", &dy}, {"dbias", &dbias}});
  check_compute_dtype("bias_grad", {{"dy", &dy}, {"dbias", &dbias}});
  detail::check_ndim("bias_grad", "dbias", dbias, 1);
  HT_CHECK(dy.ndim() >= 1 && dy.size(-1) == dbias.size(0), ErrorKind::kShapeMismatch,
           "bias_grad: last dimension of dy {} must equal dbias size {}", shape_str(dy.shape()), dbias.size(0));
  F32Staging s;
  HT_DISPATCH(dev, bias_grad, s.in(dy), s.out(dbias, Staged::kAccumulate));
  s.commit();
}

void gelu_forward(const Tensor& x, Tensor& y) {
  const Device dev = check_same_device("gelu_forward", {{"x", &x}, {"y", &y}});
  check_compute_dtype("gelu_forward", {{"x", &x}, {"y", &y}});
  check_numel("gelu_forward", "y", y, x.numel());
  F32Staging s(/*native=*/dev.is_cpu());
  HT_DISPATCH(dev, gelu_forward, s.in(x), s.out(y, Staged::kOverwrite));
  s.commit();
}

void gelu_backward_bias_grad(const Tensor& x, const Tensor& dy, Tensor& dx, Tensor& dbias) {
  const char* op = "gelu_backward_bias_grad";
  const Device dev = check_same_device(op, {{"x", &x}, {"dy", &dy}, {"dx", &dx}, {"dbias", &dbias}});
  check_compute_dtype(op, {{"x", &x}, {"dy", &dy}, {"dx", &dx}, {"dbias", &dbias}});
  check_numel(op, "dy", dy, x.numel());
  check_numel(op, "dx", dx, x.numel());
  detail::check_ndim(op, "dbias", dbias, 1);
  HT_CHECK(x.ndim() >= 1 && x.size(-1) == dbias.size(0), ErrorKind::kShapeMismatch,
           "{}: last dimension of x {} must equal dbias size {}", op, shape_str(x.shape()), dbias.size(0));
  if (x.dtype() != DType::kF32) {
    gelu_backward(x, dy, dx);
    bias_grad(dx, dbias);
    return;
  }
  HT_DISPATCH(dev, gelu_backward_bias_grad, x, dy, dx, dbias);
}

void gelu_backward(const Tensor& x, const Tensor& dy, Tensor& dx) {
  const Device dev = check_same_device("gelu_backward", {{"x", &x}, {"dy", &dy}, {"dx", &dx}});
  check_compute_dtype("gelu_backward", {{"x", &x}, {"dy", &dy}, {"dx", &dx}});
  check_numel("gelu_backward", "dy", dy, x.numel());
  check_numel("gelu_backward", "dx", dx, x.numel());
  F32Staging s(/*native=*/dev.is_cpu());
  HT_DISPATCH(dev, gelu_backward, s.in(x), s.in(dy), s.out(dx, Staged::kOverwrite));
  s.commit();
}

}  // namespace ht::ops
