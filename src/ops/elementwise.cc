// Element-wise ops: validation and dispatch.
#include "ht/ops/elementwise.h"

#include "ops/backend_ops.h"
#include "ops/check.h"

namespace ht::ops {

using detail::check_dtype;
using detail::check_numel;
using detail::check_same_device;

void add(const Tensor& a, const Tensor& b, Tensor& out) {
  const Device dev = check_same_device("add", {{"a", &a}, {"b", &b}, {"out", &out}});
  for (const Tensor* t : std::initializer_list<const Tensor*>{&a, &b, &out}) check_dtype("add", "operand", *t, DType::kF32);
  check_numel("add", "b", b, a.numel());
  check_numel("add", "out", out, a.numel());
  HT_DISPATCH(dev, add, a, b, out);
}

void scale(Tensor& x, float s) {
  const Device dev = check_same_device("scale", {{"x", &x}});
  check_dtype("scale", "x", x, DType::kF32);
  HT_DISPATCH(dev, scale, x, s);
}

void bias_add(Tensor& y, const Tensor& bias) {
  const Device dev = check_same_device("bias_add", {{"y", &y}, {"bias", &bias}});
  check_dtype("bias_add", "y", y, DType::kF32);
  check_dtype("bias_add", "bias", bias, DType::kF32);
  detail::check_ndim("bias_add", "bias", bias, 1);
  HT_CHECK(y.ndim() >= 1 && y.size(-1) == bias.size(0), ErrorKind::kShapeMismatch,
           "bias_add: last dimension of y {} must equal bias size {}", shape_str(y.shape()), bias.size(0));
  HT_DISPATCH(dev, bias_add, y, bias);
}

void bias_grad(const Tensor& dy, Tensor& dbias) {
  const Device dev = check_same_device("bias_grad", {{"dy", &dy}, {"dbias", &dbias}});
  check_dtype("bias_grad", "dy", dy, DType::kF32);
  check_dtype("bias_grad", "dbias", dbias, DType::kF32);
  detail::check_ndim("bias_grad", "dbias", dbias, 1);
  HT_CHECK(dy.ndim() >= 1 && dy.size(-1) == dbias.size(0), ErrorKind::kShapeMismatch,
           "bias_grad: last dimension of dy {} must equal dbias size {}", shape_str(dy.shape()), dbias.size(0));
  HT_DISPATCH(dev, bias_grad, dy, dbias);
}

void gelu_forward(const Tensor& x, Tensor& y) {
  const Device dev = check_same_device("gelu_forward", {{"x", &x}, {"y", &y}});
  check_dtype("gelu_forward", "x", x, DType::kF32);
  check_dtype("gelu_forward", "y", y, DType::kF32);
  check_numel("gelu_forward", "y", y, x.numel());
  HT_DISPATCH(dev, gelu_forward, x, y);
}

void gelu_backward(const Tensor& x, const Tensor& dy, Tensor& dx) {
  const Device dev = check_same_device("gelu_backward", {{"x", &x}, {"dy", &dy}, {"dx", &dx}});
  for (const Tensor* t : std::initializer_list<const Tensor*>{&x, &dy, &dx}) check_dtype("gelu_backward", "operand", *t, DType::kF32);
  check_numel("gelu_backward", "dy", dy, x.numel());
  check_numel("gelu_backward", "dx", dx, x.numel());
  HT_DISPATCH(dev, gelu_backward, x, dy, dx);
}

}  // namespace ht::ops
