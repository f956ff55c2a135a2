// Softmax and log-softmax over the last dimension: validation and dispatch;
// f16 and bf16 run the f32 drivers through F32Staging.
#include "ht/ops/softmax.h"

#include "ops/backend_ops.h"
#include "ops/check.h"
#include "ops/f32_staging.h"

namespace ht::ops {

using detail::F32Staging;
using detail::Staged;

void softmax_forward(const Tensor& x, Tensor& y, bool log) {
  const char* op = log ? "log_softmax_forward" : "softmax_forward";
  const Device dev = detail::check_same_device(op, {{"x", &x}, {"y", &y}});
  detail::check_compute_dtype(op, {{"x", &x}, {"y", &y}});
  HT_CHECK(x.ndim() >= 1, ErrorKind::kShapeMismatch, "{}: x must have a last dimension, got a scalar", op);
  detail::check_shape(op, "y", y, x.shape());
  F32Staging s;
  HT_DISPATCH(dev, softmax_forward, s.in(x), s.out(y, Staged::kOverwrite), log);
  s.commit();
}

void softmax_backward(const Tensor& y, const Tensor& dy, Tensor& dx, bool log) {
  const char* op = log ? "log_softmax_backward" : "softmax_backward";
  const Device dev = detail::check_same_device(op, {{"y", &y}, {"dy", &dy}, {"dx", &dx}});
  detail::check_compute_dtype(op, {{"y", &y}, {"dy", &dy}, {"dx", &dx}});
  HT_CHECK(y.ndim() >= 1, ErrorKind::kShapeMismatch, "{}: y must have a last dimension, got a scalar", op);
  detail::check_shape(op, "dy", dy, y.shape());
  detail::check_shape(op, "dx", dx, y.shape());
  F32Staging s;
  HT_DISPATCH(dev, softmax_backward, s.in(y), s.in(dy), s.out(dx, Staged::kOverwrite), log);
  s.commit();
}

}  // namespace ht::ops
