// Casts, unscale-with-finite-check and sum of squares: validation and dispatch.
#include "ht/ops/cast.h"

#include "ops/backend_ops.h"
#include "ops/check.h"

namespace ht::ops {

void cast(const Tensor& src, Tensor& dst) {
  const Device dev = detail::check_same_device("cast", {{"src", &src}, {"dst", &dst}});
  detail::check_float_dtype("cast", "src", src);
  detail::check_float_dtype("cast", "dst", dst);
  detail::check_numel("cast", "dst", dst, src.numel());
  HT_DISPATCH(dev, cast, src, dst);
}

void scale_and_check_finite(Tensor& x, float scale, Tensor& found_nonfinite) {
  const char* op = "scale_and_check_finite";
  const Device dev = detail::check_same_device(op, {{"x", &x}, {"found_nonfinite", &found_nonfinite}});
  detail::check_float_dtype(op, "x", x);
  detail::check_scalar_f32(op, "found_nonfinite", found_nonfinite);
  HT_DISPATCH(dev, scale_and_check_finite, x, scale, found_nonfinite);
}

void sum_squares(const Tensor& x, Tensor& acc) {
  const Device dev = detail::check_same_device("sum_squares", {{"x", &x}, {"acc", &acc}});
  detail::check_float_dtype("sum_squares", "x", x);
  detail::check_scalar_f32("sum_squares", "acc", acc);
  HT_DISPATCH(dev, sum_squares, x, acc);
}

}  // namespace ht::ops
