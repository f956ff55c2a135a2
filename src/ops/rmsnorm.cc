// RMSNorm: validation and dispatch; f16 and bf16 calls run the f32 drivers
// through F32Staging, with rstd f32 either way.
#include "ht/ops/rmsnorm.h"

#include "ops/backend_ops.h"
#include "ops/check.h"
#include "ops/f32_staging.h"

namespace ht::ops {

using detail::check_dtype;
using detail::check_shape;

void rmsnorm_forward(const Tensor& x, const Tensor& weight, Tensor& y, Tensor& rstd, float eps) {
  const char* op = "rmsnorm_forward";
  const Device dev = detail::check_same_device(op, {{"x", &x}, {"weight", &weight}, {"y", &y}, {"rstd", &rstd}});
  detail::check_ndim(op, "x", x, 2);
  HT_CHECK(x.size(1) > 0, ErrorKind::kShapeMismatch, "{}: rows of x {} are empty; there is nothing to normalise", op,
           shape_str(x.shape()));
  detail::check_compute_dtype(op, {{"x", &x}, {"weight", &weight}, {"y", &y}});
  check_dtype(op, "rstd", rstd, DType::kF32);
  check_shape(op, "weight", weight, {x.size(1)});
  check_shape(op, "y", y, x.shape());
  check_shape(op, "rstd", rstd, {x.size(0)});
  HT_CHECK_ARG(eps > 0.f, "{}: eps must be positive, got {}", op, eps);
  detail::F32Staging s;
  HT_DISPATCH(dev, rmsnorm_forward, s.in(x), s.in(weight), s.out(y, detail::Staged::kOverwrite), rstd, eps);
  s.commit();
}

void rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& rstd, Tensor& dx,
                      Tensor& dweight) {
  const char* op = "rmsnorm_backward";
  const Device dev = detail::check_same_device(
      op, {{"dy", &dy}, {"x", &x}, {"weight", &weight}, {"rstd", &rstd}, {"dx", &dx}, {"dweight", &dweight}});
  detail::check_ndim(op, "x", x, 2);
  detail::check_compute_dtype(op, {{"dy", &dy}, {"x", &x}, {"weight", &weight}, {"dx", &dx}, {"dweight", &dweight}});
  check_dtype(op, "rstd", rstd, DType::kF32);
  check_shape(op, "dy", dy, x.shape());
  check_shape(op, "dx", dx, x.shape());
  check_shape(op, "weight", weight, {x.size(1)});
  check_shape(op, "dweight", dweight, {x.size(1)});
  check_shape(op, "rstd", rstd, {x.size(0)});
  using detail::Staged;
  detail::F32Staging s;
  HT_DISPATCH(dev, rmsnorm_backward, s.in(dy), s.in(x), s.in(weight), rstd, s.out(dx, Staged::kOverwrite),
              s.out(dweight, Staged::kAccumulate));
  s.commit();
}

}  // namespace ht::ops
