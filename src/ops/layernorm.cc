// LayerNorm: validation and dispatch; f16 and bf16 calls run the f32 drivers
// through F32Staging, with mean and rstd f32 either way.
#include "ht/ops/layernorm.h"

#include "ops/backend_ops.h"
#include "ops/check.h"
#include "ops/f32_staging.h"

namespace ht::ops {

using detail::check_dtype;
using detail::check_shape;

void layernorm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& y, Tensor& mean,
                       Tensor& rstd, float eps) {
  const char* op = "layernorm_forward";
  const Device dev = detail::check_same_device(
      op, {{"x", &x}, {"weight", &weight}, {"bias", &bias}, {"y", &y}, {"mean", &mean}, {"rstd", &rstd}});
  detail::check_ndim(op, "x", x, 2);
  HT_CHECK(x.size(1) > 0, ErrorKind::kShapeMismatch, "{}: rows of x {} are empty; there is nothing to normalise", op,
           shape_str(x.shape()));
  const Shape row{x.size(1)}, stat{x.size(0)};
  detail::check_compute_dtype(op, {{"x", &x}, {"weight", &weight}, {"bias", &bias}, {"y", &y}});
  check_dtype(op, "mean", mean, DType::kF32);
  check_dtype(op, "rstd", rstd, DType::kF32);
  check_shape(op, "weight", weight, row);
  check_shape(op, "bias", bias, row);
  check_shape(op, "y", y, x.shape());
  check_shape(op, "mean", mean, stat);
  check_shape(op, "rstd", rstd, stat);
  HT_CHECK_ARG(eps > 0.f, "{}: eps must be positive, got {}", op, eps);
  detail::F32Staging s;
  HT_DISPATCH(dev, layernorm_forward, s.in(x), s.in(weight), s.in(bias), s.out(y, detail::Staged::kOverwrite), mean,
              rstd, eps);
  s.commit();
}

void layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& mean,
                        const Tensor& rstd, Tensor& dx, Tensor& dweight, Tensor& dbias) {
  const char* op = "layernorm_backward";
  const Device dev = detail::check_same_device(op, {{"dy", &dy},
                                                    {"x", &x},
                                                    {"weight", &weight},
                                                    {"mean", &mean},
                                                    {"rstd", &rstd},
                                                    {"dx", &dx},
                                                    {"dweight", &dweight},
                                                    {"dbias", &dbias}});
  detail::check_ndim(op, "x", x, 2);
  const Shape row{x.size(1)}, stat{x.size(0)};
  detail::check_compute_dtype(
      op, {{"dy", &dy}, {"x", &x}, {"weight", &weight}, {"dx", &dx}, {"dweight", &dweight}, {"dbias", &dbias}});
  check_dtype(op, "mean", mean, DType::kF32);
  check_dtype(op, "rstd", rstd, DType::kF32);
  check_shape(op, "dy", dy, x.shape());
  check_shape(op, "dx", dx, x.shape());
  check_shape(op, "weight", weight, row);
  check_shape(op, "dweight", dweight, row);
  check_shape(op, "dbias", dbias, row);
  check_shape(op, "mean", mean, stat);
  check_shape(op, "rstd", rstd, stat);
  using detail::Staged;
  detail::F32Staging s;
  HT_DISPATCH(dev, layernorm_backward, s.in(dy), s.in(x), s.in(weight), mean, rstd, s.out(dx, Staged::kOverwrite),
              s.out(dweight, Staged::kAccumulate), s.out(dbias, Staged::kAccumulate));
  s.commit();
}

}  // namespace ht::ops
