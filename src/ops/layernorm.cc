// LayerNorm: validation and dispatch.
#include "ht/ops/layernorm.h"

#include "ops/backend_ops.h"
#include "ops/check.h"

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
  for (const Tensor* t : std::initializer_list<const Tensor*>{&x, &weight, &bias, &y, &mean, &rstd}) check_dtype(op, "operand", *t, DType::kF32);
  check_shape(op, "weight", weight, row);
  check_shape(op, "bias", bias, row);
  check_shape(op, "y", y, x.shape());
  check_shape(op, "mean", mean, stat);
  check_shape(op, "rstd", rstd, stat);
  HT_CHECK_ARG(eps > 0.f, "{}: eps must be positive, got {}", op, eps);
  HT_DISPATCH(dev, layernorm_forward, x, weight, bias, y, mean, rstd, eps);
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
  for (const Tensor* t : std::initializer_list<const Tensor*>{&dy, &x, &weight, &mean, &rstd, &dx, &dweight, &dbias})
    check_dtype(op, "operand", *t, DType::kF32);
  check_shape(op, "dy", dy, x.shape());
  check_shape(op, "dx", dx, x.shape());
  check_shape(op, "weight", weight, row);
  check_shape(op, "dweight", dweight, row);
  check_shape(op, "dbias", dbias, row);
  check_shape(op, "mean", mean, stat);
  check_shape(op, "rstd", rstd, stat);
  HT_DISPATCH(dev, layernorm_backward, dy, x, weight, mean, rstd, dx, dweight, dbias);
}

}  // namespace ht::ops
