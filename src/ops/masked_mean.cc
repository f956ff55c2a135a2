// Masked mean pooling: validation and dispatch; f16 and bf16 calls run the
// f32 drivers through F32Staging (the i32 mask passes through untouched).
#include "ht/ops/reduce.h"

#include "ops/backend_ops.h"
#include "ops/check.h"
#include "ops/f32_staging.h"

namespace ht::ops {
namespace masked_mean_check {  // a namespace of its own: the unity build shares file-local names

void check_mask_dtype(const char* op, const Tensor& mask) {
  HT_CHECK(mask.dtype() == DType::kI32, ErrorKind::kDTypeMismatch,
           "{}: 'mask' must be i32 (nonzero keeps a position, 0 drops it), got {}", op, dtype_name(mask.dtype()));
}

}  // namespace masked_mean_check

void masked_mean(const Tensor& x, const Tensor& mask, Tensor& out) {
  const char* op = "masked_mean";
  const Device dev = detail::check_same_device(op, {{"x", &x}, {"mask", &mask}, {"out", &out}});
  detail::check_compute_dtype(op, {{"x", &x}, {"out", &out}});
  masked_mean_check::check_mask_dtype(op, mask);
  HT_CHECK(x.ndim() == 3, ErrorKind::kShapeMismatch, "{}: 'x' must be 3-d (B, T, C), got shape {}", op,
           shape_str(x.shape()));
  const Shape mask_shape{x.size(0), x.size(1)};
  HT_CHECK(mask.shape() == mask_shape, ErrorKind::kShapeMismatch,
           "{}: 'mask' must have shape {} (B, T of x {}), got {}", op, shape_str(mask_shape), shape_str(x.shape()),
           shape_str(mask.shape()));
  const Shape out_shape{x.size(0), x.size(2)};
  HT_CHECK(out.shape() == out_shape, ErrorKind::kShapeMismatch,
           "{}: 'out' must have shape {} (B, C of x {}), got {}", op, shape_str(out_shape), shape_str(x.shape()),
           shape_str(out.shape()));
  detail::F32Staging s;
  HT_DISPATCH(dev, masked_mean, s.in(x), mask, s.out(out, detail::Staged::kOverwrite));
  s.commit();
}

void masked_mean_backward(const Tensor& dout, const Tensor& mask, Tensor& dx) {
  const char* op = "masked_mean_backward";
  const Device dev = detail::check_same_device(op, {{"dout", &dout}, {"mask", &mask}, {"dx", &dx}});
  detail::check_compute_dtype(op, {{"dout", &dout}, {"dx", &dx}});
  masked_mean_check::check_mask_dtype(op, mask);
  HT_CHECK(dout.ndim() == 2, ErrorKind::kShapeMismatch, "{}: 'dout' must be 2-d (B, C), got shape {}", op,
           shape_str(dout.shape()));
  HT_CHECK(mask.ndim() == 2 && mask.size(0) == dout.size(0), ErrorKind::kShapeMismatch,
           "{}: 'mask' must be 2-d (B, T) with B = {} rows, as 'dout' {}; got {}", op, dout.size(0),
           shape_str(dout.shape()), shape_str(mask.shape()));
  const Shape dx_shape{dout.size(0), mask.size(1), dout.size(1)};
  HT_CHECK(dx.shape() == dx_shape, ErrorKind::kShapeMismatch,
           "{}: 'dx' must have shape {} (B, C of dout {} with T of mask {}), got {}", op, shape_str(dx_shape),
           shape_str(dout.shape()), shape_str(mask.shape()), shape_str(dx.shape()));
  detail::F32Staging s;
  HT_DISPATCH(dev, masked_mean_backward, s.in(dout), mask, s.out(dx, detail::Staged::kOverwrite));
  s.commit();
}

}  // namespace ht::ops
