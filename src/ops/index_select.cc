// index_select and its scatter-add backward: validation and dispatch. The
// indices are range-checked by the drivers (the CPU one while it reads them,
// the CUDA one with a device flag); drivers get `dim` counted from 0. f16
// and bf16 calls run the f32 drivers through F32Staging.
#include "ht/ops/index_select.h"

#include "ops/backend_ops.h"
#include "ops/check.h"
#include "ops/f32_staging.h"

namespace ht::ops {
namespace {

// Checks the index (K) i32 and that `small` is `big` with K at `dim`; returns dim counted from 0.
int check_common(const char* op, const char* big_name, const Tensor& big, int dim, const Tensor& index,
                 const char* small_name, const Tensor& small) {
  detail::check_compute_dtype(op, {{big_name, &big}, {small_name, &small}});
  detail::check_dtype(op, "index", index, DType::kI32);
  detail::check_ndim(op, "index", index, 1);
  HT_CHECK(big.ndim() >= 1, ErrorKind::kShapeMismatch, "{}: '{}' {} has no dimension to index", op, big_name,
           shape_str(big.shape()));
  dim = detail::check_dim(op, big_name, big.shape(), big.ndim(), dim);
  Shape want = big.shape();
  want[std::size_t(dim)] = index.size(0);
  HT_CHECK(small.shape() == want, ErrorKind::kShapeMismatch,
           "{}: '{}' must have shape {} ('{}' {} with dimension {} of the index's size {}), got {}", op, small_name,
           shape_str(want), big_name, shape_str(big.shape()), dim, index.size(0), shape_str(small.shape()));
  return dim;
}

}  // namespace

void index_select(const Tensor& x, int dim, const Tensor& index, Tensor& out) {
  const char* op = "index_select";
  const Device dev = detail::check_same_device(op, {{"x", &x}, {"index", &index}, {"out", &out}});
  dim = check_common(op, "x", x, dim, index, "out", out);
  detail::F32Staging s;
  HT_DISPATCH(dev, index_select, s.in(x), dim, index, s.out(out, detail::Staged::kOverwrite));
  s.commit();
}

void index_select_backward(const Tensor& dout, int dim, const Tensor& index, Tensor& dx) {
  const char* op = "index_select_backward";
  const Device dev = detail::check_same_device(op, {{"dout", &dout}, {"index", &index}, {"dx", &dx}});
  dim = check_common(op, "dx", dx, dim, index, "dout", dout);
  detail::F32Staging s;
  HT_DISPATCH(dev, index_select_backward, s.in(dout), dim, index, s.out(dx, detail::Staged::kOverwrite));
  s.commit();
}

}  // namespace ht::ops
