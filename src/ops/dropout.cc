// Dropout: validation and dispatch; p == 0 is a copy, and f16 and bf16 calls
// run the f32 drivers through F32Staging (x * scale or 0, one rounding: the
// same bits as a 16-bit driver would give).
#include "ht/ops/dropout.h"

#include "ops/backend_ops.h"
#include "ops/check.h"
#include "ops/f32_staging.h"

namespace ht::ops {

void dropout(const Tensor& x, float p, const DropoutKey& key, Tensor& out) {
  const char* op = "dropout";
  const Device dev = detail::check_same_device(op, {{"x", &x}, {"out", &out}});
  detail::check_compute_dtype(op, {{"x", &x}, {"out", &out}});
  HT_CHECK_ARG(p >= 0.f && p < 1.f,
               "{}: p = {} must be in [0, 1): the probability of dropping an element (p = 1 would drop all and "
               "scale by 1 / 0); pass 0 to keep everything",
               op, p);
  HT_CHECK_ARG(key.first_row >= 0,
               "{}: key.first_row = {} must not be negative: it is the global index of x's row 0 in the batch", op,
               key.first_row);
  HT_CHECK(x.ndim() >= 1, ErrorKind::kShapeMismatch,
           "{}: 'x' is 0-d, but dropout needs rows (dimension 0): view it as [1]", op);
  detail::check_shape(op, "out", out, x.shape());
  if (p == 0.f) {
    if (out.data_ptr() != x.data_ptr()) out.copy_from(x);
    return;
  }
  detail::F32Staging s;
  HT_DISPATCH(dev, dropout, s.in(x), p, key, s.out(out, detail::Staged::kOverwrite));
  s.commit();
}

}  // namespace ht::ops
